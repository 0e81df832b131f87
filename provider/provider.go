// Package provider holds what every caller of an external API shares: the
// classification of failures (Class, Error, ClassOf), Retry-After parsing,
// and Client, the setup of the official openai-go client for an
// OpenAI-compatible API (OCR, embeddings, tags) with its own retries off, a
// bounded answer body, and every error status classified.
//
// A caller switches on the Class: a permanent failure ends the item, an
// auth failure ends every call to that provider, a transient one is worth
// retrying, and a rate-limited one is back-pressure that costs no retry.
package provider

import (
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// Class says what a caller should do about a failed call.
type Class int

// The classes of failure. The zero Class is never used by an *Error.
const (
	// Permanent: this input will never succeed (refused, corrupt, too large,
	// an answer that cannot be decoded). Mark the item failed; do not retry.
	Permanent Class = iota + 1
	// Auth: the provider refused the key (401, 403). Every other call would
	// fail the same way, so the caller stops with the provider's message;
	// for one item it is as final as Permanent.
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

// Error is a classified failure of a call to a provider.
type Error struct {
	// Service names the kind of call in the error's text ("embeddings",
	// "tags"); "provider" when empty.
	Service string
	Class   Class
	// Status is the provider's HTTP status, 0 when there was no answer.
	Status int
	// Message says what went wrong, in the provider's own words when it
	// sent some ({"error": {"message": ...}}).
	Message string
	// RetryAfter is the provider's Retry-After (seconds or an HTTP date),
	// 0 when absent or unparsable. Only set on RateLimited and 503 errors.
	RetryAfter time.Duration
	// Timeout reports that no answer came within the call's timeout.
	Timeout bool
	// Err is the underlying error, if any (a transport error, a decoding
	// error, an exec error).
	Err error
}

func (e *Error) Error() string {
	service := e.Service
	if service == "" {
		service = "provider"
	}
	return FormatError(service, e.Class, e.Status, e.Message, e.Err)
}

func (e *Error) Unwrap() error { return e.Err }

// FormatError is an Error's text: "{service} {class} error (HTTP
// {status}): {message}", the status left out when 0 and the message taken
// from err when empty. Packages that keep their own error type (ocr) use it
// to keep the same shape.
func FormatError(service string, class Class, status int, message string, err error) string {
	if message == "" && err != nil {
		message = err.Error()
	}
	if status != 0 {
		return fmt.Sprintf("%s %s error (HTTP %d): %s", service, class, status, message)
	}
	return fmt.Sprintf("%s %s error: %s", service, class, message)
}

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

// Overloaded reports whether err says the provider is short of capacity
// without a 429: a 503, or no answer within the call's timeout. A limiter
// slows down for these as for a 429.
func Overloaded(err error) bool {
	e, ok := errors.AsType[*Error](err)
	if !ok || e.Class != Transient {
		return false
	}
	return e.Status == http.StatusServiceUnavailable || e.Timeout
}

// Refused reports that err is the provider's 400 refusing a parameter
// named in its message: what a model without the feature (shortened
// vectors, a JSON mode) answers, so that the caller asks again without it.
func Refused(err error, parameter string) bool {
	e, ok := errors.AsType[*Error](err)
	return ok && e.Status == http.StatusBadRequest && strings.Contains(strings.ToLower(e.Message), strings.ToLower(parameter))
}

// ParseRetryAfter reads a Retry-After header value, delay-seconds or an
// HTTP date, as a duration from now; 0 when empty, unparsable or past.
// Seconds are capped at a day.
func ParseRetryAfter(v string, now time.Time) time.Duration {
	v = strings.TrimSpace(v)
	if v == "" {
		return 0
	}
	if n, err := strconv.ParseInt(v, 10, 64); err == nil {
		if n <= 0 {
			return 0
		}
		return time.Duration(min(n, 24*3600)) * time.Second
	}
	if t, err := http.ParseTime(v); err == nil && t.After(now) {
		return t.Sub(now)
	}
	return 0
}

// Retry is the one rule by which a failed call of an item or a step (an
// OCR ref, a document's step) is retried: by time, not by count. A
// transient failure is retried with capped exponential backoff, and a
// rate-limited one (a 429) after the provider's Retry-After, for as long
// as the failures in a row have lasted less than Window; then the item or
// step ends with the reason, never looping for ever.
type Retry struct {
	// Window bounds how long an item or step may keep failing
	// transiently or being rate limited, from its first failure in a row
	// (TRANSIENT_RETRY_WINDOW); DefaultRetryWindow when not positive.
	Window time.Duration
	// MinRetries are the retries after transient failures granted however
	// short the window (OCR's MAX_RETRIES_PER_REF).
	MinRetries int
	// MaxBackoff caps the wait between retries after transient failures.
	MaxBackoff time.Duration
}

// DefaultRetryWindow is Retry.Window unless set.
const DefaultRetryWindow = 30 * time.Minute

// Decision is what Retry.Decide made of a failure.
type Decision struct {
	// Retry: call again after Wait. Counted: the retry uses one of the
	// transient retries (a rate-limited one does not).
	Retry   bool
	Counted bool
	Wait    time.Duration
	// Reason is why the item or step ends, when it does not retry.
	Reason string
}

// Decide says what becomes of a call that failed with err (not nil), for
// an item that has used retries transient retries and has been failing
// since since (zero: this is its first failure in a row), at now.
func (r Retry) Decide(err error, retries int, since, now time.Time) Decision {
	if since.IsZero() || since.After(now) {
		since = now
	}
	failing := now.Sub(since)
	window := r.Window
	if window <= 0 {
		window = DefaultRetryWindow
	}
	within := failing < window
	switch ClassOf(err) {
	case RateLimited:
		if !within {
			return Decision{Reason: fmt.Sprintf("provider quota exhausted for %s: %v", minutes(failing), err)}
		}
		wait := time.Second
		if e, ok := errors.AsType[*Error](err); ok && e.RetryAfter > 0 {
			wait = e.RetryAfter
		}
		return Decision{Retry: true, Wait: wait}
	case Transient:
		if !within && retries >= r.MinRetries {
			return Decision{Reason: fmt.Sprintf("gave up after %d retries in %s: %v", retries, failing.Round(time.Second), err)}
		}
		wait := time.Second << min(retries, 20)
		if r.MaxBackoff > 0 {
			wait = min(wait, r.MaxBackoff)
		}
		return Decision{Retry: true, Counted: true, Wait: wait}
	}
	return Decision{Reason: err.Error()}
}

// minutes says how long d is, in whole minutes from a minute on ("31
// min"), in seconds below ("45s").
func minutes(d time.Duration) string {
	if d < time.Minute {
		return d.Round(time.Second).String()
	}
	return fmt.Sprintf("%d min", int(d.Round(time.Minute)/time.Minute))
}
