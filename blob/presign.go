package blob

import (
	"context"
	"encoding/base64"
	"fmt"
	"net/http"
	"strings"
	"time"
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
	// given (SignedHeader: a write's Content-Type, If-None-Match for
	// MethodPutIfAbsent); Host is left to the HTTP client.
	Header map[string]string `json:"headers,omitempty"`
	// Expires is when the signature stops being accepted (at the latest:
	// it is computed from a clock read just before signing, to the second).
	Expires time.Time `json:"expires_at"`
}

// Presigner makes presigned requests, so that a process without
// credentials (a worker machine) can reach exactly the objects it is given.
type Presigner interface {
	// PresignAll signs a request for each of objs, in order, valid for ttl
	// (at most MaxPresignExpiry). It needs no network: the signatures are
	// computed locally from the credentials. All are signed at one
	// instant, so that their URLs differ only in path, signed headers and
	// signature: AppendCompact relies on it.
	PresignAll(ctx context.Context, objs []Object, ttl time.Duration) ([]Presigned, error)
	// PresignCompact signs base and objs as PresignAll does, and returns
	// base's request and the others in the compact form (the lines
	// AppendCompact writes for them with base) without making their URLs:
	// what a machine's environment carries.
	PresignCompact(ctx context.Context, base Object, objs []Object, ttl time.Duration) (Presigned, string, error)
}

var _ Presigner = (*S3)(nil)

// PresignAll implements Presigner with SigV4 query-string signing, for the
// path-style URLs of the objects (see presigner). A PUT's Content-Type and
// Content-Length are not signed: the holder sends what it writes.
func (s *S3) PresignAll(_ context.Context, objs []Object, ttl time.Duration) ([]Presigned, error) {
	now := time.Now()
	date := amzDateOf(now)
	out := make([]Presigned, len(objs))
	for i, o := range objs {
		var err error
		if out[i], err = s.presign(o, ttl, now, &date); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// PresignCompact implements Presigner.
func (s *S3) PresignCompact(_ context.Context, base Object, objs []Object, ttl time.Duration) (Presigned, string, error) {
	return s.presignCompactAt(base, objs, ttl, time.Now())
}

func (s *S3) presignCompactAt(base Object, objs []Object, ttl time.Duration, now time.Time) (Presigned, string, error) {
	date := amzDateOf(now)
	p, err := s.presign(base, ttl, now, &date)
	if err != nil {
		return Presigned{}, "", err
	}
	ttl = ttl.Truncate(time.Second)
	size := 0
	for _, o := range objs {
		size += len(o.Method) + len(o.Bucket) + len(o.Key) + 48 // separators, signature
	}
	b := make([]byte, 0, size)
	for i, o := range objs {
		if err := checkPresign(o, ttl); err != nil {
			return Presigned{}, "", err
		}
		var ubuf [768]byte
		_, sig := s.presigner.appendSigned(ubuf[:0], o, ttl, &date)
		if i > 0 {
			b = append(b, '\n')
		}
		b = append(b, o.Method...)
		b = append(b, ' ')
		b = appendEscaped(b, o.Bucket, true)
		b = append(b, ' ')
		b = appendEscaped(b, o.Key, false)
		b = append(b, ' ')
		b = base64.RawURLEncoding.AppendEncode(b, sig[:])
	}
	return p, string(b), nil
}

// Presign is PresignAll for one object.
func (s *S3) Presign(_ context.Context, o Object, ttl time.Duration) (Presigned, error) {
	return s.presignAt(o, ttl, time.Now())
}

func (s *S3) presignAt(o Object, ttl time.Duration, now time.Time) (Presigned, error) {
	date := amzDateOf(now)
	return s.presign(o, ttl, now, &date)
}

// presign signs o at now, which date is.
func (s *S3) presign(o Object, ttl time.Duration, now time.Time, date *amzDate) (Presigned, error) {
	ttl = ttl.Truncate(time.Second)
	if err := checkPresign(o, ttl); err != nil {
		return Presigned{}, err
	}
	p := Presigned{Object: o, URL: s.presigner.sign(o, ttl, date),
		// X-Amz-Date has whole seconds.
		Expires: now.UTC().Truncate(time.Second).Add(ttl)}
	p.Header = SignedHeader(o)
	return p, nil
}

// SignedHeader is the header a presigned request on o must carry as it is:
// a write's Content-Type, ContentTypeOf its key, so that its holder cannot
// store another type (text/html on a public bucket, say), and a
// MethodPutIfAbsent's If-None-Match: *. Nil for a read.
func SignedHeader(o Object) map[string]string {
	switch o.Method {
	case MethodPutIfAbsent:
		return map[string]string{"Content-Type": ContentTypeOf(o.Key), "If-None-Match": "*"}
	case MethodPut:
		return map[string]string{"Content-Type": ContentTypeOf(o.Key)}
	}
	return nil
}

// contentTypes are the media types of the extensions workers write, and
// of the originals they archive; any other is application/octet-stream.
var contentTypes = map[string]string{
	".jpg": "image/jpeg", ".jpeg": "image/jpeg", ".png": "image/png", ".gif": "image/gif", ".webp": "image/webp",
	".tif": "image/tiff", ".tiff": "image/tiff", ".bmp": "image/bmp", ".heic": "image/heic", ".avif": "image/avif",
	".pdf": "application/pdf", ".txt": "text/plain; charset=utf-8", ".json": "application/json",
}

// ContentTypeOf is the media type a presigned write of key stores: that
// of its extension (in any case) among contentTypes, or
// application/octet-stream, which no browser renders.
func ContentTypeOf(key string) string {
	if i := strings.LastIndexByte(key, '.'); i >= 0 && !strings.ContainsRune(key[i:], '/') {
		if t, ok := contentTypes[strings.ToLower(key[i:])]; ok {
			return t
		}
	}
	return "application/octet-stream"
}

// checkPresign refuses what cannot be presigned: an unknown method, a
// validity (whole seconds) SigV4 does not allow, no bucket or key.
func checkPresign(o Object, ttl time.Duration) error {
	switch {
	case !o.Method.Valid():
		return fmt.Errorf("presigning s3://%s/%s: unknown method %q", o.Bucket, o.Key, o.Method)
	case ttl <= 0 || ttl > MaxPresignExpiry:
		return fmt.Errorf("presigning s3://%s/%s: validity %v is not within [1s, %v]", o.Bucket, o.Key, ttl, MaxPresignExpiry)
	case o.Bucket == "" || o.Key == "":
		return fmt.Errorf("presigning s3://%s/%s: bucket and key are required", o.Bucket, o.Key)
	}
	return nil
}
