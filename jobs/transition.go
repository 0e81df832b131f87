package jobs

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"

	"github.com/arke-institute/orchestrator/db"
	"github.com/arke-institute/orchestrator/phases"
	"github.com/arke-institute/orchestrator/tracing"
)

// FailBatch moves a batch that is not finished to ERROR, records why, and
// stops its open work (every executor's Stop, "Batch failed: " and the
// message): nothing may keep running for a batch in ERROR. It returns the
// batch as it now is, or nil if it had already ended, for the caller to
// count once tx has committed (Deps.BatchFinished), and how much work it
// ended.
func FailBatch(ctx context.Context, tx Tx, d Deps, batchID, phase, message string) (*db.Batch, int, error) {
	ctx, span := d.Tracer.StartBatchStep(ctx, batchID, "batch.error", tracing.PhaseKey.String(phase))
	span.SetStatus(codes.Error, message)
	defer span.End()
	q := tx.Queries()
	b, err := q.BatchSetError(ctx, db.BatchSetErrorParams{ID: batchID, Error: &message})
	if err != nil {
		if errors.Is(err, pgx.ErrNoRows) {
			return nil, 0, nil // already DONE or ERROR: nothing to change
		}
		return nil, 0, fmt.Errorf("setting batch %s to ERROR: %w", batchID, err)
	}
	if err := q.EventRecord(ctx, db.Event{BatchID: batchID, Type: db.EventBatchError, Phase: phase, Data: map[string]any{"error": message}}); err != nil {
		return nil, 0, err
	}
	ended, err := d.Executors.Stop(ctx, tx, batchID, "Batch failed: "+message)
	return &b, ended, err
}

// failBatch is FailBatch for a caller that counts no ended work.
func failBatch(ctx context.Context, tx Tx, d Deps, batchID, phase, message string) (*db.Batch, error) {
	b, _, err := FailBatch(ctx, tx, d, batchID, phase, message)
	return b, err
}

// enterNextPhase finds the first phase from `from` (inclusive) that has
// work in files, moves the batch into it and has its executor write the
// work and start it (Executor.Enter). When from is "" or no phase has
// work, the batch is DONE with this generation as its final file list, and
// delivery to ingest is queued; the batch is then returned, for the
// caller to count once its transaction has committed
// (Deps.BatchFinished). Runs in tx, the transaction of a job or of an
// admin retry.
func enterNextPhase(ctx context.Context, tx Tx, d Deps, batchID string, from phases.Name, generation int32, files []phases.File) (*db.Batch, error) {
	var p phases.Phase
	if from != "" {
		p, _ = phases.NextWithWork(from, files)
	}
	return enterPhase(ctx, tx, d, batchID, p, generation, files, len(files))
}

// enterPhase moves the batch into phase p with the generation's files,
// or, for a nil p, finishes it with the generation of n files, as
// enterNextPhase does (files are then not needed).
func enterPhase(ctx context.Context, tx Tx, d Deps, batchID string, p phases.Phase, generation int32, files []phases.File, n int) (b *db.Batch, err error) {
	q := tx.Queries()
	step, phaseName := "batch.done", ""
	if p != nil {
		step, phaseName = "phase.enter", string(p.Spec().Name)
	}
	ctx, span := d.Tracer.StartBatchStep(ctx, batchID, step, tracing.PhaseKey.String(phaseName),
		attribute.Int("generation", int(generation)), attribute.Int("files", n))
	defer func() { tracing.End(span, err) }()
	if p == nil {
		b, err := q.BatchSetDone(ctx, db.BatchSetDoneParams{ID: batchID, Generation: generation})
		if err != nil {
			if errors.Is(err, pgx.ErrNoRows) {
				return nil, nil // reset meanwhile: nothing to finish
			}
			return nil, fmt.Errorf("finishing batch %s: %w", batchID, err)
		}
		if err := q.EventRecord(ctx, db.Event{BatchID: batchID, Type: db.EventBatchDone, Data: map[string]any{"files": n, "generation": generation}}); err != nil {
			return nil, err
		}
		if _, err := tx.River.InsertTx(ctx, tx.Tx, BatchFinalizeArgs{BatchID: batchID}, nil); err != nil {
			return nil, fmt.Errorf("enqueueing batch_finalize for %s: %w", batchID, err)
		}
		return &b, nil
	}
	name := string(p.Spec().Name)
	if _, err := q.BatchSetPhase(ctx, db.BatchSetPhaseParams{ID: batchID, Phase: name, Generation: generation}); err != nil {
		if errors.Is(err, pgx.ErrNoRows) {
			return nil, nil // reset meanwhile
		}
		return nil, fmt.Errorf("moving batch %s to %s: %w", batchID, name, err)
	}
	data, err := d.Executors.executor(p).Enter(ctx, tx, PhaseAt{BatchID: batchID, Phase: p, Generation: generation}, files)
	if err != nil {
		return nil, fmt.Errorf("entering %s of batch %s: %w", name, batchID, err)
	}
	return nil, q.EventRecord(ctx, db.Event{BatchID: batchID, Type: db.EventPhaseStarted, Phase: name, Data: withGeneration(data, generation)})
}

// withGeneration is an executor's phase.started data with the generation.
func withGeneration(data map[string]any, generation int32) map[string]any {
	out := map[string]any{"generation": generation}
	for k, v := range data {
		out[k] = v
	}
	return out
}
