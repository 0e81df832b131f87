// Package documents is the executor of a phase whose work is documents
// (spec 003's DOCUMENT_INDEXING): entering the phase writes one document
// per file to index, naming the batch and the file, and enqueues each
// document's step job: the same pipeline (package docindex) as a document
// posted through the API. The step that ends a batch's document (stored,
// or failed for good) does so under the batch's shared fan-in lock and
// makes sure a phase_check runs, as a task's callback does. The check
// counts the documents of the phase's generation still running, and the
// transform reads each file's document as its task.
package documents

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river"

	"github.com/arke-institute/orchestrator/db"
	"github.com/arke-institute/orchestrator/docindex"
	"github.com/arke-institute/orchestrator/jobs"
	"github.com/arke-institute/orchestrator/phases"
)

// Kind is the executor's name in phases.Spec.Executor.
const Kind = "documents"

// Executor runs the phase whose Spec.Executor is Kind. The documents table
// names a document's batch, not its phase: there is one such phase.
type Executor struct {
	deps     jobs.Deps
	cfg      docindex.Config
	pipeline *docindex.DocumentStepWorker
}

var (
	_ jobs.Executor = (*Executor)(nil)
	_ jobs.Sweeper  = (*Executor)(nil)
)

// New returns the executor over the document pipeline's providers.
func New(deps jobs.Deps, cfg docindex.Config, providers docindex.Providers) (*Executor, error) {
	ps := deps.Executors.PhasesOf(Kind)
	if len(ps) > 1 {
		return nil, errors.New("the documents executor runs one phase: documents name their batch, not their phase")
	}
	phase := ""
	if len(ps) == 1 {
		phase = string(ps[0].Spec().Name)
	}
	return &Executor{deps: deps, cfg: cfg, pipeline: docindex.New(deps, cfg, providers, phase)}, nil
}

// Pipeline is the document pipeline the executor runs its documents on.
func (e *Executor) Pipeline() *docindex.DocumentStepWorker { return e.pipeline }

// Kind is Kind.
func (e *Executor) Kind() string { return Kind }

// PausedKinds implements jobs.Pausable: while paused, a document takes no step.
func (e *Executor) PausedKinds() []string { return []string{docindex.DocumentStepArgs{}.Kind()} }

// Check refuses a phase that makes no documents.
func (e *Executor) Check(p phases.Phase) error {
	if _, ok := p.(phases.Documenter); !ok {
		return errors.New("a documents phase must make documents (phases.Documenter)")
	}
	return nil
}

// Jobs registers the document steps, and the periodic scan of
// DOCUMENTS_PREFIX unless DOCUMENTS_SCAN_INTERVAL_MS is 0.
func (e *Executor) Jobs(w *river.Workers) jobs.Jobs {
	river.AddWorker(w, e.pipeline)
	river.AddWorker(w, docindex.NewScanWorker(e.deps, e.cfg.Prefix, docindex.ScanSuffixes(e.cfg.ScanSuffixes)))
	out := jobs.Jobs{Timeout: docindex.RunTimeout(e.cfg.Timeout)}
	if e.cfg.ScanInterval > 0 {
		out.Periodic = append(out.Periodic, docindex.ScanJob(e.cfg.ScanInterval))
	}
	return out
}

