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
	"time"

	"github.com/arke-institute/orchestrator/provider"
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
	// Instructions are the batch's own for every AI call (its manifest's
	// custom_prompts.general): an API engine adds them to its prompt, the
	// local one has no prompt to add them to.
	Instructions string
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

// Class says what a caller should do about a failed call: the shared
// provider.Class.
type Class = provider.Class

// The classes of failure (see provider.Class). The zero Class is never
// used by an *Error.
const (
	Permanent   = provider.Permanent
	Auth        = provider.Auth
	Transient   = provider.Transient
	RateLimited = provider.RateLimited
)

// Error is a classified engine failure: a provider.Error (its Service is
// not used) whose text starts "ocr". errors.As finds it as a
// *provider.Error too, so provider.ClassOf classifies it.
type Error provider.Error

func (e *Error) Error() string {
	return provider.FormatError("ocr", e.Class, e.Status, e.Message, e.Err)
}

func (e *Error) Unwrap() error { return e.Err }

// As lets errors.As find e as a *provider.Error.
func (e *Error) As(target any) bool {
	if p, ok := target.(**provider.Error); ok {
		*p = (*provider.Error)(e)
		return true
	}
	return false
}

// ClassOf returns the Class of the *Error (or *provider.Error) in err's
// chain, or Transient for an unclassified non-nil error (the safe guess:
// retried a bounded number of times), or 0 for nil.
func ClassOf(err error) Class { return provider.ClassOf(err) }

// ParseRetryAfter reads a Retry-After header value, delay-seconds or an
// HTTP date, as a duration from now; 0 when empty, unparsable or past.
func ParseRetryAfter(v string, now time.Time) time.Duration {
	return provider.ParseRetryAfter(v, now)
}

// asError is err as an *Error when a provider.Client classified it, else
// err itself (a cancellation).
func asError(err error) error {
	if pe, ok := errors.AsType[*provider.Error](err); ok {
		return (*Error)(pe)
	}
	return err
}
