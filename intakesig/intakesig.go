// Package intakesig signs and verifies intake requests the way Stripe signs
// its webhooks: the header
//
//	X-Signature: t=<unix seconds>,v1=<hex HMAC-SHA256>
//
// carries the time of signing and the HMAC-SHA256, keyed by
// INGEST_SIGNING_SECRET, of the string "<t>.<body>": the timestamp as sent,
// a full stop, and the request body byte for byte. A header may carry
// several v1 values (one per secret while a secret is rotated); one that
// matches is enough. A signature older or newer than the window is refused,
// and the caller refuses one it has seen before (a replay).
package intakesig

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// Header is the request header carrying the signature.
const Header = "X-Signature"

// Window is how far the signing time may be from the server's clock, either
// way.
const Window = 5 * time.Minute

// Sign returns the X-Signature value for body signed with secret at t.
func Sign(secret string, body []byte, t time.Time) string {
	ts := strconv.FormatInt(t.Unix(), 10)
	return "t=" + ts + ",v1=" + hex.EncodeToString(mac(secret, ts, body))
}

func mac(secret, ts string, body []byte) []byte {
	m := hmac.New(sha256.New, []byte(secret))
	m.Write([]byte(ts))
	m.Write([]byte{'.'})
	m.Write(body)
	return m.Sum(nil)
}

// ErrInvalid is wrapped by every refusal of Verify; the message says what
// is wrong without revealing the expected signature.
var ErrInvalid = errors.New("invalid X-Signature")

// Verify checks header (the X-Signature value) against body and secret at
// now. It returns the matching signature, which the caller records to
// refuse replays.
func Verify(secret, header string, body []byte, now time.Time) ([]byte, error) {
	var ts string
	var sigs [][]byte
	for part := range strings.SplitSeq(header, ",") {
		k, v, ok := strings.Cut(strings.TrimSpace(part), "=")
		if !ok {
			return nil, fmt.Errorf("%w: %q is not key=value (want t=UNIX_SECONDS,v1=HEX)", ErrInvalid, part)
		}
		switch k {
		case "t":
			ts = v
		case "v1":
			sig, err := hex.DecodeString(v)
			if err != nil || len(sig) != sha256.Size {
				return nil, fmt.Errorf("%w: v1 must be %d hex digits", ErrInvalid, 2*sha256.Size)
			}
			sigs = append(sigs, sig)
		}
		// Other schemes (v0, ...) are ignored, as Stripe does.
	}
	if ts == "" || len(sigs) == 0 {
		return nil, fmt.Errorf("%w: want t=UNIX_SECONDS,v1=HEX, v1 the HMAC-SHA256 of the timestamp, a full stop and the body", ErrInvalid)
	}
	secs, err := strconv.ParseInt(ts, 10, 64)
	if err != nil {
		return nil, fmt.Errorf("%w: t=%q is not a Unix time in seconds", ErrInvalid, ts)
	}
	if d := now.Sub(time.Unix(secs, 0)); d > Window || d < -Window {
		return nil, fmt.Errorf("%w: signed at %s, more than %s from the server's time %s", ErrInvalid,
			time.Unix(secs, 0).UTC().Format(time.RFC3339), Window, now.UTC().Format(time.RFC3339))
	}
	want := mac(secret, ts, body)
	for _, sig := range sigs {
		if hmac.Equal(sig, want) {
			return sig, nil
		}
	}
	return nil, fmt.Errorf("%w: no v1 signature matches the body (signed with another secret, or the body changed)", ErrInvalid)
}
