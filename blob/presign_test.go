package blob_test

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	v4 "github.com/aws/aws-sdk-go-v2/aws/signer/v4"
	"github.com/aws/smithy-go/encoding/httpbinding"
	"github.com/stretchr/testify/require"

	"github.com/arke-institute/orchestrator/blob"
	"github.com/arke-institute/orchestrator/internal/harness/s3test"
)

// do makes the request a presigned URL describes, with its signed headers
// unless drop names one to leave out.
func do(t *testing.T, p blob.Presigned, body []byte, contentType string, drop ...string) (int, []byte, http.Header) {
	t.Helper()
	var r io.Reader
	if body != nil {
		r = bytes.NewReader(body)
	}
	req, err := http.NewRequest(p.Method.HTTPMethod(), p.URL, r)
	require.NoError(t, err)
	for k, v := range p.Header {
		if !contains(drop, k) {
			req.Header.Set(k, v)
		}
	}
	if contentType != "" {
		req.Header.Set("Content-Type", contentType)
	}
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	got, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return resp.StatusCode, got, resp.Header
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if strings.EqualFold(x, s) {
			return true
		}
	}
	return false
}

// TestPresignRoundTrip: URLs presigned by the store work against a real
// S3 server that checks SigV4 query signatures, for exactly the request
// signed: its method, its key, and a PUT-if-absent's condition.
func TestPresignRoundTrip(t *testing.T) {
	t.Parallel()
	store, bucket := newStore(t)
	ctx := context.Background()
	presign := func(m blob.Method, key string) blob.Presigned {
		t.Helper()
		p, err := store.Presign(ctx, blob.Object{Method: m, Bucket: bucket, Key: key}, 15*time.Minute)
		require.NoError(t, err)
		require.Equal(t, m, p.Method)
		require.Equal(t, key, p.Key)
		require.WithinDuration(t, time.Now().Add(15*time.Minute), p.Expires, 2*time.Second)
		require.NotContains(t, p.URL, s3test.Start(t).SecretKey(), "the secret never appears in a URL")
		return p
	}

	t.Run("Get", func(t *testing.T) {
		body := randomBytes(t, 100<<10)
		require.NoError(t, store.Put(ctx, bucket, "get/ä b+c=%~&.bin", bytes.NewReader(body), int64(len(body)), "image/jpeg"))
		p := presign(blob.MethodGet, "get/ä b+c=%~&.bin")
		require.Empty(t, p.Header)
		code, got, h := do(t, p, nil, "")
		require.Equal(t, http.StatusOK, code, string(got))
		require.Equal(t, body, got)
		require.Equal(t, "image/jpeg", h.Get("Content-Type"))

		code, _, _ = do(t, presign(blob.MethodGet, "get/missing"), nil, "")
		require.Equal(t, http.StatusNotFound, code)
	})

	t.Run("Put", func(t *testing.T) {
		p := presign(blob.MethodPut, "put/x.jpg")
		for _, body := range []string{"first", "second"} {
			code, msg, _ := do(t, p, []byte(body), "image/jpeg")
			require.Equal(t, http.StatusOK, code, string(msg))
			got, err := store.Get(ctx, bucket, "put/x.jpg")
			require.NoError(t, err)
			require.Equal(t, body, string(got), "a PUT replaces")
		}
		code, _, h := do(t, presign(blob.MethodGet, "put/x.jpg"), nil, "")
		require.Equal(t, http.StatusOK, code)
		require.Equal(t, "image/jpeg", h.Get("Content-Type"), "the signed Content-Type is stored")
	})

	// A write's Content-Type follows from its key and is signed: the
	// holder cannot store a page for browsers to render.
	t.Run("ContentTypeSigned", func(t *testing.T) {
		p := presign(blob.MethodPut, "put/y.jpg")
		require.Equal(t, map[string]string{"Content-Type": "image/jpeg"}, p.Header)
		code, _, _ := do(t, p, []byte("<script>"), "text/html")
		require.Equal(t, http.StatusForbidden, code)
		code, _, _ = do(t, p, []byte("<script>"), "", "Content-Type")
		require.Equal(t, http.StatusForbidden, code)
		html := presign(blob.MethodPut, "put/page.html")
		require.Equal(t, map[string]string{"Content-Type": "application/octet-stream"}, html.Header)
		code, msg, _ := do(t, html, []byte("<script>"), "")
		require.Equal(t, http.StatusOK, code, string(msg))
		_, _, h := do(t, presign(blob.MethodGet, "put/page.html"), nil, "")
		require.Equal(t, "application/octet-stream", h.Get("Content-Type"))
		ifAbsent := presign(blob.MethodPutIfAbsent, "put/z.txt")
		code, _, _ = do(t, ifAbsent, []byte("text"), "text/html")
		require.Equal(t, http.StatusForbidden, code)
		require.Equal(t, "text/plain; charset=utf-8", blob.ContentTypeOf("a/B.TXT"))
		require.Equal(t, "application/octet-stream", blob.ContentTypeOf("a.jpg/noext"))
	})

	t.Run("PutIfAbsent", func(t *testing.T) {
		p := presign(blob.MethodPutIfAbsent, "once/x.jpg")
		require.Equal(t, map[string]string{"Content-Type": "image/jpeg", "If-None-Match": "*"}, p.Header)

		code, msg, _ := do(t, p, []byte("first"), "")
		require.Equal(t, http.StatusOK, code, string(msg))
		code, _, _ = do(t, p, []byte("second"), "")
		require.Equal(t, http.StatusPreconditionFailed, code)
		// Without the condition the signature does not match: the holder
		// cannot turn the URL into an overwrite.
		code, _, _ = do(t, p, []byte("third"), "", "If-None-Match")
		require.Equal(t, http.StatusForbidden, code)
		got, err := store.Get(ctx, bucket, "once/x.jpg")
		require.NoError(t, err)
		require.Equal(t, "first", string(got))
	})

	t.Run("OnlyWhatWasSigned", func(t *testing.T) {
		require.NoError(t, store.Put(ctx, bucket, "only/a", strings.NewReader("a"), 1, ""))
		require.NoError(t, store.Put(ctx, bucket, "only/b", strings.NewReader("b"), 1, ""))
		get := presign(blob.MethodGet, "only/a")

		// Another key with a's signature.
		u, err := url.Parse(get.URL)
		require.NoError(t, err)
		u.Path = strings.TrimSuffix(u.Path, "/a") + "/b"
		other := get
		other.URL = u.String()
		code, _, _ := do(t, other, nil, "")
		require.Equal(t, http.StatusForbidden, code)

		// A PUT with a GET's signature.
		asPut := get
		asPut.Method = blob.MethodPut
		code, _, _ = do(t, asPut, []byte("x"), "")
		require.Equal(t, http.StatusForbidden, code)
		got, err := store.Get(ctx, bucket, "only/a")
		require.NoError(t, err)
		require.Equal(t, "a", string(got))
	})

	t.Run("BadRequests", func(t *testing.T) {
		for name, c := range map[string]struct {
			o   blob.Object
			ttl time.Duration
			err string
		}{
			"Method":   {blob.Object{Method: "DELETE", Bucket: bucket, Key: "k"}, time.Minute, `unknown method "DELETE"`},
			"Zero":     {blob.Object{Method: blob.MethodGet, Bucket: bucket, Key: "k"}, 0, "validity 0s is not within"},
			"TooLong":  {blob.Object{Method: blob.MethodGet, Bucket: bucket, Key: "k"}, blob.MaxPresignExpiry + time.Second, "validity 168h0m1s is not within"},
			"SevenDay": {blob.Object{Method: blob.MethodGet, Bucket: bucket, Key: "k"}, blob.MaxPresignExpiry, ""},
		} {
			t.Run(name, func(t *testing.T) {
				_, err := store.Presign(ctx, c.o, c.ttl)
				if c.err == "" {
					require.NoError(t, err)
					return
				}
				require.ErrorContains(t, err, c.err)
			})
		}
	})
}

