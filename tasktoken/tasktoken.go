// Package tasktoken makes and checks the credentials the orchestrator
// hands its workers: a task's callback token and a pool machine's lease
// token.
//
// A token is "<nonce>.<tag>". The nonce is random, and its SHA-256 (the
// record) is what the database keeps: a token is matched against its
// task's current record, so a superseded attempt's token is told it is
// late. The tag is an HMAC-SHA256, cut to 128 bits, of what the token opens
// (its scope: a task of a batch, or a pool) and the nonce, under a key of
// the orchestrator's own. So a token made up by anyone else, or presented
// for another task, is refused on its tag alone, before anything is read,
// queued or stored.
//
// The key is made by the first process that needs it and kept in the
// database (server_keys), so every replica shares it, it survives
// restarts, and nothing has to be configured.
package tasktoken

import (
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"fmt"
	"hash"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/arke-institute/orchestrator/db"
	"github.com/arke-institute/orchestrator/problem"
)

// keyName is the key's name in server_keys.
const keyName = "callback_token"

// tagBytes is how much of the HMAC a token carries.
const tagBytes = 16

// The refusals of Open, each a problem.ErrUnauthorized (401).
var (
	// ErrForged refuses a token that this orchestrator did not issue for
	// what it is presented for.
	ErrForged = fmt.Errorf("%w: the bearer token was not issued for this task or pool", problem.ErrUnauthorized)
	// ErrMissing refuses a request without a token.
	ErrMissing = fmt.Errorf("%w: missing bearer token", problem.ErrUnauthorized)
)

// Scope is what a token opens.
type Scope string

// Task is the scope of task taskID of batch batchID. The batch id's length
// leads, so that no two pairs of ids make one scope.
func Task(batchID, taskID string) Scope {
	return Scope("task " + strconv.Itoa(len(batchID)) + " " + batchID + " " + taskID)
}

// PoolMachine is the scope of a machine of pool poolID.
func PoolMachine(poolID int64) Scope { return Scope("pool " + strconv.FormatInt(poolID, 10)) }

// Keyring seals and opens tokens with the key it reads from the database
// on first use (and again after a failed read).
type Keyring struct {
	pool *pgxpool.Pool
	key  atomic.Pointer[[]byte]
	// mu lets one caller at a time read the key.
	mu sync.Mutex
	// macs are HMACs of the key, reused: a callback costs no allocation
	// of one.
	macs sync.Pool
}

// New is a Keyring of the database behind pool.
func New(pool *pgxpool.Pool) *Keyring { return &Keyring{pool: pool} }

// load returns the key, reading (or making) it the first time.
func (k *Keyring) load(ctx context.Context) ([]byte, error) {
	if key := k.key.Load(); key != nil {
		return *key, nil
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	if key := k.key.Load(); key != nil {
		return *key, nil
	}
	made := make([]byte, 32)
	if _, err := rand.Read(made); err != nil {
		return nil, err
	}
	for range 3 {
		keys, err := db.New(k.pool).ServerKeyEnsure(ctx, db.ServerKeyEnsureParams{Name: keyName, Key: made})
		if err != nil {
			return nil, fmt.Errorf("reading the callback token key: %w", err)
		}
		if len(keys) > 0 {
			k.key.Store(&keys[0])
			return keys[0], nil
		}
	}
	return nil, errors.New("reading the callback token key: none was stored")
}

// Seal is the token of scope with nonce (the record's preimage, as the
// database made it).
func (k *Keyring) Seal(ctx context.Context, scope Scope, nonce string) (string, error) {
	key, err := k.load(ctx)
	if err != nil {
		return "", err
	}
	var buf [sha256.Size]byte
	return nonce + "." + base64.RawURLEncoding.EncodeToString(k.tag(key, scope, nonce, buf[:0])), nil
}

// Open checks that token was sealed for scope and returns its record, the
// SHA-256 that the database keeps of its nonce. ErrMissing and ErrForged
// refuse it; any other error is the key's read failing.
func (k *Keyring) Open(ctx context.Context, scope Scope, token string) ([]byte, error) {
	if token == "" {
		return nil, ErrMissing
	}
	nonce, got, ok := strings.Cut(token, ".")
	if !ok || nonce == "" || len(got) != base64.RawURLEncoding.EncodedLen(tagBytes) {
		return nil, ErrForged
	}
	key, err := k.load(ctx)
	if err != nil {
		return nil, err
	}
	var presented [tagBytes]byte
	if n, err := base64.RawURLEncoding.Strict().Decode(presented[:], []byte(got)); err != nil || n != tagBytes {
		return nil, ErrForged
	}
	var buf [sha256.Size]byte
	if !hmac.Equal(presented[:], k.tag(key, scope, nonce, buf[:0])) {
		return nil, ErrForged
	}
	return Record(nonce), nil
}

// Record is the SHA-256 of nonce: what the database keeps of a token.
func Record(nonce string) []byte {
	sum := sha256.Sum256([]byte(nonce))
	return sum[:]
}

// RecordOf is the record of a token this orchestrator sealed, unchecked.
func RecordOf(token string) []byte {
	nonce, _, _ := strings.Cut(token, ".")
	return Record(nonce)
}

// NewNonce is a fresh random nonce, for a token made in Go (the database
// makes the tasks' own).
func NewNonce() (string, error) {
	b := make([]byte, 32)
	if _, err := rand.Read(b); err != nil {
		return "", err
	}
	return base64.RawURLEncoding.EncodeToString(b), nil
}

// tag appends to dst the HMAC of scope and nonce under key, cut to
// tagBytes, and returns it.
func (k *Keyring) tag(key []byte, scope Scope, nonce string, dst []byte) []byte {
	m, _ := k.macs.Get().(hash.Hash)
	if m == nil {
		m = hmac.New(sha256.New, key)
	} else {
		m.Reset()
	}
	m.Write([]byte(scope))
	m.Write([]byte{0})
	m.Write([]byte(nonce))
	dst = m.Sum(dst)
	k.macs.Put(m)
	return dst[:tagBytes]
}
