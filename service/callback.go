package service

import (
	"bytes"
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/arke-institute/orchestrator/db"
	"github.com/arke-institute/orchestrator/jobs"
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
}

// Callback applies a worker's callback to its task. It does O(1) work: one
// task lookup, then one transaction that ends the task and enqueues the
// phase's fan-in check under the batch's shared lock (see jobs.PhaseCheckWorker
// for why that lock makes the last callback's wake-up impossible to lose).
//
// Outcomes: 404 for an unknown batch or task, 401 for a missing or wrong
// token, 400 for a malformed body, 409 for a task that already ended some
// other way (timed out, reset), and a harmless 200 for a repeat.
func (s *Service) Callback(ctx context.Context, batchID, taskID, token string, body []byte) (CallbackResult, error) {
	q := db.New(s.pool)
	task, err := q.TaskGetForCallback(ctx, db.TaskGetForCallbackParams{ID: taskID, BatchID: batchID})
	if err != nil {
		return CallbackResult{}, db.NotFound(err, fmt.Sprintf("task %s of batch %s", taskID, batchID))
	}
	if token == "" {
		return CallbackResult{}, fmt.Errorf("%w: missing bearer token", ErrUnauthorized)
	}
	presented := sha256.Sum256([]byte(token))
	if task.TokenHash == nil || subtle.ConstantTimeCompare(presented[:], task.TokenHash) != 1 {
		// A task ended by a timeout or reset keeps the hash of its last
		// launch, so its late worker still authenticates and gets its 409.
		return CallbackResult{}, fmt.Errorf("%w: wrong callback token for task %s", ErrUnauthorized, taskID)
	}
	status, result, errMsg, err := parseCallback(phases.Name(task.Phase), taskID, batchID, body)
	if err != nil {
		return CallbackResult{}, err
	}

	out := CallbackResult{TaskID: taskID}
	var conflict string
	err = pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		q := db.New(tx)
		if err := q.BatchLockShared(ctx, batchID); err != nil {
			return err
		}
		_, err := q.TaskComplete(ctx, db.TaskCompleteParams{
			ID: taskID, Status: string(status), Result: result, Error: errMsg, TokenHash: presented[:],
		})
		if errors.Is(err, pgx.ErrNoRows) {
			conflict, err = s.callbackNotApplied(ctx, q, batchID, task.Phase, taskID, string(status), &out)
			return err
		}
		if err != nil {
			return fmt.Errorf("ending task %s: %w", taskID, err)
		}
		typ, data := db.EventTaskCompleted, map[string]any(nil)
		if status == phases.TaskFailed {
			typ, data = db.EventTaskFailed, map[string]any{"error": *errMsg}
		}
		if err := q.EventRecord(ctx, db.Event{BatchID: batchID, Type: typ, Phase: task.Phase, TaskID: taskID, Data: data}); err != nil {
			return err
		}
		if err := jobs.EnqueuePhaseCheck(ctx, tx, s.river, batchID, task.Phase); err != nil {
			return err
		}
		out.Status = string(status)
		return nil
	})
	if err == nil && conflict != "" {
		// The rejection was recorded (committed); now refuse the request.
		return CallbackResult{}, fmt.Errorf("%w: %s", ErrConflict, conflict)
	}
	return out, err
}

// callbackNotApplied explains a callback whose task was no longer
// processing: a repeat of the callback that ended it (200, no change), or a
// late one for a task that timed out or was reset (409, recorded: the
// rejection event must be kept although the request fails).
//
// It returns the conflict's reason, "" for a repeat.
func (s *Service) callbackNotApplied(ctx context.Context, q *db.Queries, batchID, phase, taskID, reported string, out *CallbackResult) (string, error) {
	task, err := q.TaskGetForCallback(ctx, db.TaskGetForCallbackParams{ID: taskID, BatchID: batchID})
	if err != nil {
		return "", err
	}
	endedBy := ""
	if task.EndedBy != nil {
		endedBy = *task.EndedBy
	}
	if endedBy == "callback" {
		out.Status, out.Duplicate = task.Status, true
		return "", nil
	}
	reason := fmt.Sprintf("task %s is %s", taskID, task.Status)
	switch endedBy {
	case "timeout":
		reason = fmt.Sprintf("task %s already timed out", taskID)
	case "reset":
		reason = fmt.Sprintf("batch %s was reset or has failed", batchID)
	}
	if err := q.EventRecord(ctx, db.Event{BatchID: batchID, Type: db.EventCallbackRejected, Phase: phase, TaskID: taskID,
		Data: map[string]any{"reason": reason, "reported": reported}}); err != nil {
		return "", err
	}
	return reason, nil
}

// parseCallback validates a callback body for the task's phase: the status
// is "success" or "error"; a success carries the phase's result fields; an
// error carries a message. task_id and batch_id, when given, must match the
// URL.
func parseCallback(phase phases.Name, taskID, batchID string, body []byte) (phases.TaskStatus, []byte, *string, error) {
	bad := func(format string, a ...any) (phases.TaskStatus, []byte, *string, error) {
		return "", nil, nil, &InputError{Msg: "invalid callback: " + fmt.Sprintf(format, a...)}
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
		return phases.TaskFailed, trimmed, &msg, nil
	case "success":
		if err := phases.ValidateResult(phase, trimmed); err != nil {
			return bad("%v", err)
		}
		return phases.TaskCompleted, trimmed, nil, nil
	default:
		return bad(`status must be "success" or "error", got %q`, *b.Status)
	}
}
