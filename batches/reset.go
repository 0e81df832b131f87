package batches

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/rivertype"

	"github.com/arke-institute/orchestrator/db"
	"github.com/arke-institute/orchestrator/fanin"
	"github.com/arke-institute/orchestrator/jobs"
	"github.com/arke-institute/orchestrator/metrics"
	"github.com/arke-institute/orchestrator/phases"
	"github.com/arke-institute/orchestrator/problem"
	"github.com/arke-institute/orchestrator/status"
	"github.com/arke-institute/orchestrator/tracing"
)

// ResetMessage is the error a reset batch carries (spec 000 §5.3).
const ResetMessage = "Manually reset by admin"

// Reset stops a batch by hand: it goes to ERROR with ResetMessage, its
// queued jobs are cancelled, and each executor stops its open work (the
// open tasks end, the machines still running are queued for destruction,
// best effort). Later callbacks get 409.
// Resetting a batch already in ERROR changes nothing; a DONE batch cannot be
// reset (problem.ErrConflict).
func (c *Commands) Reset(ctx context.Context, batchID string) (st status.Status, err error) {
	ctx, span := c.Tracer.StartBatchStep(ctx, batchID, "batch.reset")
	defer func() { tracing.End(span, err) }()
	var (
		stopped *db.Batch // the batch as the reset left it; nil if it was in ERROR already
		ended   int       // its open tasks, ended by the reset
	)
	err = pgx.BeginFunc(ctx, c.pool, func(tx pgx.Tx) error {
		q := db.New(tx)
		// Exclusive: callbacks in flight (shared holders) finish first, and
		// any that come later find their task ended by the reset.
		b, err := lockBatch(ctx, tx, batchID)
		if err != nil {
			return err
		}
		switch phases.BatchStatus(b.Status) {
		case phases.BatchError:
			return nil
		case phases.BatchDone:
			return fmt.Errorf("%w: batch %s is DONE; there is nothing to reset", problem.ErrConflict, batchID)
		}
		after, err := q.BatchSetError(ctx, db.BatchSetErrorParams{ID: batchID, Error: ptr(ResetMessage)})
		if err != nil {
			return err
		}
		stopped = &after
		cancelled, err := c.cancelJobs(ctx, tx, batchID)
		if err != nil {
			return err
		}
		ended, err = c.executors.Stop(ctx, jobs.Tx{Tx: tx, River: c.river}, batchID, "Batch reset by admin")
		if err != nil {
			return err
		}
		return q.EventRecord(ctx, db.Event{BatchID: batchID, Type: db.EventAdminReset, Phase: deref(b.Phase), Data: map[string]any{
			"tasks_ended": ended, "jobs_cancelled": cancelled, "previous_status": b.Status,
		}})
	})
	if err != nil {
		return status.Status{}, err
	}
	if stopped != nil {
		c.metrics.TasksFinished(deref(stopped.Phase), metrics.TaskCancelled, ended)
		c.metrics.BatchFinished(stopped.Status, stopped.CompletedAt.Sub(stopped.StartedAt))
		c.logger.Warn("batch reset by admin", "batch_id", batchID, "phase", deref(stopped.Phase), "tasks_ended", ended)
	}
	return c.status.Status(ctx, batchID)
}

// cancelJobs cancels every unfinished River job of the batch (start,
// launches, checks, delivery). A running job is asked to stop; whatever it
// still writes finds the batch in ERROR and its tasks ended.
func (c *Commands) cancelJobs(ctx context.Context, tx pgx.Tx, batchID string) (int, error) {
	params := river.NewJobListParams().
		States(rivertype.JobStateAvailable, rivertype.JobStatePending, rivertype.JobStateRetryable,
			rivertype.JobStateRunning, rivertype.JobStateScheduled).
		Where("args->>'batch_id' = @batch_id", river.NamedArgs{"batch_id": batchID}).
		First(10000)
	res, err := c.river.JobListTx(ctx, tx, params)
	if err != nil {
		return 0, fmt.Errorf("listing jobs of batch %s: %w", batchID, err)
	}
	for _, j := range res.Jobs {
		if _, err := c.river.JobCancelTx(ctx, tx, j.ID); err != nil && !errors.Is(err, river.ErrNotFound) {
			return 0, fmt.Errorf("cancelling job %d (%s): %w", j.ID, j.Kind, err)
		}
	}
	return len(res.Jobs), nil
}

func ptr[T any](v T) *T { return &v }

func deref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}

// lockBatch takes the batch's EXCLUSIVE fan-in lock (jobs.LockBatch), which
// waits for every transaction ending one of its tasks and keeps new ones out
// until tx ends, then reads and row-locks the batch.
func lockBatch(ctx context.Context, tx pgx.Tx, batchID string) (db.Batch, error) {
	if err := fanin.LockBatch(ctx, tx, batchID); err != nil {
		return db.Batch{}, err
	}
	b, err := db.New(tx).BatchGetByIDForUpdate(ctx, batchID)
	if err != nil {
		return db.Batch{}, db.NotFound(err, "batch "+batchID)
	}
	return b, nil
}