// Enter writes the documents of files (the stored generation) and
// enqueues a step job per document. A file whose key has a failed
// document of the batch (its phase run again after an admin retry of the
// DONE batch) resumes that document instead (DocumentBatchResume).
func (e *Executor) Enter(ctx context.Context, tx jobs.Tx, at jobs.PhaseAt, files []phases.File) (map[string]any, error) {
	q := tx.Queries()
	batchID := at.BatchID
	works := at.Phase.(phases.Documenter).Documents(files)
	keys, fileIDs, sources := make([]string, len(works)), make([]int64, len(works)), make([]json.RawMessage, len(works))
	pdfs, ocrRefs := 0, 0
	for i, w := range works {
		keys[i], fileIDs[i] = w.File.R2Key, w.File.ID
		if w.Source == nil {
			continue
		}
		src, err := json.Marshal(w.Source)
		if err != nil {
			return nil, err
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
		return nil, fmt.Errorf("resuming failed documents of %s: %w", batchID, err)
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
		return nil, fmt.Errorf("inserting %d documents of %s: %w", len(works), batchID, err)
	}
	data := map[string]any{"documents": len(works), "pdfs": pdfs, "ocr_refs": ocrRefs}
	if len(resumed) > 0 {
		data["resumed"] = len(resumed)
	}
	params2 := docindex.JobParams(ids, nil)
	if len(resumed) > 0 {
		rids, resumes := make([]int64, len(resumed)), make([]int32, len(resumed))
		for i, r := range resumed {
			rids[i], resumes[i] = r.ID, r.Resumes
		}
		params2 = append(params2, docindex.JobParams(rids, resumes)...)
	}
	if _, err := tx.River.InsertManyTx(ctx, tx.Tx, params2); err != nil {
		return nil, fmt.Errorf("enqueueing the documents of %s: %w", batchID, err)
	}
	return data, nil
}

// HasOpen asks whether a document of the phase's generation is running.
func (e *Executor) HasOpen(ctx context.Context, q *db.Queries, at jobs.PhaseAt) (bool, error) {
	return q.DocumentBatchHasOpen(ctx, db.DocumentBatchHasOpenParams{BatchID: &at.BatchID, Generation: at.Generation})
}

// Outcomes joins each file's document as its task: a completed document
// is a completed task whose result names it (phases.DocumentResult); a
// failed one is a failed task, which leaves the file as it was. ($3, the
// phase, is read so that the query takes the core's parameters.)
func (e *Executor) Outcomes() jobs.Outcomes {
	return jobs.Outcomes{
		Join:   "LEFT JOIN documents t ON t.file_id = f.id AND t.batch_id = $1 AND $3::text <> ''",
		ID:     "t.id::text",
		Status: "CASE WHEN t.status = 'completed' THEN 'completed' WHEN t.id IS NOT NULL THEN 'failed' END",
		Result: "CASE WHEN t.status = 'completed' THEN jsonb_build_object('document_id', t.id) END",
		Order:  "t.id",
	}
}

// Progress counts the batches' documents (those of their latest run): a
// running one is neither completed nor failed.
func (e *Executor) Progress(ctx context.Context, q *db.Queries, batchIDs []string) (map[string][]jobs.PhaseProgress, error) {
	ps := e.deps.Executors.PhasesOf(Kind)
	if len(ps) == 0 {
		return nil, nil
	}
	rows, err := q.DocumentBatchSummaryMany(ctx, batchIDs)
	if err != nil {
		return nil, err
	}
	out := map[string][]jobs.PhaseProgress{}
	for _, r := range rows {
		out[r.BatchID] = []jobs.PhaseProgress{{
			Phase: string(ps[0].Spec().Name), Executor: Kind, Unit: "documents",
			TasksTotal: int64(r.Total), TasksProcessing: int64(r.Total - r.Completed - r.Failed), TasksCompleted: int64(r.Completed), TasksFailed: int64(r.Failed),
			TasksFailedInfrastructure: int64(r.FailedInfrastructure),
		}}
	}
	return out, nil
}

// Retry resumes the phase's failed documents (in scope: all, or those
// that failed for infrastructure reasons) from the step that failed, and
// makes sure every running one has its step job.
func (e *Executor) Retry(ctx context.Context, tx jobs.Tx, at jobs.PhaseAt, scope jobs.RetryScope) (jobs.RetryOutcome, error) {
	rows, err := tx.Queries().DocumentBatchRetryFailed(ctx, db.DocumentBatchRetryFailedParams{BatchID: &at.BatchID, Generation: at.Generation, InfraOnly: scope.InfraOnly})
	if err != nil {
		return jobs.RetryOutcome{}, fmt.Errorf("resuming the failed documents of %s: %w", at.BatchID, err)
	}
	// The resumed documents' jobs (their args carry the new resume count),
	// and any a reset left missing.
	enqueued, err := docindex.EnsureJobs(ctx, tx.Tx, tx.River, at.BatchID, at.Generation)
	if err != nil {
		return jobs.RetryOutcome{}, err
	}
	if enqueued > len(rows) {
		e.deps.Logger.Warn("a retry re-enqueued lost document jobs", "batch_id", at.BatchID, "documents", enqueued-len(rows))
	}
	return jobs.RetryOutcome{Count: len(rows), Data: map[string]any{"documents_resumed": len(rows)}}, nil
}

// Rerun names the files of the batch's failed documents; the documents
// themselves stay, and resume from the step that failed when the new pass
// enters the phase (Enter).
func (e *Executor) Rerun(ctx context.Context, tx jobs.Tx, batchID string, scope jobs.RetryScope) (jobs.Rerun, error) {
	keys, err := tx.Queries().DocumentBatchListFailedKeys(ctx, db.DocumentBatchListFailedKeysParams{BatchID: &batchID, InfraOnly: scope.InfraOnly})
	if err != nil {
		return jobs.Rerun{}, fmt.Errorf("finding the failed documents of batch %s: %w", batchID, err)
	}
	return jobs.Rerun{Keys: keys, Counts: map[string]any{"documents": len(keys)}}, nil
}

// Backstop fails the running documents whose step job River gave up on
// (no run would end them), then makes sure every other has its job.
func (e *Executor) Backstop(ctx context.Context, at jobs.PhaseAt) error {
	client := river.ClientFromContext[pgx.Tx](ctx)
	if err := e.pipeline.FailAbandoned(ctx, client, at.BatchID, at.Generation); err != nil {
		return err
	}
	return pgx.BeginFunc(ctx, e.deps.Pool, func(tx pgx.Tx) error {
		n, err := docindex.EnsureJobs(ctx, tx, client, at.BatchID, at.Generation)
		if n > 0 {
			e.deps.Logger.Warn("backstop re-enqueued lost document jobs", "batch_id", at.BatchID, "phase", at.Name(), "documents", n)
		}
		return err
	})
}

// Sweep fails the running documents posted through the API whose step
// job River gave up on, as Backstop does for a batch's.
func (e *Executor) Sweep(ctx context.Context, client *river.Client[pgx.Tx], _ bool) error {
	return e.pipeline.FailAbandonedPosted(ctx, client)
}

// Stop leaves the documents as they are: a reset cancels the batch's
// jobs, and an admin retry resumes them.
func (e *Executor) Stop(context.Context, jobs.Tx, string, string) (int, error) { return 0, nil }

// Prune keeps a batch's documents: they are the search index, and
// retention keeps a batch's final files and documents.
func (e *Executor) Prune(context.Context, *db.Queries, string, int32) (jobs.Removal, error) {
	return jobs.Removal{}, nil
}
