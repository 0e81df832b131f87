package db

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/arke-institute/orchestrator/problem"
)

// Event types written to batch_events. Every state change of a batch is one
// of these; status history, streams and reports read them.
const (
	EventBatchCreated     = "batch.created"
	EventBatchStartFailed = "batch.start_failed"
	EventBatchDone        = "batch.done"
	EventBatchDelivered   = "batch.delivered"
	EventBatchError       = "batch.error"
	EventIngestFailed     = "ingest.failed"
	EventPhaseStarted     = "phase.started"
	EventPhaseRetry       = "phase.retry"
	EventPhaseCompleted   = "phase.completed"
	EventGenerationBuilt  = "generation.built"
	EventTransformFailed  = "transform.failed"
	EventTaskLaunched     = "task.launched"
	EventTaskCompleted    = "task.completed"
	EventTaskFailed       = "task.failed"
	EventTaskTimedOut     = "task.timed_out"
	EventTaskRetrying     = "task.retrying"
	EventCallbackRejected = "callback.rejected"
	EventAdminReset       = "admin.reset"
	EventAdminRetry       = "admin.retry"
	// EventAdminPause and EventAdminResume: an admin paused the batch's
	// work, or resumed it (POST /admin/pause, /admin/resume).
	EventAdminPause       = "admin.pause"
	EventAdminResume      = "admin.resume"
	EventTaskRequeued     = "task.requeued"
	EventChunkStarted     = "chunk.started"
	EventChunkCompleted   = "chunk.completed"
	EventChunkFailed      = "chunk.failed"
	EventRateLimitChanged = "rate_limit.changed"
	EventItemsRequeued    = "chunk.items_requeued"
	// EventBatchPruned: retention removed the batch's processing state
	// (its earlier events included); its data says what went.
	EventBatchPruned  = "batch.pruned"
	EventBatchResumed = "batch.resumed"
	// EventOrphanDestroyed: the orphan reaper destroyed a machine of the
	// batch that nothing wanted (machine_id, app, reason).
	EventOrphanDestroyed = "machine.orphan_destroyed"
	// EventLaunchBounded: a phase's launches began to wait for a spend
	// bound (bound, running, machine_seconds, limit).
	EventLaunchBounded = "phase.launch_bounded"
)

// EventTypes are every event type, the constants above: the SQL that
// writes or reads events takes them as parameters, and the reports that
// name them in their text are checked against these (events_test.go).
func EventTypes() []string {
	return []string{
		EventBatchCreated, EventBatchStartFailed, EventBatchDone, EventBatchDelivered, EventBatchError, EventIngestFailed,
		EventPhaseStarted, EventPhaseRetry, EventPhaseCompleted, EventGenerationBuilt, EventTransformFailed,
		EventTaskLaunched, EventTaskCompleted, EventTaskFailed, EventTaskTimedOut, EventTaskRetrying, EventCallbackRejected,
		EventAdminReset, EventAdminRetry, EventTaskRequeued, EventChunkStarted, EventChunkCompleted, EventChunkFailed,
		EventRateLimitChanged, EventItemsRequeued, EventBatchPruned, EventBatchResumed, EventAdminPause, EventAdminResume,
		EventOrphanDestroyed, EventLaunchBounded,
	}
}

// ErrNotFound is returned when a looked-up row does not exist; callers test
// for it with errors.Is instead of knowing about pgx. It is
// problem.ErrNotFound, which the API answers 404.
var ErrNotFound = problem.ErrNotFound

// NotFound translates pgx.ErrNoRows into ErrNotFound, wrapped with what was
// looked for, and returns other errors unchanged.
func NotFound(err error, what string) error {
	if errors.Is(err, pgx.ErrNoRows) {
		return fmt.Errorf("%s: %w", what, ErrNotFound)
	}
	return err
}

// Event is one batch_events row to write.
type Event struct {
	BatchID string
	Type    string
	Phase   string // "" when the event concerns no phase
	TaskID  string // "" when the event concerns no task
	Data    any    // marshalled to JSON; nil becomes {}
}

// EventRecord writes an event in the caller's transaction, so the event
// exists exactly when the change it describes does.
func (q *Queries) EventRecord(ctx context.Context, e Event) error {
	data := []byte("{}")
	if e.Data != nil {
		var err error
		if data, err = json.Marshal(e.Data); err != nil {
			return fmt.Errorf("encoding %s event: %w", e.Type, err)
		}
	}
	err := q.BatchEventInsert(ctx, BatchEventInsertParams{
		BatchID: e.BatchID,
		Type:    e.Type,
		Phase:   nonEmpty(e.Phase),
		TaskID:  nonEmpty(e.TaskID),
		Data:    data,
	})
	if err != nil {
		return fmt.Errorf("recording %s event for batch %s: %w", e.Type, e.BatchID, err)
	}
	return nil
}

// Row turns the event into a row for BatchEventInsertMany, for writing many
// events with one COPY. Data must be JSON-encodable (the maps of plain values
// the jobs build always are); if it is not, the row carries the error instead
// of failing the transaction it records.
func (e Event) Row() BatchEventInsertManyParams {
	data := []byte("{}")
	if e.Data != nil {
		b, err := json.Marshal(e.Data)
		if err != nil {
			b, _ = json.Marshal(map[string]string{"encoding_error": err.Error()})
		}
		data = b
	}
	return BatchEventInsertManyParams{BatchID: e.BatchID, Type: e.Type, Phase: nonEmpty(e.Phase), TaskID: nonEmpty(e.TaskID), Data: data}
}

func nonEmpty(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}
