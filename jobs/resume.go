package jobs

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river"

	"github.com/arke-institute/orchestrator/config"
	"github.com/arke-institute/orchestrator/db"
	"github.com/arke-institute/orchestrator/metrics"
	"github.com/arke-institute/orchestrator/phases"
)

// ErrNothingToResume is ResumeBatch's answer for a DONE batch with nothing
// failed: there is nothing to rerun.
var ErrNothingToResume = errors.New("nothing failed")

// Resumed is what ResumeBatch reruns.
type Resumed struct {
	// Phase is the phase the batch resumed in: the first with work.
	Phase string `json:"phase"`
	// Files are the files of the final generation rerun: those whose work
	// failed in some phase.
	Files int `json:"files"`
	// Tasks are the failed tasks rerun (as new tasks), by phase.
	Tasks map[string]int `json:"tasks"`
	// OCRItems are the OCR refs rerun: failed, or left pending by a chunk
	// that stopped.
	OCRItems int `json:"ocr_items"`
	// Documents are the failed documents, resumed from the step that
	// failed once the batch reaches its documents phase.
	Documents int `json:"documents"`
}

// ResumeBatch reruns what failed in a DONE batch b, an admin's retry: a new
// pass of the batch through its phases over its final generation, in which
// every file whose work failed (a failed task, an OCR item neither done nor
// skipped, a failed document) is worked on again, and every other file is
// kept (File.Kept): no phase works on it, its outputs, OCR text and
// document stay as they are. The files a rerun makes are not kept, so they
// flow through the phases after it. The failed tasks and OCR items are
// removed (their outcomes stay in batch_events) and made anew as the pass
// reaches their phases; a failed document resumes from the step that
// failed when the pass reaches the documents phase. The batch moves into
// the first phase with work; when it is DONE again, its final manifest is
// delivered to ingest once more, under a new idempotency key.
//
// The caller holds the batch's exclusive fan-in lock (LockBatch) and read
// b under it; tx commits the change, with a batch.resumed event. With
// nothing to rerun it returns ErrNothingToResume, and tx must be rolled
// back.
func ResumeBatch(ctx context.Context, tx pgx.Tx, client *river.Client[pgx.Tx], cfg *config.Config, m *metrics.Metrics, b db.Batch) (Resumed, error) {
	q := db.New(tx)
	if phases.BatchStatus(b.Status) != phases.BatchDone {
		return Resumed{}, fmt.Errorf("resuming batch %s: it is %s, not DONE", b.ID, b.Status)
	}
	marked, err := q.FileMarkKept(ctx, db.FileMarkKeptParams{BatchID: b.ID, Generation: b.Generation})
	if err != nil {
		return Resumed{}, fmt.Errorf("marking the files of batch %s to rerun: %w", b.ID, err)
	}
	if marked.Rerun == 0 {
		return Resumed{}, ErrNothingToResume
	}
	out := Resumed{Files: int(marked.Rerun), Documents: int(marked.FailedDocuments), Tasks: map[string]int{}}
	tasks, err := q.TaskDeleteFailedByBatch(ctx, b.ID)
	if err != nil {
		return Resumed{}, fmt.Errorf("removing the failed tasks of batch %s: %w", b.ID, err)
	}
	for _, t := range tasks {
		out.Tasks[t.Phase]++
	}
	chunks, err := q.ChunkItemDropUnfinished(ctx, b.ID)
	if err != nil {
		return Resumed{}, fmt.Errorf("removing the failed OCR items of batch %s: %w", b.ID, err)
	}
	for _, c := range chunks {
		out.OCRItems += int(c.Dropped)
	}
	if _, err := q.BatchReopen(ctx, b.ID); err != nil {
		return Resumed{}, fmt.Errorf("reopening batch %s: %w", b.ID, err)
	}
	rows, err := q.FileListByBatchGeneration(ctx, db.FileListByBatchGenerationParams{BatchID: b.ID, Generation: b.Generation})
	if err != nil {
		return Resumed{}, fmt.Errorf("reading generation %d of batch %s: %w", b.Generation, b.ID, err)
	}
	files := make([]phases.File, len(rows))
	configs := map[string]phases.ProcessingConfig{}
	for i, r := range rows {
		if files[i], err = fileFromRow(r, configs); err != nil {
			return Resumed{}, err
		}
	}
	finished, err := enterNextPhase(ctx, tx, client, Deps{Config: cfg, Metrics: m}, b.ID, phases.First(), b.Generation, files)
	if err != nil {
		return Resumed{}, err
	}
	if finished != nil {
		// No phase works on what failed: the pass would only deliver the
		// same manifest again.
		return Resumed{}, ErrNothingToResume
	}
	now, err := q.BatchGetByID(ctx, b.ID)
	if err != nil {
		return Resumed{}, err
	}
	out.Phase = now.Status
	if err := q.EventRecord(ctx, db.Event{BatchID: b.ID, Type: db.EventBatchResumed, Phase: out.Phase, Data: out}); err != nil {
		return Resumed{}, err
	}
	return out, nil
}
