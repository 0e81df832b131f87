package jobs

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river"

	"github.com/arke-institute/orchestrator/db"
	"github.com/arke-institute/orchestrator/phases"
)

// Documents phases (issue 18's DOCUMENT_INDEXING): a phase whose executor
// is phases.Documents has no tasks. Entering it writes one document per
// file to index, naming the batch and the file (enterDocumentsPhase), and
// enqueues each document's document_step job, the same pipeline as a
// document asked for through the API. The step that ends a batch's
// document (stored, or failed for good) does so under the batch's shared
// fan-in lock and makes sure a phase_check runs (EndTasks), as a task's
// callback does. The check counts the documents of the phase's generation
// still running, and the transform reads each file's document as its task
// (generationDocumentsSQL).

// enterDocumentsPhase is enterNextPhase for a documents phase p with work:
// it writes the documents of files (the stored generation), moves the
// batch into p and enqueues a step job per document. A file whose key has
// a failed document of the batch (its phase run again after an admin
// retry of the DONE batch) resumes that document instead (DocumentBatchResume).
// Runs in the transition's transaction.
func enterDocumentsPhase(ctx context.Context, tx pgx.Tx, client *river.Client[pgx.Tx], batchID string, p phases.Documenter, generation int32, files []phases.File) error {
	q := db.New(tx)
	name := p.Spec().Name
	works := p.Documents(files)
	keys, fileIDs, sources := make([]string, len(works)), make([]int64, len(works)), make([]json.RawMessage, len(works))
	pdfs, ocrRefs := 0, 0
	for i, w := range works {
		keys[i], fileIDs[i] = w.File.R2Key, w.File.ID
		if w.Source == nil {
			continue
		}
		src, err := json.Marshal(w.Source)
		if err != nil {
			return err
		}
		sources[i] = src
		if w.Source.OCRRef {
			ocrRefs++
		} else {
			pdfs++
		}
	}
	resumed, err := q.DocumentBatchResume(ctx, db.DocumentBatchResumeParams{BatchID: &batchID, R2Keys: keys, FileIDs: fileIDs, Sources: sources})
	if err != nil {
		return fmt.Errorf("resuming failed documents of %s: %w", batchID, err)
	}
	params := db.DocumentInsertBatchParams{BatchID: batchID}
	resumedKeys := make(map[string]bool, len(resumed))
	for _, r := range resumed {
		resumedKeys[r.R2Key] = true
	}
	for i, k := range keys {
		if !resumedKeys[k] {
			params.R2Keys, params.FileIDs, params.Sources = append(params.R2Keys, k), append(params.FileIDs, fileIDs[i]), append(params.Sources, sources[i])
		}
	}
	ids, err := q.DocumentInsertBatch(ctx, params)
	if err != nil {
		return fmt.Errorf("inserting %d documents of %s: %w", len(works), batchID, err)
	}
	if _, err := q.BatchSetPhase(ctx, db.BatchSetPhaseParams{ID: batchID, Phase: string(name), Generation: generation}); err != nil {
		if errors.Is(err, pgx.ErrNoRows) {
			return nil
		}
		return fmt.Errorf("moving batch %s to %s: %w", batchID, name, err)
	}
	data := map[string]any{"documents": len(works), "pdfs": pdfs, "ocr_refs": ocrRefs, "generation": generation}
	if len(resumed) > 0 {
		data["resumed"] = len(resumed)
	}
	if err := q.EventRecord(ctx, db.Event{BatchID: batchID, Type: db.EventPhaseStarted, Phase: string(name), Data: data}); err != nil {
		return err
	}
	jobs := documentParams(ids, nil)
	if len(resumed) > 0 {
		rids, resumes := make([]int64, len(resumed)), make([]int32, len(resumed))
		for i, r := range resumed {
			rids[i], resumes[i] = r.ID, r.Resumes
		}
		jobs = append(jobs, documentParams(rids, resumes)...)
	}
	if _, err := client.InsertManyTx(ctx, tx, jobs); err != nil {
		return fmt.Errorf("enqueueing the documents of %s: %w", batchID, err)
	}
	return nil
}

// documentParams are the step jobs of documents ids (resumes[i], when
// given, is the document's count of resumes: see DocumentStepArgs).
func documentParams(ids []int64, resumes []int32) []river.InsertManyParams {
	params := make([]river.InsertManyParams, len(ids))
	for i, id := range ids {
		args := DocumentStepArgs{DocumentID: id}
		if resumes != nil {
			args.Resume = resumes[i]
		}
		params[i] = river.InsertManyParams{Args: args}
	}
	return params
}

// EnsureDocumentJobs makes sure every running document of a batch's
// documents phase (generation) has its step job (unique: an existing one
// is kept), as the sweep's backstop needs. It returns how many it
// enqueued.
func EnsureDocumentJobs(ctx context.Context, tx pgx.Tx, client *river.Client[pgx.Tx], batchID string, generation int32) (int, error) {
	rows, err := db.New(tx).DocumentBatchListOpen(ctx, db.DocumentBatchListOpenParams{BatchID: &batchID, Generation: generation})
	if err != nil {
		return 0, fmt.Errorf("listing running documents of %s: %w", batchID, err)
	}
	if len(rows) == 0 {
		return 0, nil
	}
	ids, resumes := make([]int64, len(rows)), make([]int32, len(rows))
	for i, r := range rows {
		ids[i], resumes[i] = r.ID, r.Resumes
	}
	res, err := client.InsertManyTx(ctx, tx, documentParams(ids, resumes))
	if err != nil {
		return 0, fmt.Errorf("enqueueing the documents of %s: %w", batchID, err)
	}
	n := 0
	for _, r := range res {
		if !r.UniqueSkippedAsDuplicate {
			n++
		}
	}
	return n, nil
}

// executorOf is the executor of the phase called name, "" for no phase.
func executorOf(name string) phases.Executor {
	p, ok := phases.Get(phases.Name(name))
	if !ok {
		return ""
	}
	return p.Spec().Executor
}

// endDocument runs end, which ends doc (stores it, or fails it for good)
// when it reports so, in one transaction. A batch's document ends as a
// task does, under the batch's shared fan-in lock with a phase_check made
// sure of (EndTasks), so that the phase's end is never missed; any other
// document in a plain transaction.
func (w *DocumentStepWorker) endDocument(ctx context.Context, doc db.Document, end func(tx pgx.Tx) (ended bool, err error)) error {
	if doc.BatchID == nil {
		return pgx.BeginFunc(ctx, w.deps.Pool, func(tx pgx.Tx) error {
			_, err := end(tx)
			return err
		})
	}
	ref := PhaseRef{BatchID: *doc.BatchID, Phase: string(phases.DocumentIndexing)}
	return EndTasks(ctx, w.deps.Pool, river.ClientFromContext[pgx.Tx](ctx), ref, end)
}
