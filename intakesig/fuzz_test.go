package intakesig_test

import (
	"testing"
	"time"

	"github.com/arke-institute/orchestrator/intakesig"
)

// FuzzVerify: make fuzz; `go test` runs the seed corpus. No header
// verifies but one signed for the very request; a signature of a request
// opens no other method, path or body; nothing panics.
func FuzzVerify(f *testing.F) {
	now := time.Unix(1_800_000_000, 0)
	f.Add("t=1800000000,v2=00", "POST", "/batches", []byte(`{}`))
	f.Add("t=1800000000,v1=ab", "POST", "/documents/1/retry", []byte(nil))
	f.Add(",,=,t=", "GET", "/", []byte("x"))
	f.Fuzz(func(t *testing.T, header, method, path string, body []byte) {
		const secret = "fuzz-secret-of-16-bytes"
		r := intakesig.Request{Method: method, Path: path, Body: body}
		if _, _, err := intakesig.Verify(secret, header, r, now); err == nil {
			t.Fatalf("a made-up header verified: %q", header)
		}
		signed := intakesig.Sign(secret, r, now)
		if _, _, err := intakesig.Verify(secret, signed, r, now); err != nil {
			t.Fatalf("its own signature: %v", err)
		}
		for _, other := range []intakesig.Request{
			{Method: method + "X", Path: path, Body: body},
			{Method: method, Path: path + "/x", Body: body},
			{Method: method, Path: path, Body: append(body[:len(body):len(body)], 'x')},
		} {
			if _, _, err := intakesig.Verify(secret, signed, other, now); err == nil {
				t.Fatalf("a signature of %+v opened %+v", r, other)
			}
		}
	})
}
