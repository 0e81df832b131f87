package service

import (
	"errors"
)

// Errors the HTTP layer maps to status codes.
var (
	// ErrUnauthorized: a missing or wrong token (401).
	ErrUnauthorized = errors.New("unauthorized")
	// ErrConflict: the request does not fit the batch's state (409).
	ErrConflict = errors.New("conflict")
)

// InputError is a request whose content is wrong (400).
type InputError struct{ Msg string }

func (e *InputError) Error() string { return e.Msg }
