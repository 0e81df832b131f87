package jobs

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"math"

	"github.com/arke-institute/orchestrator/db"
	"github.com/arke-institute/orchestrator/phases"
)

// ErrNothingToResume is ResumeBatch's answer for a DONE batch with nothing
// failed: there is nothing to rerun.
var ErrNothingToResume = errors.New("nothing failed")

// Resumption is what ResumeBatch reruns.
type Resumption struct {
	// Phase is the phase the batch resumed in: the first with work.
	Phase string `json:"phase"`
	// Files are the files of the final generation rerun: those whose work
	// failed in some phase.
	Files int `json:"files"`
	// Work says, by kind of work, what failed and is rerun (e.g. the
	// failed tasks by phase, the OCR refs, the documents); the
	// batch.resumed event has these beside phase and files.
	Work map[string]any `json:"work"`
}

// ResumeBatch reruns what failed in a DONE batch b, an admin's retry: a new
// pass of the batch through its phases over its final generation, in which
// every file whose work failed in some phase (as each executor's Rerun
// says; with scope.InfraOnly, only where infrastructure failed it) is
// worked on again, and every other file is kept (File.Kept): no
// phase works on it, its outputs, OCR text and document stay as they are.
// The files a rerun makes are not kept, so they flow through the phases
// after it. Each executor drops the failed work it can make anew as the
// pass reaches its phases (their outcomes stay in batch_events). The batch
// moves into the first phase with work; when it is DONE again, its final
// manifest is delivered to ingest once more, under a new idempotency key.
//
// The caller holds the batch's exclusive fan-in lock (LockBatch) and read
// b under it; tx commits the change, with a batch.resumed event. With
// nothing to rerun it returns ErrNothingToResume, and tx must be rolled
// back.
func ResumeBatch(ctx context.Context, tx Tx, x *Executors, b db.Batch, scope RetryScope) (Resumption, error) {
	q := tx.Queries()
	if phases.BatchStatus(b.Status) != phases.BatchDone {
		return Resumption{}, fmt.Errorf("resuming batch %s: it is %s, not DONE", b.ID, b.Status)
	}
	out := Resumption{Work: map[string]any{}}
	var keys []string
	for _, e := range x.All() {
		r, err := e.Rerun(ctx, tx, b.ID, scope)
		if err != nil {
			return Resumption{}, fmt.Errorf("finding the failed %s work of batch %s: %w", e.Kind(), b.ID, err)
		}
		keys = append(keys, r.Keys...)
		for k, v := range r.Counts {
			// Two kinds may count the same work (the tasks of the phases
			// each runs): their counts by phase add up.
			if m, ok := v.(map[string]int); ok {
				if prev, ok := out.Work[k].(map[string]int); ok {
					maps.Copy(prev, m)
					continue
				}
			}
			out.Work[k] = v
		}
	}
	rerun, err := q.FileMarkKept(ctx, db.FileMarkKeptParams{BatchID: b.ID, Generation: b.Generation, FailedKeys: keys})
	if err != nil {
		return Resumption{}, fmt.Errorf("marking the files of batch %s to rerun: %w", b.ID, err)
	}
	if rerun == 0 {
		return Resumption{}, ErrNothingToResume
	}
	out.Files = int(rerun)
	if _, err := q.BatchReopen(ctx, b.ID); err != nil {
		return Resumption{}, fmt.Errorf("reopening batch %s: %w", b.ID, err)
	}
	files, err := storedGeneration(ctx, tx.Tx, b.ID, b.Generation, math.MaxInt32, 0)
	if err != nil {
		return Resumption{}, err
	}
	finished, err := enterNextPhase(ctx, tx, Deps{Executors: x}, b.ID, phases.First(), b.Generation, files)
	if err != nil {
		return Resumption{}, err
	}
	if finished != nil {
		// No phase works on what failed: the pass would only deliver the
		// same manifest again.
		return Resumption{}, ErrNothingToResume
	}
	now, err := q.BatchGetByID(ctx, b.ID)
	if err != nil {
		return Resumption{}, err
	}
	out.Phase = now.Status
	data := map[string]any{"phase": out.Phase, "files": out.Files}
	for k, v := range out.Work {
		data[k] = v
	}
	if err := q.EventRecord(ctx, db.Event{BatchID: b.ID, Type: db.EventBatchResumed, Phase: out.Phase, Data: data}); err != nil {
		return Resumption{}, err
	}
	return out, nil
}
