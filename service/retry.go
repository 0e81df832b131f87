package service

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/arke-institute/orchestrator/db"
	"github.com/arke-institute/orchestrator/jobs"
	"github.com/arke-institute/orchestrator/phases"
)

// Retry re-runs a batch's failed work (spec 003's retry, spec 002's
// retryStage), never its completed work:
//   - a batch running a phase: that phase's failed tasks go back to pending
//     and its launcher is queued. With no failed task there is nothing to
//     retry (ErrConflict).
//   - a batch in ERROR: it resumes in the phase it failed in (batches.phase
//     is kept on ERROR for this). The phase's failed tasks, including those
//     a reset or the failure ended, go back to pending; its completed tasks
//     and every earlier phase's output stay as they are. With nothing left
//     to run, the phase's fan-in check is queued instead, and moves the
//     batch on. A batch that failed before its first phase (an unreadable
//     manifest, say, since fixed) starts again from PENDING.
//   - a DONE or PENDING batch: ErrConflict.
//
// The change is recorded as an admin.retry event, plus a task.requeued
// event per task.
func (s *Service) Retry(ctx context.Context, batchID string) (Status, error) {
	var (
		logAttrs []any
		resumed  bool // out of ERROR: the batch runs again
	)
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		q := db.New(tx)
		// Exclusive, as for a reset: no callback (shared holder) is midway,
		// and no fan-in check is counting, while tasks go back to pending.
		// A check that runs after this sees them open and waits for them.
		b, err := lockBatch(ctx, q, batchID)
		if err != nil {
			return err
		}
		data := map[string]any{"previous_status": b.Status}
		var phase string
		switch b.Status {
		case "DONE":
			return fmt.Errorf("%w: batch %s is DONE; completed work is never redone", ErrConflict, batchID)
		case "PENDING":
			return fmt.Errorf("%w: batch %s has not started yet; there is nothing to retry", ErrConflict, batchID)
		case "ERROR":
			resumed = true
			data["previous_error"] = deref(b.Error)
			if b.Phase == nil {
				// Failed before any phase: nothing was written but the batch
				// row, so starting over redoes no work.
				if _, err := q.BatchResume(ctx, db.BatchResumeParams{ID: batchID, Status: "PENDING"}); err != nil {
					return fmt.Errorf("resuming batch %s: %w", batchID, err)
				}
				if _, err := s.river.InsertTx(ctx, tx, jobs.BatchStartArgs{BatchID: batchID}, nil); err != nil {
					return fmt.Errorf("enqueueing batch_start for %s: %w", batchID, err)
				}
				data["resumed_status"] = "PENDING"
				logAttrs = []any{"resumed_status", "PENDING"}
				return q.EventRecord(ctx, db.Event{BatchID: batchID, Type: db.EventAdminRetry, Data: data})
			}
			phase = *b.Phase
			if _, ok := phases.Get(phases.Name(phase)); !ok {
				return fmt.Errorf("%w: batch %s failed in phase %s, which no longer exists", ErrConflict, batchID, phase)
			}
			if _, err := q.BatchResume(ctx, db.BatchResumeParams{ID: batchID, Status: phase}); err != nil {
				return fmt.Errorf("resuming batch %s: %w", batchID, err)
			}
		default:
			phase = b.Status
		}

		requeued, err := q.TaskRequeueFailed(ctx, db.TaskRequeueFailedParams{BatchID: batchID, Phase: phase})
		if err != nil {
			return fmt.Errorf("requeueing failed tasks of %s: %w", batchID, err)
		}
		switch {
		case len(requeued) > 0:
			if _, err := s.river.InsertTx(ctx, tx, jobs.PhaseLaunchArgs{BatchID: batchID, Phase: phase}, nil); err != nil {
				return fmt.Errorf("enqueueing phase_launch for %s %s: %w", batchID, phase, err)
			}
		case b.Status == "ERROR":
			// Nothing failed: the phase stopped between its last task and
			// its transition. The check finds no open task and moves on.
			if err := jobs.EnqueuePhaseCheck(ctx, tx, s.river, batchID, phase); err != nil {
				return err
			}
		default:
			return fmt.Errorf("%w: batch %s is running %s with no failed task; there is nothing to retry", ErrConflict, batchID, phase)
		}
		if b.Status != "ERROR" {
			// Touched, so the sweep's backstop (which looks at batches idle
			// for a while first) leaves the fresh launcher be.
			if err := q.BatchRetryTouch(ctx, batchID); err != nil {
				return err
			}
		}

		events := make([]db.BatchEventInsertManyParams, 0, len(requeued)+1)
		for _, id := range requeued {
			events = append(events, db.Event{BatchID: batchID, Type: db.EventTaskRequeued, Phase: phase, TaskID: id}.Row())
		}
		data["resumed_status"], data["phase"], data["tasks_requeued"] = phase, phase, len(requeued)
		events = append(events, db.Event{BatchID: batchID, Type: db.EventAdminRetry, Phase: phase, Data: data}.Row())
		if _, err := q.BatchEventInsertMany(ctx, events); err != nil {
			return fmt.Errorf("recording retry events: %w", err)
		}
		logAttrs = []any{"phase", phase, "tasks_requeued", len(requeued), "previous_status", b.Status}
		return nil
	})
	if err != nil {
		return Status{}, err
	}
	if resumed {
		s.metrics.BatchStarted()
	}
	s.logger.Warn("batch retried by admin", append([]any{"batch_id", batchID}, logAttrs...)...)
	return s.Status(ctx, batchID)
}