// BenchmarkPresign is the cost of one URL, which a launch pays for each
// URL in the machine's env.
func BenchmarkPresign(b *testing.B) {
	store, err := blob.NewS3(blob.S3Config{Endpoint: "http://127.0.0.1:1", AccessKeyID: "id", SecretAccessKey: "secret"})
	require.NoError(b, err)
	ctx := context.Background()
	for _, m := range []blob.Method{blob.MethodGet, blob.MethodPutIfAbsent} {
		b.Run(string(m), func(b *testing.B) {
			for b.Loop() {
				if _, err := store.Presign(ctx, blob.Object{Method: m, Bucket: "arke-staging", Key: "staging/01BATCH/dir/photo.jpg"}, time.Hour); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// TestPresignMatchesTheSDK: the store's own SigV4 signer makes exactly the
// URL the AWS SDK's signer makes for the same request and time, for keys
// that need escaping and for each method.
func TestPresignMatchesTheSDK(t *testing.T) {
	t.Parallel()
	cfg := blob.S3Config{Endpoint: "http://127.0.0.1:7070", AccessKeyID: "AKIDEXAMPLE", SecretAccessKey: "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY"}
	store, err := blob.NewS3(cfg)
	require.NoError(t, err)
	sdk := v4.NewSigner(func(o *v4.SignerOptions) { o.DisableURIPathEscaping = true })
	creds := aws.Credentials{AccessKeyID: cfg.AccessKeyID, SecretAccessKey: cfg.SecretAccessKey}

	for i, key := range []string{"staging/B/photo.jpg", "staging/B/ä b+c=%~&?#.bin", "x", "staging/B/dir/sub/a'b(c)*!.tif", "staging/B//x/./y"} {
		for _, m := range []blob.Method{blob.MethodGet, blob.MethodPut, blob.MethodPutIfAbsent} {
			now := time.Date(2025, 10, 29, 23, 59, 59, 999, time.UTC).Add(time.Duration(i) * time.Hour) // days change
			ttl := 2*time.Hour + 15*time.Minute
			got, err := blob.PresignAt(store, blob.Object{Method: m, Bucket: "arke-staging", Key: key}, ttl, now)
			require.NoError(t, err)

			req, err := http.NewRequest(m.HTTPMethod(), cfg.Endpoint+"/arke-staging/"+httpbinding.EscapePath(key, false)+"?X-Amz-Expires=8100", nil)
			require.NoError(t, err)
			if m == blob.MethodPutIfAbsent {
				req.Header.Set("If-None-Match", "*")
			}
			if m != blob.MethodGet {
				req.Header.Set("Content-Type", blob.ContentTypeOf(key))
			}
			want, wantHeader, err := sdk.PresignHTTP(context.Background(), creds, req, "UNSIGNED-PAYLOAD", "s3", "auto", now)
			require.NoError(t, err)

			gotURL, err := url.Parse(got.URL)
			require.NoError(t, err)
			wantURL, err := url.Parse(want)
			require.NoError(t, err)
			require.Equal(t, wantURL.EscapedPath(), gotURL.EscapedPath(), "%s %s", m, key)
			require.Equal(t, wantURL.Query(), gotURL.Query(), "%s %s", m, key)
			require.Equal(t, wantURL.Host, gotURL.Host)
			wantHeader.Del("Host")
			for k := range wantHeader {
				require.Equal(t, wantHeader.Get(k), got.Header[k], k)
			}
			require.Len(t, got.Header, len(wantHeader))
		}
	}
}
