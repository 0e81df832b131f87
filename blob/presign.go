package blob

import (
	"context"
	"fmt"
	"maps"
	"net/http"
	"slices"
	"time"
	"unicode/utf8"
)

// Method is what a presigned URL lets its holder do to one object.
type Method string

// The methods a URL can be presigned for.
const (
	// MethodGet reads the object (HTTP GET).
	MethodGet Method = "GET"
	// MethodPut writes the object, replacing any (HTTP PUT).
	MethodPut Method = "PUT"
	// MethodPutIfAbsent writes the object only if the key is free: an HTTP
	// PUT whose signature covers "If-None-Match: *", so the holder cannot
	// drop the condition and overwrite (Store.PutIfAbsent).
	MethodPutIfAbsent Method = "PUT_IF_ABSENT"
)

// Valid reports whether m is one of the methods above.
func (m Method) Valid() bool {
	return m == MethodGet || m == MethodPut || m == MethodPutIfAbsent
}

// HTTPMethod is the HTTP method of a request made with the URL.
func (m Method) HTTPMethod() string {
	if m == MethodGet {
		return http.MethodGet
	}
	return http.MethodPut
}

// MaxPresignExpiry is the longest validity SigV4 allows a presigned URL.
const MaxPresignExpiry = 7 * 24 * time.Hour

// MaxPresignBatch bounds the objects of one request for URLs (a worker's
// POST /callback/:batchId/:taskId/urls).
const MaxPresignBatch = 1000

// Object names one object and what is to be done to it.
type Object struct {
	Method Method `json:"method"`
	Bucket string `json:"bucket"`
	Key    string `json:"key"`
}

// Presigned is a request on one object that anyone holding it may make,
// without credentials, until Expires. The URL carries a signature: it is as
// secret as a credential until it expires, and is never logged whole.
type Presigned struct {
	Object
	// URL is the request's URL, signature included.
	URL string `json:"url"`
	// Header holds the signed headers the request must carry exactly as
	// given (If-None-Match for MethodPutIfAbsent); Host is left to the
	// HTTP client.
	Header map[string]string `json:"headers,omitempty"`
	// Expires is when the signature stops being accepted (at the latest:
	// it is computed from a clock read just before signing, to the second).
	Expires time.Time `json:"expires_at"`
}

// Presigner makes presigned requests, so that a process without
// credentials (a worker machine) can reach exactly the objects it is given.
type Presigner interface {
	// Presign signs a request for o valid for ttl (at most
	// MaxPresignExpiry). It needs no network: the signature is computed
	// locally from the credentials.
	Presign(ctx context.Context, o Object, ttl time.Duration) (Presigned, error)
}

var _ Presigner = (*S3)(nil)

// Presign implements Presigner with SigV4 query-string signing, for the
// path-style URL of the object (see presigner). A PUT's Content-Type and
// Content-Length are not signed: the holder sends what it writes.
func (s *S3) Presign(_ context.Context, o Object, ttl time.Duration) (Presigned, error) {
	return s.presignAt(o, ttl, time.Now())
}

// PresignAll presigns each of objs as Presign does, in order, all at one
// instant, so that their URLs differ only in path, signed headers and
// signature: AppendCompact relies on it.
func (s *S3) PresignAll(_ context.Context, objs []Object, ttl time.Duration) ([]Presigned, error) {
	now := time.Now()
	out := make([]Presigned, len(objs))
	for i, o := range objs {
		var err error
		if out[i], err = s.presignAt(o, ttl, now); err != nil {
			return nil, err
		}
	}
	return out, nil
}

func (s *S3) presignAt(o Object, ttl time.Duration, now time.Time) (Presigned, error) {
	ttl = ttl.Truncate(time.Second)
	switch {
	case !o.Method.Valid():
		return Presigned{}, fmt.Errorf("presigning s3://%s/%s: unknown method %q", o.Bucket, o.Key, o.Method)
	case ttl <= 0 || ttl > MaxPresignExpiry:
		return Presigned{}, fmt.Errorf("presigning s3://%s/%s: validity %v is not within [1s, %v]", o.Bucket, o.Key, ttl, MaxPresignExpiry)
	case o.Bucket == "" || o.Key == "":
		return Presigned{}, fmt.Errorf("presigning s3://%s/%s: bucket and key are required", o.Bucket, o.Key)
	}
	p := Presigned{Object: o, URL: s.presigner.sign(o, ttl, now),
		// X-Amz-Date has whole seconds.
		Expires: now.UTC().Truncate(time.Second).Add(ttl)}
	if o.Method == MethodPutIfAbsent {
		p.Header = map[string]string{"If-None-Match": "*"}
	}
	return p, nil
}

// AppendJSON appends urls as a JSON array, as encoding/json would (HTML
// characters unescaped), at a fraction of its cost: a launch encodes its
// machine's URLs into OUTPUT_URLS.
func AppendJSON(b []byte, urls []Presigned) []byte {
	b = append(b, '[')
	for i, u := range urls {
		if i > 0 {
			b = append(b, ',')
		}
		b = append(b, `{"method":`...)
		b = appendJSONString(b, string(u.Method))
		b = append(b, `,"bucket":`...)
		b = appendJSONString(b, u.Bucket)
		b = append(b, `,"key":`...)
		b = appendJSONString(b, u.Key)
		b = append(b, `,"url":`...)
		b = appendJSONString(b, u.URL)
		if len(u.Header) > 0 {
			b = append(b, `,"headers":{`...)
			for j, k := range slices.Sorted(maps.Keys(u.Header)) {
				if j > 0 {
					b = append(b, ',')
				}
				b = appendJSONString(b, k)
				b = append(b, ':')
				b = appendJSONString(b, u.Header[k])
			}
			b = append(b, '}')
		}
		b = append(b, `,"expires_at":"`...)
		b = u.Expires.AppendFormat(b, time.RFC3339Nano)
		b = append(b, `"}`...)
	}
	return append(b, ']')
}

// appendJSONString appends s as a JSON string: quotes, backslashes,
// control characters and U+2028 and U+2029 escaped, invalid UTF-8
// replaced by U+FFFD. Runs that need no escaping are copied whole.
func appendJSONString(b []byte, s string) []byte {
	const hexDigits = "0123456789abcdef"
	b = append(b, '"')
	start := 0
	for i := 0; i < len(s); {
		c := s[i]
		if c >= 0x20 && c != '"' && c != '\\' && c < utf8.RuneSelf {
			i++
			continue
		}
		b = append(b, s[start:i]...)
		size := 1
		switch {
		case c == '"' || c == '\\':
			b = append(b, '\\', c)
		case c == '\n':
			b = append(b, '\\', 'n')
		case c == '\r':
			b = append(b, '\\', 'r')
		case c == '\t':
			b = append(b, '\\', 't')
		case c == '\b':
			b = append(b, '\\', 'b')
		case c == '\f':
			b = append(b, '\\', 'f')
		case c < 0x20:
			b = append(b, '\\', 'u', '0', '0', hexDigits[c>>4], hexDigits[c&15])
		default:
			var r rune
			r, size = utf8.DecodeRuneInString(s[i:])
			switch {
			case r == utf8.RuneError && size == 1:
				b = append(b, `\ufffd`...)
			case r == '\u2028' || r == '\u2029':
				b = append(b, '\\', 'u', '2', '0', '2', hexDigits[r&15])
			default:
				b = append(b, s[i:i+size]...)
			}
		}
		i += size
		start = i
	}
	b = append(b, s[start:]...)
	return append(b, '"')
}
