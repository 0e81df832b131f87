package intakesig_test

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/arke-institute/orchestrator/intakesig"
)

// TestSignIsTheDocumentedHMAC: v1 is the hex HMAC-SHA256, keyed by the
// secret, of "<t>.<body>", as docs/security.md tells ingest to compute it.
func TestSignIsTheDocumentedHMAC(t *testing.T) {
	at := time.Unix(1700000000, 0)
	m := hmac.New(sha256.New, []byte("s3cret"))
	m.Write([]byte(`1700000000.{"batch_id":"B"}`))
	require.Equal(t, "t=1700000000,v1="+hex.EncodeToString(m.Sum(nil)), intakesig.Sign("s3cret", []byte(`{"batch_id":"B"}`), at))
}

func TestVerify(t *testing.T) {
	body := []byte(`{"batch_id":"B"}`)
	at := time.Unix(1700000000, 0)
	good := intakesig.Sign("secret", body, at)
	other := intakesig.Sign("old-secret", body, at)

	sig, err := intakesig.Verify("secret", good, body, at.Add(intakesig.Window))
	require.NoError(t, err, "the window's edge is inside it")
	require.Len(t, sig, sha256.Size)
	_, err = intakesig.Verify("secret", good, body, at.Add(-intakesig.Window))
	require.NoError(t, err, "a clock behind the signer's by the window")

	// While a secret rotates, a header may carry one v1 per secret.
	rotating := other + ",v1=" + good[len("t=1700000000,v1="):]
	got, err := intakesig.Verify("secret", rotating, body, at)
	require.NoError(t, err)
	require.Equal(t, sig, got, "the matching signature is the one returned")
	_, err = intakesig.Verify("secret", "v0=ignored,"+good, body, at)
	require.NoError(t, err, "other schemes are ignored")

	for name, tc := range map[string]struct {
		header string
		body   []byte
		now    time.Time
		want   string
	}{
		"Late":       {good, body, at.Add(intakesig.Window + time.Second), "more than 5m0s from the server's time"},
		"Early":      {good, body, at.Add(-intakesig.Window - time.Second), "more than 5m0s from the server's time"},
		"OtherBody":  {good, []byte(`{"batch_id":"C"}`), at, "no v1 signature matches the body"},
		"OtherKey":   {other, body, at, "no v1 signature matches the body"},
		"Empty":      {"", body, at, "want t=UNIX_SECONDS,v1=HEX"},
		"NoTime":     {good[len("t=1700000000,"):], body, at, "want t=UNIX_SECONDS,v1=HEX"},
		"BadTime":    {"t=soon,v1=" + good[len("t=1700000000,v1="):], body, at, `t="soon" is not a Unix time in seconds`},
		"ShortV1":    {"t=1700000000,v1=abcd", body, at, "v1 must be 64 hex digits"},
		"NoEquals":   {"t1700000000,v1", body, at, "is not key=value"},
		"TimeEdited": {"t=1700000001,v1=" + good[len("t=1700000000,v1="):], body, at, "no v1 signature matches the body"},
	} {
		_, err := intakesig.Verify("secret", tc.header, tc.body, tc.now)
		require.ErrorIs(t, err, intakesig.ErrInvalid, name)
		require.ErrorContains(t, err, tc.want, name)
	}
}
