package webhook

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// secretPrefix starts a signing secret as Standard Webhooks' libraries
// take it: whsec_ and the key in base64.
const secretPrefix = "whsec_"

// secretBytes is the length of a signing key (Standard Webhooks asks for
// 24 to 64 bytes).
const secretBytes = 32

// Secret is a subscription's signing key.
type Secret []byte

// NewSecret is a new random signing key.
func NewSecret() (Secret, error) {
	s := make(Secret, secretBytes)
	if _, err := rand.Read(s); err != nil {
		return nil, fmt.Errorf("generating a signing secret: %w", err)
	}
	return s, nil
}

// String is the secret as receivers configure it: whsec_<base64 key>.
func (s Secret) String() string { return secretPrefix + base64.StdEncoding.EncodeToString(s) }

// ParseSecret reads a secret written by String.
func ParseSecret(text string) (Secret, error) {
	b, err := base64.StdEncoding.DecodeString(strings.TrimPrefix(text, secretPrefix))
	if err != nil {
		return nil, fmt.Errorf("a signing secret is whsec_ and base64: %w", err)
	}
	return b, nil
}

// Signature is Standard Webhooks' signature of a message: v1, then the
// base64 HMAC-SHA256 under the key of "{id}.{timestamp}.{body}".
func (s Secret) Signature(id string, timestamp time.Time, body []byte) string {
	mac := hmac.New(sha256.New, s)
	fmt.Fprintf(mac, "%s.%d.", id, timestamp.Unix())
	mac.Write(body)
	return "v1," + base64.StdEncoding.EncodeToString(mac.Sum(nil))
}

// Sign sets the Standard Webhooks headers of a delivery on h: its id (the
// same on every attempt), the time of this attempt and the signature of
// both with the body.
func (s Secret) Sign(h http.Header, id string, timestamp time.Time, body []byte) {
	h.Set("webhook-id", id)
	h.Set("webhook-timestamp", strconv.FormatInt(timestamp.Unix(), 10))
	h.Set("webhook-signature", s.Signature(id, timestamp, body))
}
