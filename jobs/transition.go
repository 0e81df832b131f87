package jobs

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/oklog/ulid/v2"
	"github.com/riverqueue/river"

	"github.com/arke-institute/orchestrator/db"
	"github.com/arke-institute/orchestrator/phases"
)

// failBatch moves a batch that is not finished to ERROR and records why. It
// returns the batch as it now is, or nil if it had already ended, for the
// caller to count once its transaction has committed (Deps.batchFinished).
func failBatch(ctx context.Context, q *db.Queries, batchID, phase, message string) (*db.Batch, error) {
	b, err := q.BatchSetError(ctx, db.BatchSetErrorParams{ID: batchID, Error: &message})
	if err != nil {
		if errors.Is(err, pgx.ErrNoRows) {
			return nil, nil // already DONE or ERROR: nothing to change
		}
		return nil, fmt.Errorf("setting batch %s to ERROR: %w", batchID, err)
	}
	return &b, q.EventRecord(ctx, db.Event{BatchID: batchID, Type: db.EventBatchError, Phase: phase, Data: map[string]any{"error": message}})
}

// enterNextPhase finds the first phase from `from` (inclusive) that has work
// in files, creates its tasks (or chunks, documents: enterChunkedPhase,
// enterDocumentsPhase), moves the
// batch into it and enqueues its launcher. When from is "" or no phase has work, the batch is DONE with
// this generation as its final file list, and delivery to ingest is queued;
// the batch is then returned, for the caller to count once its transaction
// has committed (Deps.batchFinished). Runs in tx, the transaction of a job
// or of an admin retry, which client inserts jobs in.
func enterNextPhase(ctx context.Context, tx pgx.Tx, client *river.Client[pgx.Tx], d Deps, batchID string, from phases.Name, generation int32, files []phases.File) (*db.Batch, error) {
	q := db.New(tx)
	var p phases.Phase
	var work []phases.File
	if from != "" {
		p, work = phases.NextWithWork(from, files)
	}
	if p == nil {
		b, err := q.BatchSetDone(ctx, db.BatchSetDoneParams{ID: batchID, Generation: generation})
		if err != nil {
			if errors.Is(err, pgx.ErrNoRows) {
				return nil, nil // reset meanwhile: nothing to finish
			}
			return nil, fmt.Errorf("finishing batch %s: %w", batchID, err)
		}
		if err := q.EventRecord(ctx, db.Event{BatchID: batchID, Type: db.EventBatchDone, Data: map[string]any{"files": len(files), "generation": generation}}); err != nil {
			return nil, err
		}
		if _, err := client.InsertTx(ctx, tx, BatchFinalizeArgs{BatchID: batchID}, nil); err != nil {
			return nil, fmt.Errorf("enqueueing batch_finalize for %s: %w", batchID, err)
		}
		return &b, nil
	}
	if c, ok := p.(phases.Chunker); ok && p.Spec().Executor == phases.Chunked {
		return nil, enterChunkedPhase(ctx, tx, client, d, batchID, c, generation, files)
	}
	if dp, ok := p.(phases.Documenter); ok && p.Spec().Executor == phases.Documents {
		return nil, enterDocumentsPhase(ctx, tx, client, batchID, dp, generation, files)
	}
	name := string(p.Spec().Name)
	if err := insertTasks(ctx, tx, batchID, p.Spec().Name, work); err != nil {
		return nil, err
	}
	if _, err := q.BatchSetPhase(ctx, db.BatchSetPhaseParams{ID: batchID, Phase: name, Generation: generation}); err != nil {
		if errors.Is(err, pgx.ErrNoRows) {
			return nil, nil
		}
		return nil, fmt.Errorf("moving batch %s to %s: %w", batchID, name, err)
	}
	if err := q.EventRecord(ctx, db.Event{BatchID: batchID, Type: db.EventPhaseStarted, Phase: name, Data: map[string]any{
		"tasks": len(work), "generation": generation,
	}}); err != nil {
		return nil, err
	}
	if _, err := client.InsertTx(ctx, tx, PhaseLaunchArgs{BatchID: batchID, Phase: name}, nil); err != nil {
		return nil, fmt.Errorf("enqueueing phase_launch for %s %s: %w", batchID, name, err)
	}
	return nil, nil
}

// insertTasks writes a pending task of phase for each file of work. Like
// db.TaskInsertMany, but each row is made as COPY asks for it rather than
// all of them first.
func insertTasks(ctx context.Context, tx pgx.Tx, batchID string, phase phases.Name, work []phases.File) error {
	name, prefix := string(phase), phases.TaskIDPrefix(phase)
	i := -1
	tasks := pgx.CopyFromFunc(func() ([]any, error) {
		if i++; i >= len(work) {
			return nil, nil
		}
		return []any{prefix + "_" + strings.ToLower(ulid.Make().String()), batchID, name, work[i].ID}, nil
	})
	if _, err := tx.CopyFrom(ctx, pgx.Identifier{"tasks"}, []string{"id", "batch_id", "phase", "file_id"}, tasks); err != nil {
		return fmt.Errorf("inserting %d %s tasks: %w", len(work), name, err)
	}
	return nil
}
