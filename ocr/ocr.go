// Package ocr turns page images into text through an Engine: an
// OpenAI-compatible chat-completions provider (OpenAI) or the local
// tesseract command (Tesseract), the embedded default with no provider.
//
// Engines classify their failures as *Error values with a Class, which is
// what a caller switches on: a permanent failure ends the item, an auth
// failure ends every call to that provider, a transient one is worth
// retrying, and a rate-limited one is back-pressure that costs no retry.
package ocr

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// Engine transcribes one page image. Implementations are safe for
// concurrent use; their errors are *Error (or wrap one), except that a
// cancelled ctx yields an error wrapping ctx.Err().
type Engine interface {
	Transcribe(ctx context.Context, img Image) (Result, error)
	// Provider names the engine's provider (its API's host, or
	// "tesseract"): what its rate limit is keyed by.
	Provider() string
}

// Unavailable is an Engine that cannot run (the local engine's command is
// missing, say): every call fails as Auth with its message, so a chunk
// stops at once with it instead of failing its items one by one.
type Unavailable struct {
	Name    string // its Provider
	Message string
}

// Transcribe fails.
func (u Unavailable) Transcribe(context.Context, Image) (Result, error) {
	return Result{}, &Error{Class: Auth, Message: u.Message}
}

// Provider is u.Name.
func (u Unavailable) Provider() string { return u.Name }

// Image is one page image: its encoded bytes and their media type
// ("image/jpeg", "image/png", ...).
type Image struct {
	Data      []byte
	MediaType string
}

// Result is the text an engine read from an image, with the engine that
// read it: what the ref's ocr record names.
type Result struct {
	Text string
	// Model is the provider's model, or the local engine and its version.
	Model string
	// Provider names who did the work: the provider's host, or "tesseract".
	Provider string
}

// Class says what a caller should do about a failed call.
type Class int

// The classes of failure. The zero Class is never used by an *Error.
const (
	// Permanent: this image will never succeed (refused, corrupt, too large,
	// an answer that cannot be decoded). Mark the item failed; do not retry.
	Permanent Class = iota + 1
	// Auth: the provider refused the key (401, 403). Every other call would
	// fail the same way, so the whole chunk stops with the provider's message.
	Auth
	// Transient: a 5xx, a timeout or a connection error. Retry with backoff.
	Transient
	// RateLimited: a 429. Back off (at least Error.RetryAfter) and send the
	// item again; it is not the item's fault, so no retry is used up.
	RateLimited
)

func (c Class) String() string {
	switch c {
	case Permanent:
		return "permanent"
	case Auth:
		return "auth"
	case Transient:
		return "transient"
	case RateLimited:
		return "rate_limited"
	}
	return fmt.Sprintf("Class(%d)", int(c))
}

// Error is a classified engine failure.
type Error struct {
	Class Class
	// Status is the provider's HTTP status, 0 when there was no answer.
	Status int
	// Message says what went wrong, in the provider's own words when it
	// sent some ({"error": {"message": ...}}).
	Message string
	// RetryAfter is the provider's Retry-After (seconds or an HTTP date),
	// 0 when absent or unparsable. Only set on RateLimited and 503 errors.
	RetryAfter time.Duration
	// Err is the underlying error, if any (a transport error, a decoding
	// error, an exec error).
	Err error
}

func (e *Error) Error() string {
	msg := e.Message
	if msg == "" && e.Err != nil {
		msg = e.Err.Error()
	}
	if e.Status != 0 {
		return fmt.Sprintf("ocr %s error (HTTP %d): %s", e.Class, e.Status, msg)
	}
	return fmt.Sprintf("ocr %s error: %s", e.Class, msg)
}

func (e *Error) Unwrap() error { return e.Err }

// ClassOf returns the Class of the *Error in err's chain, or Transient for
// an unclassified non-nil error (the safe guess: retried a bounded number
// of times), or 0 for nil.
func ClassOf(err error) Class {
	if err == nil {
		return 0
	}
	if e, ok := errors.AsType[*Error](err); ok {
		return e.Class
	}
	return Transient
}
