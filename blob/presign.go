package blob

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"time"

	"github.com/aws/smithy-go/encoding/httpbinding"
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
// path-style URL of the object. A PUT's Content-Type and Content-Length are
// not signed: the holder sends what it writes. It uses the SDK's signer
// alone: the S3 client's presign middleware is some 30 times slower, and a
// launch presigns several URLs.
func (s *S3) Presign(ctx context.Context, o Object, ttl time.Duration) (Presigned, error) {
	ttl = ttl.Truncate(time.Second)
	switch {
	case !o.Method.Valid():
		return Presigned{}, fmt.Errorf("presigning s3://%s/%s: unknown method %q", o.Bucket, o.Key, o.Method)
	case ttl <= 0 || ttl > MaxPresignExpiry:
		return Presigned{}, fmt.Errorf("presigning s3://%s/%s: validity %v is not within [1s, %v]", o.Bucket, o.Key, ttl, MaxPresignExpiry)
	case o.Bucket == "" || o.Key == "":
		return Presigned{}, fmt.Errorf("presigning s3://%s/%s: bucket and key are required", o.Bucket, o.Key)
	}
	u, err := url.Parse(s.endpoint + "/" + httpbinding.EscapePath(o.Bucket, true) + "/" + httpbinding.EscapePath(o.Key, false) +
		"?X-Amz-Expires=" + strconv.FormatInt(int64(ttl/time.Second), 10))
	if err != nil {
		return Presigned{}, fmt.Errorf("presigning s3://%s/%s: %w", o.Bucket, o.Key, err)
	}
	req := &http.Request{Method: o.Method.HTTPMethod(), URL: u, Host: u.Host, Header: http.Header{}}
	if o.Method == MethodPutIfAbsent {
		req.Header.Set("If-None-Match", "*")
	}
	creds, err := s.credentials.Retrieve(ctx)
	if err != nil {
		return Presigned{}, fmt.Errorf("presigning s3://%s/%s: credentials: %w", o.Bucket, o.Key, err)
	}
	// X-Amz-Date has whole seconds: the URL expires ttl after now, truncated.
	now := time.Now().UTC()
	signed, header, err := s.signer.PresignHTTP(ctx, creds, req, unsignedPayload, "s3", s.region, now)
	if err != nil {
		return Presigned{}, fmt.Errorf("presigning %s s3://%s/%s: %w", o.Method, o.Bucket, o.Key, err)
	}
	p := Presigned{Object: o, URL: signed, Expires: now.Truncate(time.Second).Add(ttl)}
	for name, values := range header {
		if name == "Host" || len(values) == 0 {
			continue
		}
		if p.Header == nil {
			p.Header = make(map[string]string, len(header))
		}
		p.Header[name] = values[0]
	}
	return p, nil
}

// unsignedPayload is the payload hash of a presigned request: the body is
// whatever the holder sends.
const unsignedPayload = "UNSIGNED-PAYLOAD"
