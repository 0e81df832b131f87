// Package problem names what is wrong with a request the orchestrator
// refuses, so that the HTTP layer maps each to its status code in one
// place (api's error handler): not found (404), unauthorized (401), a
// conflict with the state of things (409), and bad input (400).
package problem

import (
	"errors"
	"time"
)

var (
	// ErrNotFound is an unknown batch, task, chunk or document (404).
	ErrNotFound = errors.New("not found")
	// ErrUnauthorized is a missing or wrong token (401).
	ErrUnauthorized = errors.New("unauthorized")
	// ErrConflict is a request that does not fit the state it finds (409).
	ErrConflict = errors.New("conflict")
)

// InputError is a request whose content is wrong (400); Msg says what.
type InputError struct{ Msg string }

func (e *InputError) Error() string { return e.Msg }

// LimitError is a request refused because a limit of the orchestrator is
// reached (429 with Retry-After): intake beyond admission control's
// limits. Limit names the setting; Msg says what is in flight.
type LimitError struct {
	Limit      string
	Msg        string
	RetryAfter time.Duration
}

func (e *LimitError) Error() string { return e.Msg }
