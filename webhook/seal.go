package webhook

import (
	"crypto/aes"
	"crypto/cipher"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
)

// KeyBytes is the length of WEBHOOK_SECRET_KEY, an AES-256 key.
const KeyBytes = 32

// Sealer keeps the subscriptions' signing secrets encrypted at rest
// (AES-256-GCM under WEBHOOK_SECRET_KEY): a copy of the database alone
// signs nothing. Each sealed secret is bound to its subscription's id, so
// it cannot be moved to another row.
type Sealer struct {
	aead cipher.AEAD
	// keyID names the key (a digest of it), stored beside each sealed
	// secret, so that a changed key is told apart from a damaged row.
	keyID string
}

// ParseKey reads WEBHOOK_SECRET_KEY: 32 bytes in base64 (standard or URL
// alphabet, padded or not), e.g. `openssl rand -base64 32`.
func ParseKey(text string) ([]byte, error) {
	text = strings.TrimSpace(text)
	for _, enc := range []*base64.Encoding{base64.StdEncoding, base64.RawStdEncoding, base64.URLEncoding, base64.RawURLEncoding} {
		if b, err := enc.DecodeString(text); err == nil {
			if len(b) != KeyBytes {
				return nil, fmt.Errorf("WEBHOOK_SECRET_KEY must be %d bytes in base64 (openssl rand -base64 32), got %d bytes", KeyBytes, len(b))
			}
			return b, nil
		}
	}
	return nil, errors.New("WEBHOOK_SECRET_KEY must be 32 bytes in base64 (openssl rand -base64 32)")
}

// NewSealer is the sealer of key (ParseKey).
func NewSealer(key []byte) (*Sealer, error) {
	if len(key) != KeyBytes {
		return nil, fmt.Errorf("the webhook secret key must be %d bytes, got %d", KeyBytes, len(key))
	}
	block, err := aes.NewCipher(key)
	if err != nil {
		return nil, err
	}
	aead, err := cipher.NewGCM(block)
	if err != nil {
		return nil, err
	}
	sum := sha256.Sum256(append([]byte("webhook secret key id:"), key...))
	return &Sealer{aead: aead, keyID: hex.EncodeToString(sum[:6])}, nil
}

// KeyID names the sealer's key.
func (s *Sealer) KeyID() string { return s.keyID }

// Seal encrypts the secret of subscription id: the nonce, then the
// ciphertext with its tag.
func (s *Sealer) Seal(id string, secret Secret) ([]byte, error) {
	nonce := make([]byte, s.aead.NonceSize())
	if _, err := rand.Read(nonce); err != nil {
		return nil, err
	}
	return s.aead.Seal(nonce, nonce, secret, []byte(id)), nil
}

// Open decrypts the secret of subscription id, sealed under keyID.
func (s *Sealer) Open(id, keyID string, sealed []byte) (Secret, error) {
	if keyID != s.keyID {
		return nil, fmt.Errorf("the secret of webhook subscription %s was sealed with another WEBHOOK_SECRET_KEY (key %s, this process has %s): "+
			"set the key it was created with, or create the subscription again", id, keyID, s.keyID)
	}
	n := s.aead.NonceSize()
	if len(sealed) < n {
		return nil, fmt.Errorf("the sealed secret of webhook subscription %s is damaged", id)
	}
	secret, err := s.aead.Open(nil, sealed[:n], sealed[n:], []byte(id))
	if err != nil {
		return nil, fmt.Errorf("opening the secret of webhook subscription %s: %w", id, err)
	}
	return secret, nil
}
