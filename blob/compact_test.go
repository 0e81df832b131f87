package blob_test

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/hex"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/arke-institute/orchestrator/blob"
)

// keysToEscape are keys whose URL paths escape bytes: spaces, unicode, "+",
// "%", reserved characters, empty and dot segments, invalid UTF-8.
var keysToEscape = []string{"staging/B/photo.jpg", "staging/B/ä b+c=%~&?#.bin", "x", "staging/B/dir/sub/a'b(c)*!.tif",
	"staging/B//x/./y", "staging/B/%2F%25+%20.jpg", "staging/B/a\xffb", "staging/B/日本 語.tif"}

// presignAllAt signs objs as PresignAll does, at now.
func presignAllAt(t *testing.T, store *blob.S3, objs []blob.Object, ttl time.Duration, now time.Time) []blob.Presigned {
	t.Helper()
	out := make([]blob.Presigned, len(objs))
	for i, o := range objs {
		var err error
		out[i], err = blob.PresignAt(store, o, ttl, now)
		require.NoError(t, err)
	}
	return out
}

// asWorker is base as a worker knows it: its object and URL, not when it
// expires.
func asWorker(base blob.Presigned) blob.Presigned {
	return blob.Presigned{Object: base.Object, URL: base.URL}
}

// TestCompactRoundTrip: the requests ParseCompact rebuilds are the ones the
// signer made, byte for byte, for keys that need escaping and for each
// method, with an endpoint that has a path of its own.
func TestCompactRoundTrip(t *testing.T) {
	t.Parallel()
	store, err := blob.NewS3(blob.S3Config{Endpoint: "https://acct.r2.example.com/s3/", AccessKeyID: "AKID/+x", SecretAccessKey: "secret"})
	require.NoError(t, err)
	now := time.Date(2025, 10, 29, 23, 59, 59, 999, time.UTC)
	for _, baseKey := range keysToEscape {
		objs := []blob.Object{{Method: blob.MethodGet, Bucket: "arke-staging", Key: baseKey}}
		for _, key := range keysToEscape {
			for _, m := range []blob.Method{blob.MethodGet, blob.MethodPut, blob.MethodPutIfAbsent} {
				objs = append(objs, blob.Object{Method: m, Bucket: "arke.cdn-1", Key: key})
			}
		}
		urls := presignAllAt(t, store, objs, 2*time.Hour+15*time.Minute, now)
		lines, err := blob.AppendCompact(nil, urls[0], urls[1:])
		require.NoError(t, err)
		require.Equal(t, len(urls)-2, bytes.Count(lines, []byte("\n")))
		require.NotContains(t, string(lines), "X-Amz", "only what differs")
		got, err := blob.ParseCompact(asWorker(urls[0]), string(lines))
		require.NoError(t, err)
		require.Equal(t, urls[1:], got, baseKey)
	}

	const query = "?X-Amz-Date=20251029T120000Z&X-Amz-Expires=60&X-Amz-SignedHeaders="
	base := blob.Presigned{Object: blob.Object{Method: blob.MethodGet, Bucket: "b", Key: "k"}, URL: "https://h/b/k" + query + "host&X-Amz-Signature=01"}
	put := blob.Presigned{Object: blob.Object{Method: blob.MethodPut, Bucket: "b", Key: "a b+%ü"},
		URL:    "https://h/b/a%20b%2B%25%C3%BC" + query + "content-type%3Bhost&X-Amz-Signature=" + strings.Repeat("00ff", 16),
		Header: map[string]string{"Content-Type": "application/octet-stream"}, Expires: time.Date(2025, 10, 29, 12, 1, 0, 0, time.UTC)}
	line, err := blob.AppendCompact(nil, base, []blob.Presigned{put})
	require.NoError(t, err)
	require.Equal(t, "PUT b a%20b%2B%25%C3%BC AP8A_wD_AP8A_wD_AP8A_wD_AP8A_wD_AP8A_wD_AP8", string(line), "the format")
}

