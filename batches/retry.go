package batches

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"go.opentelemetry.io/otel/attribute"

	"github.com/arke-institute/orchestrator/db"
	"github.com/arke-institute/orchestrator/fanin"
	"github.com/arke-institute/orchestrator/jobs"
	"github.com/arke-institute/orchestrator/phases"
	"github.com/arke-institute/orchestrator/problem"
	"github.com/arke-institute/orchestrator/status"
	"github.com/arke-institute/orchestrator/tracing"
)

// RetryInfrastructure is the retry mode that puts back only the work
// infrastructure failed (POST /admin/retry/:batchId?mode=infrastructure).
const RetryInfrastructure = "infrastructure"

// Retry re-runs a batch's failed work (spec 003's retry, spec 002's
// retryStage), never its completed work:
//   - a batch running a phase: that phase's failed tasks go back to pending
//     and its launcher is queued. With no failed task there is nothing to
//     retry (problem.ErrConflict).
//   - a batch in ERROR: it resumes in the phase it failed in (batches.phase
//     is kept on ERROR for this). The phase's failed tasks, including those
//     a reset or the failure ended, go back to pending; its completed tasks
//     and every earlier phase's output stay as they are. With nothing left
//     to run, the phase's fan-in check is queued instead, and moves the
//     batch on. A batch that failed before its first phase (an unreadable
//     manifest, say, since fixed) starts again from PENDING. A batch
//     stopped while its next generation was being written goes on writing
//     it. While the jobs a reset asked to stop are still running, the
//     answer is problem.ErrConflict: try again in a moment.
//   - a DONE batch with failed work (tasks, OCR refs, documents): only that
//     work runs again, in a new pass through the phases from the first that
//     has any, and the files the rerun makes go on through the phases after
//     it; every other file keeps its results (jobs.ResumeBatch). Once DONE
//     again, the batch is delivered to ingest again under a new
//     idempotency key. With nothing failed: problem.ErrConflict.
//   - in a documents phase (running or ERROR), its failed documents resume
//     from the step that failed.
//   - a PENDING batch, or one whose processing details retention
//     removed: problem.ErrConflict.
//
// With infraOnly, only the work whose attempts or retries infrastructure
// spent is put back (RetryScope.InfraOnly): the files that are bad are
// not tried again.
//
// The change is recorded as an admin.retry event, plus a task.requeued
// event per task (a DONE batch's resume: a batch.resumed event with what
// is rerun).
func (c *Commands) Retry(ctx context.Context, batchID string, infraOnly bool) (st status.Status, err error) {
	ctx, span := c.Tracer.StartBatchStep(ctx, batchID, "batch.retry", attribute.Bool("infrastructure_only", infraOnly))
	defer func() { tracing.End(span, err) }()
	var (
		logAttrs []any
		resumed  bool // out of ERROR: the batch runs again
	)
	if err := c.awaitJobsStopped(ctx, batchID, 10*time.Second); err != nil {
		return status.Status{}, err
	}
	err = pgx.BeginFunc(ctx, c.pool, func(tx pgx.Tx) error {
		q := db.New(tx)
		ptx := jobs.Tx{Tx: tx, River: c.river}
		// Exclusive, as for a reset: no callback (shared holder) is midway,
		// and no fan-in check is counting, while work goes back to be done.
		// A check that runs after this sees it open and waits for it.
		b, err := lockBatch(ctx, tx, batchID)
		if err != nil {
			return err
		}
		if b.PrunedCounts != nil {
			// Retention removed the work and files a retry starts from
			// (the lock orders this with its start, jobs.Prune).
			return c.errPruned(batchID)
		}
		data := map[string]any{"previous_status": b.Status}
		if infraOnly {
			data["mode"] = RetryInfrastructure
		}
		stopped := phases.BatchStatus(b.Status) == phases.BatchError
		var phase string
		switch phases.BatchStatus(b.Status) {
		case phases.BatchDone:
			attrs, err := c.resumeDone(ctx, ptx, b, data, infraOnly)
			logAttrs, resumed = attrs, err == nil
			return err
		case phases.BatchPending:
			return fmt.Errorf("%w: batch %s has not started yet; there is nothing to retry", problem.ErrConflict, batchID)
		case phases.BatchError:
			// A reset asks the batch's running jobs to stop, but they hold
			// their unique slots until they have: a job queued now would
			// be dropped as their duplicate, and the batch would stall.
			// They stop within moments (awaitJobsStopped waited for them).
			var running int
			if err := tx.QueryRow(ctx, runningJobsSQL, batchID).Scan(&running); err != nil {
				return fmt.Errorf("looking for running jobs of %s: %w", batchID, err)
			}
			if running > 0 {
				return fmt.Errorf("%w: batch %s is still stopping (%d jobs finishing); try again in a few seconds", problem.ErrConflict, batchID, running)
			}
			resumed = true
			data["previous_error"] = deref(b.Error)
			if b.Phase == nil {
				// Failed before any phase: nothing was written but the batch
				// row, so starting over redoes no work.
				if _, err := q.BatchResume(ctx, db.BatchResumeParams{ID: batchID, Status: string(phases.BatchPending)}); err != nil {
					return fmt.Errorf("resuming batch %s: %w", batchID, err)
				}
				if _, err := c.river.InsertTx(ctx, tx, jobs.BatchStartArgs{BatchID: batchID}, nil); err != nil {
					return fmt.Errorf("enqueueing batch_start for %s: %w", batchID, err)
				}
				data["resumed_status"] = phases.BatchPending
				logAttrs = []any{"resumed_status", string(phases.BatchPending)}
				return q.EventRecord(ctx, db.Event{BatchID: batchID, Type: db.EventAdminRetry, Data: data})
			}
			phase = *b.Phase
			if _, _, ok := c.executors.Of(phase); !ok {
				return fmt.Errorf("%w: batch %s failed in phase %s, which no longer exists", problem.ErrConflict, batchID, phase)
			}
			if _, err := q.BatchResume(ctx, db.BatchResumeParams{ID: batchID, Status: phase}); err != nil {
				return fmt.Errorf("resuming batch %s: %w", batchID, err)
			}
			if b.BuildFrom != nil {
				// Stopped while its generation was being written: the
				// writing goes on from where it got to (the executor's
				// Retry makes its work wait for it).
				if _, err := c.river.InsertTx(ctx, tx, jobs.PhaseBuildArgs{BatchID: batchID, Phase: phase, From: *b.BuildFrom, Generation: b.Generation}, nil); err != nil {
					return fmt.Errorf("enqueueing phase_build for %s: %w", batchID, err)
				}
			}
		default:
			phase = b.Status
		}

		ex, p, ok := c.executors.Of(phase)
		if !ok {
			return fmt.Errorf("%w: batch %s is in phase %s, which no longer exists", problem.ErrConflict, batchID, phase)
		}
		r, err := ex.Retry(ctx, ptx, jobs.PhaseAt{BatchID: batchID, Phase: p, Generation: b.Generation}, jobs.RetryScope{Stopped: stopped, InfraOnly: infraOnly})
		if err != nil {
			return err
		}
		if r.Count == 0 && !stopped {
			return fmt.Errorf("%w: batch %s is running %s with no failed work; there is nothing to retry", problem.ErrConflict, batchID, phase)
		}
		// With nothing open (the phase stopped between its last work and
		// its transition) the check moves the batch on; otherwise the
		// work's ends make sure of one.
		if err := fanin.EnsurePhaseCheck(ctx, tx, c.river, fanin.PhaseRef{BatchID: batchID, Phase: phase}); err != nil {
			return err
		}
		if !stopped {
			// Touched, so the sweep's backstop (which looks at batches idle
			// for a while first) leaves the fresh work be.
			if err := q.BatchRetryTouch(ctx, batchID); err != nil {
				return err
			}
		}
		data["resumed_status"], data["phase"] = phase, phase
		logAttrs = []any{"phase", phase, "previous_status", b.Status}
		for k, v := range r.Data {
			data[k] = v
			logAttrs = append(logAttrs, k, v)
		}
		events := append(r.Events, db.Event{BatchID: batchID, Type: db.EventAdminRetry, Phase: phase, Data: data}.Row())
		if _, err := q.BatchEventInsertMany(ctx, events); err != nil {
			return fmt.Errorf("recording retry events: %w", err)
		}
		return nil
	})
	if err != nil {
		return status.Status{}, err
	}
	if resumed {
		c.metrics.BatchStarted()
	}
	c.logger.Warn("batch retried by admin", append([]any{"batch_id", batchID}, logAttrs...)...)
	return c.status.Status(ctx, batchID)
}

