package worker

import (
	"errors"

	"github.com/arke-institute/orchestrator/blob"
)

// transientError marks an error as transient.
type transientError struct{ err error }

func (e *transientError) Error() string { return e.err.Error() }
func (e *transientError) Unwrap() error { return e.err }

// Transient marks err as a transient failure, worth another attempt on a
// fresh machine, for failures Retryable cannot recognise by their type (a
// worker stopped under its work, say). It returns nil for nil.
func Transient(err error) error {
	if err == nil {
		return nil
	}
	return &transientError{err}
}

// Retryable classifies a task's failure as spec 002 and 004 do: transient
// (another attempt may succeed) or permanent (the same input fails the same
// way). Transient are errors marked with Transient, the storage's 5xx and
// 429 answers, timeouts and connection errors (blob.IsTransient), and the
// orchestrator answering 5xx or 429, or not at all, to a request for URLs.
// Everything else is permanent: bad input, decode errors, a missing
// object, any other 4xx, a panic.
func Retryable(err error) bool {
	var t *transientError
	if errors.As(err, &t) {
		return true
	}
	var se *StatusError
	if errors.As(err, &se) && se.Code != 0 {
		return retryable(se.Code)
	}
	return blob.IsTransient(err)
}