// TestPresignCompact: PresignCompact writes the lines AppendCompact makes
// of the URLs PresignAll signs, and refuses what Presign refuses.
func TestPresignCompact(t *testing.T) {
	t.Parallel()
	store, err := blob.NewS3(blob.S3Config{Endpoint: "https://acct.r2.example.com/s3/", AccessKeyID: "AKID/+x", SecretAccessKey: "secret"})
	require.NoError(t, err)
	now := time.Date(2025, 10, 29, 23, 59, 59, 999, time.UTC)
	ttl := 2*time.Hour + 15*time.Minute + time.Millisecond
	base := blob.Object{Method: blob.MethodGet, Bucket: "arke-staging", Key: keysToEscape[1]}
	var objs []blob.Object
	for _, key := range keysToEscape {
		for _, m := range []blob.Method{blob.MethodGet, blob.MethodPut, blob.MethodPutIfAbsent} {
			objs = append(objs, blob.Object{Method: m, Bucket: "arke.cdn-1", Key: key})
		}
	}
	gotBase, lines, err := blob.PresignCompactAt(store, base, objs, ttl, now)
	require.NoError(t, err)
	urls := presignAllAt(t, store, append([]blob.Object{base}, objs...), ttl, now)
	require.Equal(t, urls[0], gotBase)
	want, err := blob.AppendCompact(nil, urls[0], urls[1:])
	require.NoError(t, err)
	require.Equal(t, string(want), lines)

	_, _, err = blob.PresignCompactAt(store, base, []blob.Object{{Method: "DELETE", Bucket: "b", Key: "k"}}, ttl, now)
	require.ErrorContains(t, err, `unknown method "DELETE"`)
	_, _, err = blob.PresignCompactAt(store, base, []blob.Object{{Method: blob.MethodPut, Bucket: "b"}}, ttl, now)
	require.ErrorContains(t, err, "bucket and key are required")
	_, _, err = blob.PresignCompactAt(store, base, objs, blob.MaxPresignExpiry+time.Second, now)
	require.ErrorContains(t, err, "is not within")
}

// TestCompactUnsigned: unsigned URLs (no query, as tests and benchmarks
// make) compact to lines without a signature.
func TestCompactUnsigned(t *testing.T) {
	t.Parallel()
	expires := time.Date(2025, 10, 29, 12, 0, 0, 0, time.UTC)
	p := func(m blob.Method, bucket, key, url string) blob.Presigned {
		o := blob.Object{Method: m, Bucket: bucket, Key: key}
		return blob.Presigned{Object: o, URL: url, Expires: expires, Header: blob.SignedHeader(o)}
	}
	base := p(blob.MethodGet, "s", "staging/B/a b.jpg", "http://127.0.0.1:1/s/staging/B/a%20b.jpg")
	urls := []blob.Presigned{p(blob.MethodPut, "cdn", "v/a.jpg", "http://127.0.0.1:1/cdn/v/a.jpg"),
		p(blob.MethodPutIfAbsent, "s", "t/a+.jpg", "http://127.0.0.1:1/s/t/a%2B.jpg")}
	lines, err := blob.AppendCompact(nil, base, urls)
	require.NoError(t, err)
	require.Equal(t, "PUT cdn v/a.jpg\nPUT_IF_ABSENT s t/a%2B.jpg", string(lines))
	got, err := blob.ParseCompact(base, string(lines))
	require.NoError(t, err)
	require.Equal(t, urls, got)
}

