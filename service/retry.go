package service

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river"

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
//     manifest, say, since fixed) starts again from PENDING. A batch
//     stopped while its next generation was being written goes on writing
//     it. While the jobs a reset asked to stop are still running, the
//     answer is ErrConflict: try again in a moment.
//   - a DONE batch with failed work (tasks, OCR refs, documents): only that
//     work runs again, in a new pass through the phases from the first that
//     has any, and the files the rerun makes go on through the phases after
//     it; every other file keeps its results (jobs.ResumeBatch). Once DONE
//     again, the batch is delivered to ingest again under a new
//     idempotency key. With nothing failed: ErrConflict.
//   - in a documents phase (running or ERROR), its failed documents resume
//     from the step that failed.
//   - a PENDING batch, or one whose processing details retention
//     removed: ErrConflict.
//
// The change is recorded as an admin.retry event, plus a task.requeued
// event per task (a DONE batch's resume: a batch.resumed event with what
// is rerun).
func (s *Service) Retry(ctx context.Context, batchID string) (Status, error) {
	var (
		logAttrs []any
		resumed  bool // out of ERROR: the batch runs again
	)
	if err := s.awaitJobsStopped(ctx, batchID, 10*time.Second); err != nil {
		return Status{}, err
	}
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		q := db.New(tx)
		// Exclusive, as for a reset: no callback (shared holder) is midway,
		// and no fan-in check is counting, while tasks go back to pending.
		// A check that runs after this sees them open and waits for them.
		b, err := lockBatch(ctx, tx, batchID)
		if err != nil {
			return err
		}
		if b.PrunedCounts != nil {
			// Retention removed the tasks and files a retry starts from
			// (the lock orders this with its start, jobs.Prune).
			return s.errPruned(batchID)
		}
		data := map[string]any{"previous_status": b.Status}
		var phase string
		switch phases.BatchStatus(b.Status) {
		case phases.BatchDone:
			attrs, err := s.resumeDone(ctx, tx, b, data)
			logAttrs, resumed = attrs, err == nil
			return err
		case phases.BatchPending:
			return fmt.Errorf("%w: batch %s has not started yet; there is nothing to retry", ErrConflict, batchID)
		case phases.BatchError:
			// A reset asks the batch's running jobs to stop, but they hold
			// their unique slots until they have: a launcher or writer
			// queued now would be dropped as their duplicate, and the batch
			// would stall. They stop within moments (awaitJobsStopped
			// waited for them).
			var running int
			if err := tx.QueryRow(ctx, runningJobsSQL, batchID).Scan(&running); err != nil {
				return fmt.Errorf("looking for running jobs of %s: %w", batchID, err)
			}
			if running > 0 {
				return fmt.Errorf("%w: batch %s is still stopping (%d jobs finishing); try again in a few seconds", ErrConflict, batchID, running)
			}
			resumed = true
			data["previous_error"] = deref(b.Error)
			if b.Phase == nil {
				// Failed before any phase: nothing was written but the batch
				// row, so starting over redoes no work.
				if _, err := q.BatchResume(ctx, db.BatchResumeParams{ID: batchID, Status: string(phases.BatchPending)}); err != nil {
					return fmt.Errorf("resuming batch %s: %w", batchID, err)
				}
				if _, err := s.river.InsertTx(ctx, tx, jobs.BatchStartArgs{BatchID: batchID}, nil); err != nil {
					return fmt.Errorf("enqueueing batch_start for %s: %w", batchID, err)
				}
				data["resumed_status"] = phases.BatchPending
				logAttrs = []any{"resumed_status", string(phases.BatchPending)}
				return q.EventRecord(ctx, db.Event{BatchID: batchID, Type: db.EventAdminRetry, Data: data})
			}
			phase = *b.Phase
			if _, ok := phases.Get(phases.Name(phase)); !ok {
				return fmt.Errorf("%w: batch %s failed in phase %s, which no longer exists", ErrConflict, batchID, phase)
			}
			if _, err := q.BatchResume(ctx, db.BatchResumeParams{ID: batchID, Status: phase}); err != nil {
				return fmt.Errorf("resuming batch %s: %w", batchID, err)
			}
			if b.BuildFrom != nil {
				// Stopped while its generation was being written: the
				// writing goes on from where it got to, and a launcher
				// waits for the tasks it writes (even when no task had
				// failed).
				if _, err := s.river.InsertManyTx(ctx, tx, []river.InsertManyParams{
					{Args: jobs.PhaseBuildArgs{BatchID: batchID, Phase: phase, From: *b.BuildFrom, Generation: b.Generation}},
					{Args: jobs.PhaseLaunchArgs{BatchID: batchID, Phase: phase}},
				}); err != nil {
					return fmt.Errorf("enqueueing phase_build for %s: %w", batchID, err)
				}
			}
		default:
			phase = b.Status
		}

		switch p, _ := phases.Get(phases.Name(phase)); p.Spec().Executor {
		case phases.Chunked:
			attrs, err := s.retryChunks(ctx, tx, b, phase, data)
			logAttrs = attrs
			return err
		case phases.Documents:
			attrs, err := s.retryDocuments(ctx, tx, b, phase, data)
			logAttrs = attrs
			return err
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
		case phases.BatchStatus(b.Status) == phases.BatchError:
			// Nothing failed: the phase stopped between its last task and
			// its transition. The check finds no open task and moves on.
			if err := jobs.EnsurePhaseCheck(ctx, tx, s.river, jobs.PhaseRef{BatchID: batchID, Phase: phase}); err != nil {
				return err
			}
		default:
			return fmt.Errorf("%w: batch %s is running %s with no failed task; there is nothing to retry", ErrConflict, batchID, phase)
		}
		if phases.BatchStatus(b.Status) != phases.BatchError {
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

// awaitJobsStopped waits, up to limit, until no River job of a batch in
// ERROR is running: after a reset, the jobs it asked to stop. (A running
// batch always has jobs running; it is not waited for.)
func (s *Service) awaitJobsStopped(ctx context.Context, batchID string, limit time.Duration) error {
	b, err := db.New(s.pool).BatchGetByID(ctx, batchID)
	if err != nil || phases.BatchStatus(b.Status) != phases.BatchError {
		return nil // the transaction reports a missing batch
	}
	deadline := time.Now().Add(limit)
	for {
		var running int
		if err := s.pool.QueryRow(ctx, runningJobsSQL, batchID).Scan(&running); err != nil {
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

// retryChunks is Retry for a chunked phase (OCR): its failed items go back
// to pending with their retries restored, chunks that stopped early (a
// provider that refused the key) reopen, and every open chunk gets its job
// again. The caller holds the batch's exclusive lock.
func (s *Service) retryChunks(ctx context.Context, tx pgx.Tx, b db.Batch, phase string, data map[string]any) ([]any, error) {
	q := db.New(tx)
	requeued, err := q.ChunkItemRequeueFailed(ctx, db.ChunkItemRequeueFailedParams{BatchID: b.ID, Phase: phase})
	if err != nil {
		return nil, fmt.Errorf("requeueing failed items of %s: %w", b.ID, err)
	}
	reopened, err := q.ChunkReopen(ctx, db.ChunkReopenParams{BatchID: b.ID, Phase: phase})
	if err != nil {
		return nil, fmt.Errorf("reopening chunks of %s: %w", b.ID, err)
	}
	items := 0
	perChunk := map[string]int32{}
	for _, r := range requeued {
		items += int(r.Requeued)
		perChunk[r.ChunkID] = r.Requeued
	}
	wasError := phases.BatchStatus(b.Status) == phases.BatchError
	if len(requeued) == 0 && reopened == 0 && !wasError {
		return nil, fmt.Errorf("%w: batch %s is running %s with no failed item; there is nothing to retry", ErrConflict, b.ID, phase)
	}
	enqueued, err := jobs.EnsureChunkJobs(ctx, tx, s.river, s.chunkAttempts, b.ID, phases.Name(phase))
	if err != nil {
		return nil, err
	}
	// With nothing open (the phase stopped between its last chunk and its
	// transition) the check moves the batch on; otherwise the chunks' ends
	// make sure of one.
	if err := jobs.EnsurePhaseCheck(ctx, tx, s.river, jobs.PhaseRef{BatchID: b.ID, Phase: phase}); err != nil {
		return nil, err
	}
	if !wasError {
		if err := q.BatchRetryTouch(ctx, b.ID); err != nil {
			return nil, err
		}
	}
	data["resumed_status"], data["phase"], data["items_requeued"], data["chunks_reopened"] = phase, phase, items, int(reopened)+len(requeued)
	events := []db.BatchEventInsertManyParams{db.Event{BatchID: b.ID, Type: db.EventAdminRetry, Phase: phase, Data: data}.Row()}
	if items > 0 {
		events = append(events, db.Event{BatchID: b.ID, Type: db.EventItemsRequeued, Phase: phase, Data: map[string]any{"items": items, "by_chunk": perChunk}}.Row())
	}
	if _, err := q.BatchEventInsertMany(ctx, events); err != nil {
		return nil, fmt.Errorf("recording retry events: %w", err)
	}
	return []any{"phase", phase, "items_requeued", items, "chunk_jobs", enqueued, "previous_status", b.Status}, nil
}

// resumeDone is Retry for a DONE batch: a new pass that reruns only what
// failed (jobs.ResumeBatch). The caller holds the batch's exclusive lock.
func (s *Service) resumeDone(ctx context.Context, tx pgx.Tx, b db.Batch, data map[string]any) ([]any, error) {
	r, err := jobs.ResumeBatch(ctx, tx, s.river, s.cfg, s.metrics, b)
	if errors.Is(err, jobs.ErrNothingToResume) {
		return nil, fmt.Errorf("%w: batch %s is DONE with nothing failed; there is nothing to retry", ErrConflict, b.ID)
	}
	if err != nil {
		return nil, err
	}
	data["resumed_status"], data["phase"], data["files_rerun"] = r.Phase, r.Phase, r.Files
	if err := db.New(tx).EventRecord(ctx, db.Event{BatchID: b.ID, Type: db.EventAdminRetry, Phase: r.Phase, Data: data}); err != nil {
		return nil, fmt.Errorf("recording retry event: %w", err)
	}
	return []any{"phase", r.Phase, "files_rerun", r.Files, "tasks_rerun", r.Tasks, "ocr_items_rerun", r.OCRItems,
		"documents_rerun", r.Documents, "previous_status", b.Status}, nil
}

// retryDocuments is Retry for a documents phase: its failed documents
// resume from the step that failed, and every running one is made sure of
// its step job. The caller holds the batch's exclusive lock.
func (s *Service) retryDocuments(ctx context.Context, tx pgx.Tx, b db.Batch, phase string, data map[string]any) ([]any, error) {
	q := db.New(tx)
	rows, err := q.DocumentBatchRetryFailed(ctx, db.DocumentBatchRetryFailedParams{BatchID: &b.ID, Generation: b.Generation})
	if err != nil {
		return nil, fmt.Errorf("resuming the failed documents of %s: %w", b.ID, err)
	}
	wasError := phases.BatchStatus(b.Status) == phases.BatchError
	if len(rows) == 0 && !wasError {
		return nil, fmt.Errorf("%w: batch %s is running %s with no failed document; there is nothing to retry", ErrConflict, b.ID, phase)
	}
	// The resumed documents' jobs (their args carry the new resume count),
	// and any a reset left missing.
	enqueued, err := jobs.EnsureDocumentJobs(ctx, tx, s.river, b.ID, b.Generation)
	if err != nil {
		return nil, err
	}
	// With nothing open the check moves the batch on; otherwise the
	// documents' ends make sure of one.
	if err := jobs.EnsurePhaseCheck(ctx, tx, s.river, jobs.PhaseRef{BatchID: b.ID, Phase: phase}); err != nil {
		return nil, err
	}
	if !wasError {
		if err := q.BatchRetryTouch(ctx, b.ID); err != nil {
			return nil, err
		}
	}
	data["resumed_status"], data["phase"], data["documents_resumed"] = phase, phase, len(rows)
	if err := q.EventRecord(ctx, db.Event{BatchID: b.ID, Type: db.EventAdminRetry, Phase: phase, Data: data}); err != nil {
		return nil, fmt.Errorf("recording retry event: %w", err)
	}
	return []any{"phase", phase, "documents_resumed", len(rows), "document_jobs", enqueued, "previous_status", b.Status}, nil
}
