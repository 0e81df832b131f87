package docindex

import (
	"context"
	"fmt"

	"github.com/arke-institute/orchestrator/db"
	"github.com/arke-institute/orchestrator/jobs"
	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river"
)

// JobParams are the step jobs of documents ids (resumes[i], when
// given, is the document's count of resumes: see DocumentStepArgs).
func JobParams(ids []int64, resumes []int32) []river.InsertManyParams {
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

// EnsureJobs makes sure every running document of a batch's documents
// phase (generation) has its step job (unique: an existing one is kept),
// as the sweep's backstop and a retry need. It returns how many it
// enqueued.
func EnsureJobs(ctx context.Context, tx pgx.Tx, client *river.Client[pgx.Tx], batchID string, generation int32) (int, error) {
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
	res, err := client.InsertManyTx(ctx, tx, JobParams(ids, resumes))
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

// FailAbandoned fails the running documents of a batch's documents phase
// (generation) whose step job River discarded (its attempts spent, a dead
// process's last one included) or cancelled, with the reason in their
// errors; their ends make sure of the phase's check.
func (w *DocumentStepWorker) FailAbandoned(ctx context.Context, client *river.Client[pgx.Tx], batchID string, generation int32) error {
	rows, err := db.New(w.deps.Pool).DocumentBatchListAbandoned(ctx, db.DocumentBatchListAbandonedParams{BatchID: &batchID, Generation: generation})
	if err != nil {
		return fmt.Errorf("finding abandoned documents of %s: %w", batchID, err)
	}
	for _, r := range rows {
		if _, err := w.Fail(ctx, client, r.ID, r.Resumes, abandonedReason(r.JobID, r.JobState)); err != nil {
			return fmt.Errorf("failing abandoned document %d of %s: %w", r.ID, batchID, err)
		}
	}
	return nil
}

// FailAbandonedPosted fails the running documents posted through the
// API whose step job River discarded or cancelled, as FailAbandoned does
// for a batch's.
func (w *DocumentStepWorker) FailAbandonedPosted(ctx context.Context, client *river.Client[pgx.Tx]) error {
	rows, err := db.New(w.deps.Pool).DocumentListAbandoned(ctx, jobs.SweepGroupsPerRun)
	if err != nil {
		return fmt.Errorf("finding abandoned documents: %w", err)
	}
	for _, r := range rows {
		if _, err := w.Fail(ctx, client, r.ID, r.Resumes, abandonedReason(r.JobID, r.JobState)); err != nil {
			return fmt.Errorf("failing abandoned document %d: %w", r.ID, err)
		}
	}
	return nil
}

// abandonedReason is the error recorded for a document whose step job
// River gave up on.
func abandonedReason(jobID int64, state string) string {
	return fmt.Sprintf("step job %d was %s by River; the document cannot go on", jobID, state)
}