// TestCompactRefuses: AppendCompact refuses a request it could not rebuild,
// and ParseCompact a line AppendCompact would not write, never quoting a
// signature.
func TestCompactRefuses(t *testing.T) {
	t.Parallel()
	store, err := blob.NewS3(blob.S3Config{Endpoint: "http://127.0.0.1:1", AccessKeyID: "id", SecretAccessKey: "secret"})
	require.NoError(t, err)
	now := time.Date(2025, 10, 29, 12, 0, 0, 0, time.UTC)
	get := blob.Object{Method: blob.MethodGet, Bucket: "s", Key: "staging/B/a.jpg"}
	put := blob.Object{Method: blob.MethodPutIfAbsent, Bucket: "s", Key: "staging/B/a b.jpg"}
	urls := presignAllAt(t, store, []blob.Object{get, put}, time.Hour, now)
	base, out := urls[0], urls[1]
	sig := out.URL[strings.LastIndex(out.URL, "=")+1:]
	raw, err := hex.DecodeString(sig)
	require.NoError(t, err)
	sig64 := base64.RawURLEncoding.EncodeToString(raw)

	other, err := blob.NewS3(blob.S3Config{Endpoint: "http://127.0.0.1:2", AccessKeyID: "id", SecretAccessKey: "secret"})
	require.NoError(t, err)
	mutate := func(f func(*blob.Presigned)) blob.Presigned {
		u := out
		u.Header = blob.SignedHeader(out.Object)
		f(&u)
		return u
	}
	for name, u := range map[string]blob.Presigned{
		"OtherInstant":  presignAllAt(t, store, []blob.Object{put}, time.Hour, now.Add(time.Second))[0],
		"OtherValidity": presignAllAt(t, store, []blob.Object{put}, time.Hour+time.Second, now)[0],
		"OtherEndpoint": presignAllAt(t, other, []blob.Object{put}, time.Hour, now)[0],
		"OtherKey":      mutate(func(u *blob.Presigned) { u.Key = "staging/B/a+b.jpg" }),
		"OtherMethod":   mutate(func(u *blob.Presigned) { u.Method = blob.MethodPut }),
		"NoCondition":   mutate(func(u *blob.Presigned) { u.Header = nil }),
		"OtherHeader":   mutate(func(u *blob.Presigned) { u.Header["X-Other"] = "1" }),
		"OtherExpiry":   mutate(func(u *blob.Presigned) { u.Expires = u.Expires.Add(time.Second) }),
		"Unsigned":      mutate(func(u *blob.Presigned) { u.URL, _, _ = strings.Cut(u.URL, "?") }),
		"UpperHex":      mutate(func(u *blob.Presigned) { u.URL = strings.TrimSuffix(u.URL, sig) + strings.ToUpper(sig) }),
		"ShortSig":      mutate(func(u *blob.Presigned) { u.URL = u.URL[:len(u.URL)-2] }),
		"NoMethod":      mutate(func(u *blob.Presigned) { u.Method = "DELETE" }),
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			_, err := blob.AppendCompact(nil, base, []blob.Presigned{u})
			require.Error(t, err)
			require.NotContains(t, err.Error(), sig)
		})
	}
	_, err = blob.AppendCompact(nil, blob.Presigned{Object: put, URL: base.URL}, []blob.Presigned{out})
	require.ErrorContains(t, err, "is not a path-style URL of that object", "a base URL for another object")

	for name, line := range map[string]string{
		"Method":       "DELETE s staging/B/a.jpg " + sig64,
		"NoSignature":  "PUT s staging/B/a.jpg",
		"Empty":        "PUT s staging/B/a.jpg ",
		"Hex":          "PUT s staging/B/a.jpg " + sig,
		"Padded":       "PUT s staging/B/a.jpg " + sig64 + "=",
		"Short":        "PUT s staging/B/a.jpg " + sig64[:42],
		"NotBase64URL": "PUT s staging/B/a.jpg " + strings.ReplaceAll(strings.ReplaceAll(sig64[:42], "_", "/"), "-", "+") + "+",
		"ExtraField":   "PUT s staging/B/a.jpg " + sig64 + " x",
		"NoKey":        "PUT s",
		"Uncanonical":  "PUT s staging/B/a%2bb.jpg " + sig64,
		"Unescaped":    "PUT s staging/B/a+b.jpg " + sig64,
		"SlashBucket":  "PUT a/b k " + sig64,
		"BadEscape":    "PUT s staging/B/a%zz " + sig64,
		"BlankBetween": "PUT s a " + sig64 + "\n\nPUT s b " + sig64,
		"JSON":         `[{"method":"PUT","bucket":"s","key":"k","url":"` + out.URL + `"}]`,
		"SpacedJSON":   `[{"method": "PUT", "bucket": "s", "key": "k", "url": "` + out.URL + `"}]`,
	} {
		_, err := blob.ParseCompact(asWorker(base), line)
		require.Error(t, err, name)
		require.NotContains(t, err.Error(), sig, name)
		require.NotContains(t, err.Error(), sig64[:20], name)
	}
	got, err := blob.ParseCompact(asWorker(base), "PUT_IF_ABSENT s staging/B/a%20b.jpg "+sig64)
	require.NoError(t, err, "the line the cases above spoil")
	require.Equal(t, []blob.Presigned{out}, got)
}

