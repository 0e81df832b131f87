// Package problem names what is wrong with a request the orchestrator
// refuses, so that the HTTP layer maps each to its status code in one
// place (api's error handler): not found (404), unauthorized (401), a
// conflict with the state of things (409), and bad input (400).
package problem

import "errors"

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
