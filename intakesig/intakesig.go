// Package intakesig signs and verifies intake requests the way Stripe signs
// its webhooks: the header
//
//	X-Signature: t=<unix seconds>,v2=<hex HMAC-SHA256>
//
// carries the time of signing and the HMAC-SHA256, keyed by
// INGEST_SIGNING_SECRET, of the string "<t>\n<METHOD>\n<path>\n<body>": the
// timestamp as sent, the request's method, its path and query as sent
// (e.g. "/documents/12/retry"), and the request body byte for byte, each
// after a newline (which none of the first three may hold). One signature
// so opens one request of one route, never another route or document. A
// header may carry several v2 values (one per secret while a secret is
// rotated); one that matches is enough. A signature older or newer than
// the window is refused, and the caller refuses one it has seen before (a
// replay). The v1 scheme, which signed the body alone, is refused, saying
// so.
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

// Request is what a signature covers of a request besides its time.
type Request struct {
	// Method is the HTTP method, e.g. "POST".
	Method string
	// Path is the path and query as sent (net/url's URL.RequestURI), e.g.
	// "/batches".
	Path string
	// Body is the body, byte for byte.
	Body []byte
}

// Sign returns the X-Signature value for r signed with secret at t.
func Sign(secret string, r Request, t time.Time) string {
	ts := strconv.FormatInt(t.Unix(), 10)
	return "t=" + ts + ",v2=" + hex.EncodeToString(mac(secret, ts, r))
}

func mac(secret, ts string, r Request) []byte {
	m := hmac.New(sha256.New, []byte(secret))
	for _, part := range []string{ts, r.Method, r.Path} {
		m.Write([]byte(part))
		m.Write([]byte{'\n'})
	}
	m.Write(r.Body)
	return m.Sum(nil)
}

// ErrInvalid is wrapped by every refusal of Verify; the message says what
// is wrong without revealing the expected signature.
var ErrInvalid = errors.New("invalid X-Signature")

// Verify checks header (the X-Signature value) against r and secret at
// now. It returns the matching signature and when it was made, which the
// caller records to refuse replays until the window has passed.
func Verify(secret, header string, r Request, now time.Time) ([]byte, time.Time, error) {
	var ts string
	var sigs [][]byte
	v1 := false
	for part := range strings.SplitSeq(header, ",") {
		k, v, ok := strings.Cut(strings.TrimSpace(part), "=")
		if !ok {
			return nil, time.Time{}, fmt.Errorf("%w: %q is not key=value (want t=UNIX_SECONDS,v2=HEX)", ErrInvalid, part)
		}
		switch k {
		case "t":
			ts = v
		case "v2":
			sig, err := hex.DecodeString(v)
			if err != nil || len(sig) != sha256.Size {
				return nil, time.Time{}, fmt.Errorf("%w: v2 must be %d hex digits", ErrInvalid, 2*sha256.Size)
			}
			sigs = append(sigs, sig)
		case "v1":
			v1 = true
		}
		// Other schemes (v0, ...) are ignored, as Stripe does.
	}
	switch {
	case len(sigs) == 0 && v1:
		return nil, time.Time{}, fmt.Errorf("%w: v1 signatures (of the body alone) are no longer accepted; sign with v2, the HMAC-SHA256 of the timestamp, method, path and body, each after a newline", ErrInvalid)
	case ts == "" || len(sigs) == 0:
		return nil, time.Time{}, fmt.Errorf("%w: want t=UNIX_SECONDS,v2=HEX, v2 the HMAC-SHA256 of the timestamp, method, path and body, each after a newline", ErrInvalid)
	}
	secs, err := strconv.ParseInt(ts, 10, 64)
	if err != nil {
		return nil, time.Time{}, fmt.Errorf("%w: t=%q is not a Unix time in seconds", ErrInvalid, ts)
	}
	at := time.Unix(secs, 0)
	if d := now.Sub(at); d > Window || d < -Window {
		return nil, time.Time{}, fmt.Errorf("%w: signed at %s, more than %s from the server's time %s", ErrInvalid,
			at.UTC().Format(time.RFC3339), Window, now.UTC().Format(time.RFC3339))
	}
	want := mac(secret, ts, r)
	for _, sig := range sigs {
		if hmac.Equal(sig, want) {
			return sig, at, nil
		}
	}
	return nil, time.Time{}, fmt.Errorf("%w: no v2 signature matches the request (signed with another secret, for another method or path, or the body changed)", ErrInvalid)
}
