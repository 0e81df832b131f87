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
	r := &callbackRequest{batchID: batchID, taskID: taskID, done: make(chan struct{})}
	if token != "" {
		sum := sha256.Sum256([]byte(token))
		r.tokenHash = sum[:]
	}
	// The body is parsed here, outside the group's transaction; its errors
	// are reported only after the task and token have been checked, so an
	// unauthenticated caller learns nothing from them.
	r.status, r.result, r.errMsg, r.parseErr = parseCallback(taskID, batchID, body)
	return s.callbacks.submit(ctx, r)
}

// callbackRequest is one callback waiting for its group's commit.
type callbackRequest struct {
	batchID, taskID string
	tokenHash       []byte // nil when no token was presented
	status          phases.TaskStatus
	result          []byte
	errMsg          string // the worker's error message, for an error callback
	parseErr        error

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

// applyCallbacks applies a group of callbacks in the caller's transaction
// and returns each one's outcome.
//
// Under the shared lock of every batch concerned (the fan-in guard: see
// jobs.PhaseCheckWorker for why it makes the last callback's wake-up
// impossible to lose), it reads the tasks, checks tokens and bodies, ends
// the valid ones with their events in one statement, explains the rest
// (repeats, late callbacks), and makes sure each phase touched has a
// pending fan-in check.
func (s *Service) applyCallbacks(ctx context.Context, tx pgx.Tx, group []*callbackRequest) ([]outcome, error) {
	q := db.New(tx)
	batchIDs := make([]string, len(group))
	taskIDs := make([]string, len(group))
	for i, r := range group {
		batchIDs[i], taskIDs[i] = r.batchID, r.taskID
	}
	tasks, checkPending, err := readForCallbacks(ctx, tx, batchIDs, taskIDs)
	if err != nil {
		return nil, err
	}

	outcomes := make([]outcome, len(group))
	var params db.TaskCompleteManyParams
	var valid []int               // callbacks that passed every check
	first := make(map[string]int) // task id -> the request that tries to end it
	for i, r := range group {
		t, ok := tasks[r.taskID]
		if !ok || t.BatchID != r.batchID {
			outcomes[i].err = fmt.Errorf("task %s of batch %s: %w", r.taskID, r.batchID, db.ErrNotFound)
			continue
		}
		if r.tokenHash == nil {
			outcomes[i].err = fmt.Errorf("%w: missing bearer token", ErrUnauthorized)
			continue
		}
		if t.TokenHash == nil || subtle.ConstantTimeCompare(r.tokenHash, t.TokenHash) != 1 {
			// A task ended by a timeout or reset keeps the hash of its last
			// launch, so its late worker still authenticates and gets its 409.
			outcomes[i].err = fmt.Errorf("%w: wrong callback token for task %s", ErrUnauthorized, r.taskID)
			continue
		}
		if r.parseErr != nil {
			outcomes[i].err = r.parseErr
			continue
		}
		if r.status == phases.TaskCompleted {
			if err := phases.ValidateResult(phases.Name(t.Phase), r.result); err != nil {
				outcomes[i].err = &InputError{Msg: "invalid callback: " + err.Error()}
				continue
			}
		}
		outcomes[i].out = CallbackResult{TaskID: r.taskID, Status: string(r.status)}
		valid = append(valid, i)
		if _, seen := first[r.taskID]; seen {
			continue // a repeat within the group: explained below
		}
		first[r.taskID] = i
		params.IDs = append(params.IDs, r.taskID)
		params.Statuses = append(params.Statuses, string(r.status))
		params.Results = append(params.Results, string(r.result))
		params.Errors = append(params.Errors, r.errMsg)
		params.TokenHashes = append(params.TokenHashes, r.tokenHash)
	}
	if len(params.IDs) == 0 {
		return outcomes, nil
	}

	ended, err := q.TaskCompleteMany(ctx, params)
	if err != nil {
		return nil, fmt.Errorf("ending tasks: %w", err)
	}
	applied := make(map[string]bool, len(ended))
	var checks []phaseKey
	for _, e := range ended {
		applied[e.ID] = true
		if k := (phaseKey{e.BatchID, e.Phase}); !checkPending[k] && !slices.Contains(checks, k) {
			checks = append(checks, k)
		}
	}
	for _, k := range checks {
		if err := jobs.InsertPhaseCheck(ctx, tx, s.river, k.batchID, k.phase); err != nil {
			return nil, err
		}
	}

	// The rest were valid but did not apply: the task had ended already
	// (rare: a repeat, a timeout or a reset got there first).
	var explain []int
	for _, i := range valid {
		if !applied[group[i].taskID] || first[group[i].taskID] != i {
			explain = append(explain, i)
			continue
		}
		outcomes[i].applied, outcomes[i].phase = true, tasks[group[i].taskID].Phase
	}
	if len(explain) == 0 {
		return outcomes, nil
	}
	ids := make([]string, len(explain))
	for j, i := range explain {
		ids[j] = group[i].taskID
	}
	now, err := q.TaskListForCallbacks(ctx, ids)
	if err != nil {
		return nil, fmt.Errorf("re-reading tasks: %w", err)
	}
	current := make(map[string]db.TaskListForCallbacksRow, len(now))
	for _, t := range now {
		current[t.ID] = t
	}
	for _, i := range explain {
		outcomes[i], err = notApplied(ctx, q, group[i], current[group[i].taskID])
		if err != nil {
			return nil, err
		}
	}
	return outcomes, nil
}

// phaseKey names a batch's phase.
type phaseKey struct{ batchID, phase string }

// Reads the callback path pipelines in one round trip. (sqlc's generated
// functions each take a round trip of their own.)
const (
	// lockBatchesSharedSQL is BatchLockShared for several batches, in sorted
	// order so that no two callers can wait on each other.
	lockBatchesSharedSQL = `SELECT pg_advisory_xact_lock_shared(hashtextextended('batch:' || id, 0))
FROM (SELECT DISTINCT unnest($1::text[]) AS id ORDER BY 1) b`
	tasksForCallbacksSQL = `SELECT id, batch_id, phase, status, token_hash, ended_by FROM tasks WHERE id = ANY($1::text[])`
)

// readForCallbacks takes the shared lock of every batch concerned, then
// reads the tasks and whether each of their phases has an unfinished
// fan-in check, in one round trip. Each is a statement of its own, run in
// order, so the last one's snapshot is taken under the locks, as
// jobs.PendingPhaseChecksSQL requires.
func readForCallbacks(ctx context.Context, tx pgx.Tx, batchIDs, taskIDs []string) (map[string]db.TaskListForCallbacksRow, map[phaseKey]bool, error) {
	b := &pgx.Batch{}
	b.Queue(lockBatchesSharedSQL, batchIDs)
	b.Queue(tasksForCallbacksSQL, taskIDs)
	b.Queue(jobs.PendingPhaseChecksSQL, taskIDs)
	br := tx.SendBatch(ctx, b)
	defer br.Close()
	if _, err := br.Exec(); err != nil {
		return nil, nil, fmt.Errorf("locking batches: %w", err)
	}
	rows, _ := br.Query()
	list, err := pgx.CollectRows(rows, pgx.RowToStructByPos[db.TaskListForCallbacksRow])
	if err != nil {
		return nil, nil, fmt.Errorf("reading tasks: %w", err)
	}
	tasks := make(map[string]db.TaskListForCallbacksRow, len(list))
	for _, t := range list {
		tasks[t.ID] = t
	}
	rows, _ = br.Query()
	pending := make(map[phaseKey]bool)
	var k phaseKey
	var p bool
	if _, err := pgx.ForEachRow(rows, []any{&k.batchID, &k.phase, &p}, func() error {
		pending[k] = p
		return nil
	}); err != nil {
		return nil, nil, fmt.Errorf("looking for pending phase checks: %w", err)
	}
	return tasks, pending, br.Close()
}

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
