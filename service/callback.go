package service

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/arke-institute/orchestrator/internal/callbackcommit"
	"github.com/arke-institute/orchestrator/phases"
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

// CallbackResult tells the caller what a callback did.
type CallbackResult struct {
	TaskID string `json:"task_id"`
	Status string `json:"status"` // the task's status after the callback
	// Duplicate is true when the task had already been ended by a callback:
	// nothing changed.
	Duplicate bool `json:"duplicate"`
}

// callbackBody is the part of a worker's callback common to every phase
// (spec 000 §4.4).
type callbackBody struct {
	TaskID  *string `json:"task_id"`
	BatchID *string `json:"batch_id"`
	Status  *string `json:"status"`
	Error   *string `json:"error"`
	// Retryable marks an error as transient (an outage, a timeout): the
	// task is retried on a fresh machine while it has attempts left.
	// Absent means false, as from workers older than the field.
	Retryable *bool `json:"retryable"`
}

// Callback applies a worker's callback to its task, and answers only once
// that change has committed. Concurrent callbacks commit in groups
// (callbackcommit); the work per callback stays O(1).
//
// Outcomes: 404 for an unknown batch or task, 401 for a missing or wrong
// token, 400 for a malformed body, 409 for a task that already ended some
// other way (its attempt timed out and was superseded, reset; the
// rejection is recorded), and a harmless 200 for a repeat. A retryable
// error with attempts left answers 200 with status "pending": the task is
// retried.
func (s *Service) Callback(ctx context.Context, batchID, taskID, token string, body []byte) (CallbackResult, error) {
	out, err := s.callbacks.Apply(ctx, newCallback(batchID, taskID, token, body))
	if err != nil {
		return CallbackResult{}, err
	}
	switch out.Refusal {
	case callbackcommit.UnknownTask:
		return CallbackResult{}, fmt.Errorf("%s: %w", out.Reason, ErrNotFound)
	case callbackcommit.BadToken:
		return CallbackResult{}, fmt.Errorf("%w: %s", ErrUnauthorized, out.Reason)
	case callbackcommit.InvalidBody:
		return CallbackResult{}, &InputError{Msg: "invalid callback: " + out.Reason}
	case callbackcommit.TaskEnded:
		return CallbackResult{}, fmt.Errorf("%w: %s", ErrConflict, out.Reason)
	}
	return CallbackResult{TaskID: taskID, Status: string(out.Status), Duplicate: out.Duplicate}, nil
}

// newCallback hashes the token and parses the body, on the caller's
// goroutine: the less a group's committer does, the sooner it sends the
// next group.
func newCallback(batchID, taskID, token string, body []byte) callbackcommit.Callback {
	cb := callbackcommit.Callback{BatchID: batchID, TaskID: taskID}
	if token != "" {
		sum := sha256.Sum256([]byte(token))
		cb.TokenHash = sum[:]
	}
	cb.Status, cb.Result, cb.Error, cb.Retryable, cb.Invalid = parseCallback(taskID, batchID, body)
	return cb
}

// parseCallback validates the phase-independent part of a callback body:
// the status is "success" or "error"; an error carries a message; task_id
// and batch_id, when given, must match the URL. It returns the status, the
// result to keep, the worker's error message and what is wrong with the
// body ("" for nothing). A success's result fields are checked against the
// task's phase once the task has been read. retryable is an error's
// "retryable" (false when absent).
func parseCallback(taskID, batchID string, body []byte) (status phases.TaskStatus, result []byte, errMsg string, retryable bool, invalid string) {
	bad := func(format string, a ...any) (phases.TaskStatus, []byte, string, bool, string) {
		return "", nil, "", false, fmt.Sprintf(format, a...)
	}
	trimmed := bytes.TrimSpace(body)
	if len(trimmed) == 0 || trimmed[0] != '{' {
		return bad("body must be a JSON object")
	}
	if bytes.Contains(trimmed, []byte(`\u0000`)) {
		// Valid JSON, but the body is kept as jsonb, which cannot hold it.
		return bad(`strings must not contain the NUL character (\u0000)`)
	}
	var b callbackBody
	if err := json.Unmarshal(trimmed, &b); err != nil {
		return bad("%v", err)
	}
	if b.TaskID != nil && *b.TaskID != taskID {
		return bad("task_id %q does not match the URL's %q", *b.TaskID, taskID)
	}
	if b.BatchID != nil && *b.BatchID != batchID {
		return bad("batch_id %q does not match the URL's %q", *b.BatchID, batchID)
	}
	if b.Status == nil {
		return bad(`status is required ("success" or "error")`)
	}
	switch *b.Status {
	case "error":
		msg := "worker reported an error without a message"
		if b.Error != nil && *b.Error != "" {
			msg = *b.Error
		}
		return phases.TaskFailed, trimmed, msg, b.Retryable != nil && *b.Retryable, ""
	case "success":
		return phases.TaskCompleted, trimmed, "", false, ""
	default:
		return bad(`status must be "success" or "error", got %q`, *b.Status)
	}
}