// TestCompactAgainstS3: the requests a worker rebuilds from a launch's
// compact form (PresignCompact, ParseCompact) work against a real S3
// server that checks SigV4 query signatures: GET, PUT and PUT_IF_ABSENT.
func TestCompactAgainstS3(t *testing.T) {
	t.Parallel()
	store, bucket := newStore(t)
	ctx := context.Background()
	const input = "staging/B/ä b+c=%~&.jpg"
	require.NoError(t, store.Put(ctx, bucket, input, strings.NewReader("input"), 5, "image/jpeg"))
	get := blob.Object{Method: blob.MethodGet, Bucket: bucket, Key: input}
	base, lines, err := store.PresignCompact(ctx, get, []blob.Object{
		get,
		{Method: blob.MethodPut, Bucket: bucket, Key: "variants/B/ä b+c=%~&.jpg/large 1.jpg"},
		{Method: blob.MethodPutIfAbsent, Bucket: bucket, Key: "staging/B/日本+%20.jpg"},
	}, 15*time.Minute)
	require.NoError(t, err)
	got, err := blob.ParseCompact(asWorker(base), lines)
	require.NoError(t, err)
	require.Len(t, got, 3)

	for _, u := range []blob.Presigned{base, got[0]} {
		code, body, _ := do(t, u, nil, "")
		require.Equal(t, http.StatusOK, code, string(body))
		require.Equal(t, "input", string(body))
	}
	code, body, _ := do(t, got[1], []byte("variant"), "image/jpeg")
	require.Equal(t, http.StatusOK, code, string(body))
	code, body, _ = do(t, got[2], []byte("first"), "image/jpeg")
	require.Equal(t, http.StatusOK, code, string(body))
	code, _, _ = do(t, got[2], []byte("second"), "image/jpeg")
	require.Equal(t, http.StatusPreconditionFailed, code)
	code, _, _ = do(t, got[2], []byte("third"), "image/jpeg", "If-None-Match")
	require.Equal(t, http.StatusForbidden, code, "the condition is signed")
	for key, want := range map[string]string{got[1].Key: "variant", got[2].Key: "first"} {
		b, err := store.Get(ctx, bucket, key)
		require.NoError(t, err)
		require.Equal(t, want, string(b))
	}
}

// BenchmarkAppendCompact is the cost of an image machine's OUTPUT_URLS from
// its signed URLs.
func BenchmarkAppendCompact(b *testing.B) {
	store, err := blob.NewS3(blob.S3Config{Endpoint: "https://0123456789abcdef0123456789abcdef.r2.cloudflarestorage.com",
		AccessKeyID: "0123456789abcdef0123456789abcdef", SecretAccessKey: "s3cr3t"})
	require.NoError(b, err)
	const input = "staging/01K8RNKN488RQCG3YGG72QBZS5/photos/IMG_0001.jpg"
	objs := []blob.Object{{Method: blob.MethodGet, Bucket: "arke-staging", Key: input}}
	for _, v := range []string{"thumbnail", "medium", "large"} {
		objs = append(objs, blob.Object{Method: blob.MethodPut, Bucket: "arke-cdn", Key: "variants/01K8RNKN488RQCG3YGG72QBZS5/photos/IMG_0001.jpg/" + v + ".jpg"})
	}
	objs = append(objs, blob.Object{Method: blob.MethodPut, Bucket: "arke-archive", Key: input},
		blob.Object{Method: blob.MethodPut, Bucket: "arke-staging", Key: input + ".ref.json"})
	urls, err := store.PresignAll(b.Context(), objs, time.Hour)
	require.NoError(b, err)
	b.ReportAllocs()
	buf := make([]byte, 0, 1024)
	for b.Loop() {
		if _, err := blob.AppendCompact(buf[:0], urls[0], urls[1:]); err != nil {
			b.Fatal(err)
		}
	}
}
