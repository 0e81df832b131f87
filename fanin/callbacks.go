package fanin

import (
	"bytes"
	"context"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/arke-institute/orchestrator/db"
	"github.com/arke-institute/orchestrator/phases"
)

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

// NewCallback is a callback whose token has been checked, record being
// its record (tasktoken.Open). It parses the body on the caller's
// goroutine: the less a group's committer does, the sooner it sends the
// next group.
func NewCallback(batchID, taskID string, record, body []byte) Callback {
	cb := Callback{BatchID: batchID, TaskID: taskID, TokenHash: record}
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

// decision is what a group decided for one of its callbacks; it is handed
// to the request only once the group has committed.
type decision struct {
	Outcome
	// applied is true for the callback that ended its task, whose phase
	// this is; repeats and refusals are not applied.
	applied bool
	phase   string
	// overtook is the task an earlier attempt's success completed
	// (TaskCompleteOvertaken), when this callback did.
	overtook *Overtaken
}

// applyGroup applies a group of callbacks in a transaction it begins on
// conn, and returns each one's decision; the caller commits (or rolls
// back) the transaction it returns. When commitPrev is not nil, conn holds
// the previous group's open transaction: applyGroup commits it first, in
// the same round trip, and calls commitPrev with the outcome (see
// sendGroup).
//
// Under the shared lock of every batch concerned (the fan-in guard: see
// fanin.go for why it makes the last callback's wake-up impossible to
// lose), it ends the tasks of the callbacks that look valid,
// with their events, in one statement that also checks their tokens and
// batches; makes sure each phase touched has a pending fan-in check; and
// explains the rest (unknown tasks, wrong tokens, bad bodies, repeats,
// late callbacks).
//
// A group takes one round trip, so a body is checked before its task is
// read: its phase comes from its task id (phases.OfTask). A callback
// that fails a check is not sent; its task is read afterwards, so that the
// answer follows the usual order (explain).
func (c *Committer) applyGroup(ctx context.Context, conn *pgx.Conn, group []*request, commitPrev func(error)) (*pipelinedTx, []decision, error) {
	decisions := make([]decision, len(group))
	params := db.TaskCompleteManyParams{MaxAttempts: int32(c.maxTries), RetireSeconds: c.retireLimit.Seconds(), TransientSeconds: c.transientWindow.Seconds()}
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
		params.IDs = append(params.IDs, r.TaskID)
		params.BatchIDs = append(params.BatchIDs, r.BatchID)
		params.Statuses = append(params.Statuses, string(r.Status))
		params.Results = append(params.Results, string(r.Result))
		params.Errors = append(params.Errors, r.Error)
		params.TokenHashes = append(params.TokenHashes, r.TokenHash)
		params.Retryables = append(params.Retryables, r.Retryable)
	}

	tx := &pipelinedTx{conn: conn}
	applied, err := sendGroup(ctx, conn, params, refsOf(group), commitPrev)
	if err != nil {
		return tx, nil, err
	}

	// Phases with an ended task and no pending check get one; the
	// executors of those with a task to retry hear of it (a launcher).
	var checks, requeued []PhaseRef
	ended := make(map[attempt]db.TaskCompleteManyRow, len(applied.ended))
	for _, e := range applied.ended {
		ended[attempt{e.ID, e.BatchID, string(e.TokenHash)}] = e
		k := PhaseRef{BatchID: e.BatchID, Phase: e.Phase}
		if phases.TaskStatus(e.Status) == phases.TaskPending {
			requeued = append(requeued, k)
		} else {
			checks = append(checks, k)
		}
	}
	if err := insertMissing(ctx, tx, c.river, checks, applied.pending); err != nil {
		return tx, nil, err
	}
	if len(requeued) > 0 && c.executors != nil {
		if err := c.executors.Requeued(ctx, tx, c.river, requeued); err != nil {
			return tx, nil, err
		}
	}

	var unapplied []int
	for i, r := range group {
		k := attemptOf(r)
		if e, ok := ended[k]; ok && first[k] == i {
			decisions[i] = decision{Outcome: Outcome{Status: phases.TaskStatus(e.Status)}, applied: true, phase: e.Phase}
			continue
		}
		unapplied = append(unapplied, i)
	}
	if len(unapplied) == 0 {
		return tx, decisions, nil
	}
	ids := make([]string, len(unapplied))
	for j, i := range unapplied {
		ids[j] = group[i].TaskID
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
	var overtaken []Overtaken
	for _, i := range unapplied {
		if decisions[i], err = c.explain(ctx, q, group[i], current); err != nil {
			return tx, nil, err
		}
		if decisions[i].overtook != nil {
			overtaken = append(overtaken, *decisions[i].overtook)
		}
	}
	if len(overtaken) > 0 {
		refs := make([]PhaseRef, len(overtaken))
		for i, o := range overtaken {
			refs[i] = o.PhaseRef
		}
		if err := insertMissing(ctx, tx, c.river, refs, applied.pending); err != nil {
			return tx, nil, err
		}
		if c.executors != nil {
			if err := c.executors.Overtaken(ctx, tx, c.river, overtaken); err != nil {
				return tx, nil, err
			}
		}
	}
	return tx, decisions, nil
}

// attempt is what decides whether a callback can end its task: the task,
// the batch its URL names, and the token presented.
type attempt struct{ taskID, batchID, tokenHash string }

func attemptOf(r *request) attempt { return attempt{r.TaskID, r.BatchID, string(r.TokenHash)} }

// plausible tells whether a callback passes every check that needs no
// database: a token, a well-formed body, and for a success, a result that
// fits the phase its task id names.
func (c *Committer) plausible(r *request) bool {
	if r.TokenHash == nil || r.Invalid != "" {
		return false
	}
	phase := phases.OfTask(r.TaskID)
	if phase == "" {
		return false
	}
	return r.Status != phases.TaskCompleted || phases.ValidateBatchResult(phase, r.BatchID, r.Result, c.maxOutputs) == nil
}

// explain decides for a callback that did not end its task, from the task
// as it is now (current, by id), checking in the order a caller is
// answered: the task, the token, the body, then how the task ended (a
// repeat, or a late callback).
func (c *Committer) explain(ctx context.Context, q *db.Queries, r *request, current map[string]db.TaskListForCallbacksRow) (decision, error) {
	refuse := func(why Refusal, format string, a ...any) (decision, error) {
		return decision{Outcome: Outcome{Refusal: why, Reason: fmt.Sprintf(format, a...)}}, nil
	}
	t, ok := current[r.TaskID]
	if !ok || t.BatchID != r.BatchID {
		return refuse(UnknownTask, "task %s of batch %s", r.TaskID, r.BatchID)
	}
	if r.TokenHash == nil {
		return refuse(BadToken, "missing bearer token")
	}
	if t.TokenHash == nil || subtle.ConstantTimeCompare(r.TokenHash, t.TokenHash) != 1 {
		for _, h := range t.SupersededTokenHashes {
			if subtle.ConstantTimeCompare(r.TokenHash, h) == 1 {
				// An earlier attempt's: its machine was given up on and
				// the task launched again.
				return c.superseded(ctx, q, r, t)
			}
		}
		// A task ended by a timeout or reset keeps the hash of its last
		// launch, so its late worker still authenticates and gets its 409.
		return refuse(BadToken, "wrong callback token for task %s", r.TaskID)
	}
	if r.Invalid != "" {
		return refuse(InvalidBody, "%s", r.Invalid)
	}
	if r.Status == phases.TaskCompleted {
		if err := phases.ValidateBatchResult(phases.Name(t.Phase), r.BatchID, r.Result, c.maxOutputs); err != nil {
			return refuse(InvalidBody, "%s", err.Error())
		}
	}
	return notApplied(ctx, q, r, t)
}

// notApplied decides for a callback whose task was no longer processing: a
// repeat of the callback that ended it (no change), or a late one for a
// task that timed out or was reset (refused and recorded: the rejection
// event is kept although the callback fails).
func notApplied(ctx context.Context, q *db.Queries, r *request, task db.TaskListForCallbacksRow) (decision, error) {
	endedBy := ""
	if task.EndedBy != nil {
		endedBy = *task.EndedBy
	}
	if endedBy == "callback" || (endedBy == "retry" && r.Status == phases.TaskFailed) {
		// A repeat; or an error of an attempt already being retried (its
		// late report after a timeout changes nothing either).
		return decision{Outcome: Outcome{Status: phases.TaskStatus(task.Status), Duplicate: true}}, nil
	}
	reason := fmt.Sprintf("task %s is %s", r.TaskID, task.Status)
	switch endedBy {
	case "timeout":
		reason = fmt.Sprintf("task %s already timed out", r.TaskID)
	case "reset":
		reason = fmt.Sprintf("batch %s was reset or has failed", r.BatchID)
	}
	if err := q.EventRecord(ctx, db.Event{BatchID: r.BatchID, Type: db.EventCallbackRejected, Phase: task.Phase, TaskID: r.TaskID,
		Data: map[string]any{"reason": reason, "reported": string(r.Status)}}); err != nil {
		return decision{}, err
	}
	return decision{Outcome: Outcome{Refusal: TaskEnded, Reason: reason}}, nil
}

// superseded decides for a callback of an attempt that a later attempt
// of its task has replaced. Its success is taken while the task has none
// and its phase is open (TaskCompleteOvertaken): work is not thrown away
// because a later attempt was started, and the later machine is stopped.
// Anything else is refused, and recorded.
func (c *Committer) superseded(ctx context.Context, q *db.Queries, r *request, task db.TaskListForCallbacksRow) (decision, error) {
	if r.Status == phases.TaskCompleted && r.Invalid == "" &&
		phases.ValidateBatchResult(phases.Name(task.Phase), r.BatchID, r.Result, c.maxOutputs) == nil {
		row, err := q.TaskCompleteOvertaken(ctx, db.TaskCompleteOvertakenParams{ID: r.TaskID, BatchID: r.BatchID, TokenHash: r.TokenHash,
			Result: r.Result, EventCompleted: db.EventTaskCompleted})
		switch {
		case err == nil:
			o := &Overtaken{PhaseRef: PhaseRef{BatchID: r.BatchID, Phase: row.Phase}, TaskID: r.TaskID, MachineID: row.MachineID}
			return decision{Outcome: Outcome{Status: phases.TaskCompleted}, applied: true, phase: row.Phase, overtook: o}, nil
		case !errors.Is(err, pgx.ErrNoRows):
			return decision{}, fmt.Errorf("completing task %s with an earlier attempt's success: %w", r.TaskID, err)
		}
	}
	reason := fmt.Sprintf("task %s already timed out: this attempt was superseded by a new one", r.TaskID)
	if task.Status == string(phases.TaskCompleted) {
		reason = fmt.Sprintf("task %s was completed by another attempt", r.TaskID)
	}
	if err := q.EventRecord(ctx, db.Event{BatchID: r.BatchID, Type: db.EventCallbackRejected, Phase: task.Phase, TaskID: r.TaskID,
		Data: map[string]any{"reason": reason, "reported": string(r.Status)}}); err != nil {
		return decision{}, err
	}
	return decision{Outcome: Outcome{Refusal: TaskEnded, Reason: reason}}, nil
}

// refsOf lists the phases a group's callbacks may end tasks of: each
// task's batch and the phase its id names. (The lock statement takes the
// batches of these; the pending checks' statement looks at these.)
func refsOf(group []*request) []PhaseRef {
	refs := make([]PhaseRef, len(group))
	for i, r := range group {
		refs[i] = PhaseRef{BatchID: r.BatchID, Phase: string(phases.OfTask(r.TaskID))}
	}
	return refs
}
