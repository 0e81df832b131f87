package service

import (
	"bytes"
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"fmt"
	"slices"

	"github.com/jackc/pgerrcode"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

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

// Callback applies a worker's callback to its task, and answers only once
// that change has committed.
//
// Concurrent callbacks are applied in groups, each group in one transaction
// (group commit; see callbackGroups): every callback is otherwise a tiny
// transaction, and a commit per callback would cap throughput well below
// what the database can do. The work per callback stays O(1).
//
// Outcomes: 404 for an unknown batch or task, 401 for a missing or wrong
// token, 400 for a malformed body, 409 for a task that already ended some
// other way (timed out, reset; the rejection is recorded), and a harmless
// 200 for a repeat.
func (s *Service) Callback(ctx context.Context, batchID, taskID, token string, body []byte) (CallbackResult, error) {
	return s.callbacks.submit(ctx, newCallbackRequest(batchID, taskID, token, body))
}

// newCallbackRequest hashes the token and checks the body, on the caller's
// goroutine: the less the group's committer does, the sooner it sends the
// next group. The body's errors are reported only after the task and token
// have been checked, so an unauthenticated caller learns nothing from them.
func newCallbackRequest(batchID, taskID, token string, body []byte) *callbackRequest {
	r := &callbackRequest{batchID: batchID, taskID: taskID, done: make(chan struct{})}
	if token != "" {
		sum := sha256.Sum256([]byte(token))
		r.tokenHash = sum[:]
	}
	r.status, r.result, r.errMsg, r.parseErr = parseCallback(taskID, batchID, body)
	r.plausible = plausible(r)
	return r
}

// callbackRequest is one callback waiting for its group's commit.
type callbackRequest struct {
	batchID, taskID string
	tokenHash       []byte // nil when no token was presented
	status          phases.TaskStatus
	result          []byte
	errMsg          string // the worker's error message, for an error callback
	parseErr        error
	plausible       bool // see plausible

	// Set by the group before done is closed.
	out  CallbackResult
	err  error
	done chan struct{}
}

// outcome is what a group decided for one of its callbacks; it is handed to
// the request only once the group has committed.
type outcome struct {
	out CallbackResult
	err error
	// applied is true for the callback that ended its task, whose phase
	// this is; repeats and rejections are not applied.
	applied bool
	phase   string
}

// applyCallbacks applies a group of callbacks in a transaction it begins
// on conn, and returns each one's outcome; the caller commits (or rolls
// back) the transaction it returns. When commitPrev is not nil, conn holds
// the previous group's open transaction: applyCallbacks commits it first,
// in the same round trip, and calls commitPrev with the outcome (see
// sendGroup).
//
// Under the shared lock of every batch concerned (the fan-in guard: see
// jobs.PhaseCheckWorker for why it makes the last callback's wake-up
// impossible to lose), it ends the tasks of the callbacks that look valid
// with their events in one statement, which also checks their tokens and
// batches; makes sure each phase touched has a pending fan-in check; and
// explains the rest (unknown tasks, wrong tokens, bad bodies, repeats, late
// callbacks).
//
// The usual group takes one round trip (sendGroup): its COMMIT goes with
// the next group's statements. So a body is checked before its task is read: its phase comes
// from its task id (phases.OfTask). A callback that fails a check is
// not sent; its task is read afterwards, so that the answer follows the
// usual order (404, then 401, then 400), and an unauthenticated caller
// learns nothing about its body.
func (s *Service) applyCallbacks(ctx context.Context, conn *pgx.Conn, group []*callbackRequest, commitPrev func(error)) (*pipelinedTx, []outcome, error) {
	outcomes := make([]outcome, len(group))
	var params db.TaskCompleteManyParams
	// The request that tries to end a task with a batch and token. One
	// task's callbacks with different batches or tokens are all tried (at
	// most one can match): were only the first tried, a stray caller's
	// wrong token would shadow the worker's callback behind it.
	first := make(map[attempt]int)
	for i, r := range group {
		k := attemptOf(r)
		if _, seen := first[k]; seen || !r.plausible {
			continue // explained below
		}
		first[k] = i
		params.IDs = append(params.IDs, r.taskID)
		params.BatchIDs = append(params.BatchIDs, r.batchID)
		params.Statuses = append(params.Statuses, string(r.status))
		params.Results = append(params.Results, string(r.result))
		params.Errors = append(params.Errors, r.errMsg)
		params.TokenHashes = append(params.TokenHashes, r.tokenHash)
	}

	tx := &pipelinedTx{conn: conn}
	applied, err := sendGroup(ctx, conn, params, batchIDsOf(group), commitPrev)
	if err != nil {
		return tx, nil, err
	}

	var checks []phaseKey
	ended := make(map[attempt]string, len(applied.ended)) // -> the task's phase
	for _, e := range applied.ended {
		ended[attempt{e.ID, e.BatchID, string(e.TokenHash)}] = e.Phase
		if k := (phaseKey{e.BatchID, e.Phase}); !applied.pending[k] && !slices.Contains(checks, k) {
			checks = append(checks, k)
		}
	}
	for _, k := range checks {
		if err := jobs.InsertPhaseCheck(ctx, tx, s.river, k.batchID, k.phase); err != nil {
			return tx, nil, err
		}
	}

	var explain []int
	for i, r := range group {
		k := attemptOf(r)
		if phase, ok := ended[k]; ok && first[k] == i {
			outcomes[i] = outcome{out: CallbackResult{TaskID: r.taskID, Status: string(r.status)}, applied: true, phase: phase}
			continue
		}
		explain = append(explain, i)
	}
	if len(explain) == 0 {
		return tx, outcomes, nil
	}
	ids := make([]string, len(explain))
	for j, i := range explain {
		ids[j] = group[i].taskID
	}
	q := db.New(tx)
	now, err := q.TaskListForCallbacks(ctx, ids)
	if err != nil {
		return tx, nil, fmt.Errorf("reading tasks: %w", err)
	}
	current := make(map[string]db.TaskListForCallbacksRow, len(now))
	for _, t := range now {
		current[t.ID] = t
	}
	for _, i := range explain {
		if outcomes[i], err = explainCallback(ctx, q, group[i], current); err != nil {
			return tx, nil, err
		}
	}
	return tx, outcomes, nil
}

// attempt is what decides whether a callback can end its task: the task,
// the batch its URL names, and the token presented.
type attempt struct{ taskID, batchID, tokenHash string }

func attemptOf(r *callbackRequest) attempt { return attempt{r.taskID, r.batchID, string(r.tokenHash)} }

// plausible tells whether a callback passes every check that needs no
// database: a token, a well-formed body, and for a success, a result that
// fits the phase its task id names.
func plausible(r *callbackRequest) bool {
	if r.tokenHash == nil || r.parseErr != nil {
		return false
	}
	phase := phases.OfTask(r.taskID)
	if phase == "" {
		return false
	}
	return r.status != phases.TaskCompleted || phases.ValidateResult(phase, r.result) == nil
}

// explainCallback gives the outcome of a callback that did not end its
// task, from the task as it is now (current, by id), checking in the
// order a caller is answered: the task (404), the token (401), the body
// (400), then how the task ended (a repeat, or a late callback).
func explainCallback(ctx context.Context, q *db.Queries, r *callbackRequest, current map[string]db.TaskListForCallbacksRow) (outcome, error) {
	t, ok := current[r.taskID]
	if !ok || t.BatchID != r.batchID {
		return outcome{err: fmt.Errorf("task %s of batch %s: %w", r.taskID, r.batchID, db.ErrNotFound)}, nil
	}
	if r.tokenHash == nil {
		return outcome{err: fmt.Errorf("%w: missing bearer token", ErrUnauthorized)}, nil
	}
	if t.TokenHash == nil || subtle.ConstantTimeCompare(r.tokenHash, t.TokenHash) != 1 {
		// A task ended by a timeout or reset keeps the hash of its last
		// launch, so its late worker still authenticates and gets its 409.
		return outcome{err: fmt.Errorf("%w: wrong callback token for task %s", ErrUnauthorized, r.taskID)}, nil
	}
	if r.parseErr != nil {
		return outcome{err: r.parseErr}, nil
	}
	if r.status == phases.TaskCompleted {
		if err := phases.ValidateResult(phases.Name(t.Phase), r.result); err != nil {
			return outcome{err: &InputError{Msg: "invalid callback: " + err.Error()}}, nil
		}
	}
	return notApplied(ctx, q, r, t)
}

// batchIDsOf lists the batches of a group's callbacks.
func batchIDsOf(group []*callbackRequest) []string {
	ids := make([]string, len(group))
	for i, r := range group {
		ids[i] = r.batchID
	}
	return ids
}

// phaseKey names a batch's phase.
type phaseKey struct{ batchID, phase string }

// lockBatchesSharedSQL is BatchLockShared for several batches, in sorted
// order so that no two callers can wait on each other.
const lockBatchesSharedSQL = `SELECT pg_advisory_xact_lock_shared(hashtextextended('batch:' || id, 0))
FROM (SELECT DISTINCT unnest($1::text[]) AS id ORDER BY 1) b`

// notApplied explains a callback whose task was no longer processing: a
// repeat of the callback that ended it (200, no change), or a late one for
// a task that timed out or was reset (409, recorded: the rejection event
// is kept although the request fails).
func notApplied(ctx context.Context, q *db.Queries, r *callbackRequest, task db.TaskListForCallbacksRow) (outcome, error) {
	endedBy := ""
	if task.EndedBy != nil {
		endedBy = *task.EndedBy
	}
	if endedBy == "callback" {
		return outcome{out: CallbackResult{TaskID: r.taskID, Status: task.Status, Duplicate: true}}, nil
	}
	reason := fmt.Sprintf("task %s is %s", r.taskID, task.Status)
	switch endedBy {
	case "timeout":
		reason = fmt.Sprintf("task %s already timed out", r.taskID)
	case "reset":
		reason = fmt.Sprintf("batch %s was reset or has failed", r.batchID)
	}
	if err := q.EventRecord(ctx, db.Event{BatchID: r.batchID, Type: db.EventCallbackRejected, Phase: task.Phase, TaskID: r.taskID,
		Data: map[string]any{"reason": reason, "reported": string(r.status)}}); err != nil {
		return outcome{}, err
	}
	return outcome{err: fmt.Errorf("%w: %s", ErrConflict, reason)}, nil
}

// storageInputError turns the database's refusal of a body it cannot store
// (jsonb rejects some escapes Go's JSON accepts, such as a lone surrogate
// "\ud800") into a 400 for the callback that carried it.
func storageInputError(err error) error {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && (pgErr.Code == pgerrcode.UntranslatableCharacter || pgErr.Code == pgerrcode.InvalidTextRepresentation) {
		return &InputError{Msg: "invalid callback: the body cannot be stored: " + pgErr.Message}
	}
	return err
}

// parseCallback validates the phase-independent part of a callback body:
// the status is "success" or "error"; an error carries a message; task_id
// and batch_id, when given, must match the URL. A success's result fields
// are checked against the task's phase once the task has been read.
func parseCallback(taskID, batchID string, body []byte) (phases.TaskStatus, []byte, string, error) {
	bad := func(format string, a ...any) (phases.TaskStatus, []byte, string, error) {
		return "", nil, "", &InputError{Msg: "invalid callback: " + fmt.Sprintf(format, a...)}
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
		return phases.TaskFailed, trimmed, msg, nil
	case "success":
		return phases.TaskCompleted, trimmed, "", nil
	default:
		return bad(`status must be "success" or "error", got %q`, *b.Status)
	}
}
