package intakesig_test

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/arke-institute/orchestrator/intakesig"
)

// TestSignIsTheDocumentedHMAC: v2 is the hex HMAC-SHA256, keyed by the
// secret, of "<t>\n<METHOD>\n<path>\n<body>", as docs/security.md tells
// ingest to compute it.
func TestSignIsTheDocumentedHMAC(t *testing.T) {
	at := time.Unix(1700000000, 0)
	m := hmac.New(sha256.New, []byte("s3cret"))
	m.Write([]byte("1700000000\nPOST\n/batches\n" + `{"batch_id":"B"}`))
	require.Equal(t, "t=1700000000,v2="+hex.EncodeToString(m.Sum(nil)),
		intakesig.Sign("s3cret", intakesig.Request{Method: "POST", Path: "/batches", Body: []byte(`{"batch_id":"B"}`)}, at))
}

func TestVerify(t *testing.T) {
	req := intakesig.Request{Method: "POST", Path: "/batches", Body: []byte(`{"batch_id":"B"}`)}
	at := time.Unix(1700000000, 0)
	good := intakesig.Sign("secret", req, at)
	other := intakesig.Sign("old-secret", req, at)
	sigOf := func(h string) string { return h[strings.Index(h, "v2=")+3:] }

	sig, signed, err := intakesig.Verify("secret", good, req, at.Add(intakesig.Window))
	require.NoError(t, err, "the window's edge is inside it")
	require.Len(t, sig, sha256.Size)
	require.True(t, signed.Equal(at), "the signing time, for the replay table")
	_, _, err = intakesig.Verify("secret", good, req, at.Add(-intakesig.Window))
	require.NoError(t, err, "a clock behind the signer's by the window")

	// While a secret rotates, a header may carry one v2 per secret.
	rotating := other + ",v2=" + sigOf(good)
	got, _, err := intakesig.Verify("secret", rotating, req, at)
	require.NoError(t, err)
	require.Equal(t, sig, got, "the matching signature is the one returned")
	_, _, err = intakesig.Verify("secret", "v0=ignored,"+good, req, at)
	require.NoError(t, err, "other schemes are ignored")

	with := func(f func(*intakesig.Request)) intakesig.Request {
		r := req
		f(&r)
		return r
	}
	// The body alone, as v1 signed it.
	m := hmac.New(sha256.New, []byte("secret"))
	m.Write([]byte("1700000000." + string(req.Body)))
	v1 := "t=1700000000,v1=" + hex.EncodeToString(m.Sum(nil))
	for name, tc := range map[string]struct {
		header string
		req    intakesig.Request
		now    time.Time
		want   string
	}{
		"Late":        {good, req, at.Add(intakesig.Window + time.Second), "more than 5m0s from the server's time"},
		"Early":       {good, req, at.Add(-intakesig.Window - time.Second), "more than 5m0s from the server's time"},
		"OtherBody":   {good, with(func(r *intakesig.Request) { r.Body = []byte(`{"batch_id":"C"}`) }), at, "no v2 signature matches the request"},
		"OtherRoute":  {good, with(func(r *intakesig.Request) { r.Path = "/documents" }), at, "no v2 signature matches the request"},
		"OtherMethod": {good, with(func(r *intakesig.Request) { r.Method = "PUT" }), at, "no v2 signature matches the request"},
		"OtherKey":    {other, req, at, "no v2 signature matches the request"},
		"V1":          {v1, req, at, "v1 signatures (of the body alone) are no longer accepted"},
		"Empty":       {"", req, at, "want t=UNIX_SECONDS,v2=HEX"},
		"NoTime":      {good[len("t=1700000000,"):], req, at, "want t=UNIX_SECONDS,v2=HEX"},
		"BadTime":     {"t=soon,v2=" + sigOf(good), req, at, `t="soon" is not a Unix time in seconds`},
		"ShortV2":     {"t=1700000000,v2=abcd", req, at, "v2 must be 64 hex digits"},
		"NoEquals":    {"t1700000000,v2", req, at, "is not key=value"},
		"TimeEdited":  {"t=1700000001,v2=" + sigOf(good), req, at, "no v2 signature matches the request"},
	} {
		_, _, err := intakesig.Verify("secret", tc.header, tc.req, tc.now)
		require.ErrorIs(t, err, intakesig.ErrInvalid, name)
		require.ErrorContains(t, err, tc.want, name)
	}
}