// awaitJobsStopped waits, up to limit, until no River job of a batch in
// ERROR is running: after a reset, the jobs it asked to stop. (A running
// batch always has jobs running; it is not waited for.)
func (c *Commands) awaitJobsStopped(ctx context.Context, batchID string, limit time.Duration) error {
	b, err := db.New(c.pool).BatchGetByID(ctx, batchID)
	if err != nil || phases.BatchStatus(b.Status) != phases.BatchError {
		return nil // the transaction reports a missing batch
	}
	deadline := time.Now().Add(limit)
	for {
		var running int
		if err := c.pool.QueryRow(ctx, runningJobsSQL, batchID).Scan(&running); err != nil {
			return fmt.Errorf("looking for running jobs of %s: %w", batchID, err)
		}
		if running == 0 || time.Now().After(deadline) {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// runningJobsSQL counts the batch's River jobs that are running.
const runningJobsSQL = `SELECT count(*) FROM river_job WHERE state = 'running' AND args @> jsonb_build_object('batch_id', $1::text)`

// resumeDone is Retry for a DONE batch: a new pass that reruns only what
// failed (jobs.ResumeBatch). The caller holds the batch's exclusive lock.
func (c *Commands) resumeDone(ctx context.Context, tx jobs.Tx, b db.Batch, data map[string]any, infraOnly bool) ([]any, error) {
	r, err := jobs.ResumeBatch(ctx, tx, c.executors, b, jobs.RetryScope{InfraOnly: infraOnly})
	if errors.Is(err, jobs.ErrNothingToResume) {
		if infraOnly {
			return nil, fmt.Errorf("%w: batch %s is DONE with nothing failed for infrastructure reasons; there is nothing to retry", problem.ErrConflict, b.ID)
		}
		return nil, fmt.Errorf("%w: batch %s is DONE with nothing failed; there is nothing to retry", problem.ErrConflict, b.ID)
	}
	if err != nil {
		return nil, err
	}
	data["resumed_status"], data["phase"], data["files_rerun"] = r.Phase, r.Phase, r.Files
	if err := tx.Queries().EventRecord(ctx, db.Event{BatchID: b.ID, Type: db.EventAdminRetry, Phase: r.Phase, Data: data}); err != nil {
		return nil, fmt.Errorf("recording retry event: %w", err)
	}
	return []any{"phase", r.Phase, "files_rerun", r.Files, "work_rerun", r.Work, "previous_status", b.Status}, nil
}

// errPruned refuses a retry of a batch whose processing state retention
// removed.
func (c *Commands) errPruned(batchID string) error {
	return fmt.Errorf("%w: batch %s cannot be retried: its %s", problem.ErrConflict, batchID, c.status.PrunedNote())
}
