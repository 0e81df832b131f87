package jobs

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river"

	"github.com/arke-institute/orchestrator/db"
	"github.com/arke-institute/orchestrator/manifest"
	"github.com/arke-institute/orchestrator/phases"
)

// finalizeMaxAttempts with finalizeRetryDelay's schedule keeps delivering
// for about a day before giving up; the batch stays DONE either way and an
// operator can see the failure in its status.
const finalizeMaxAttempts = 150

// BatchFinalizeArgs delivers a finished batch's final manifest to the
// ingest service: POST {WORKER_URL}/api/batches/{batch_id}/enqueue-processed.
// It is an outbox: enqueued in the transaction that marks the batch DONE,
// retried with backoff until ingest answers 2xx.
type BatchFinalizeArgs struct {
	BatchID string `json:"batch_id"`
}

// Kind is the River job kind.
func (BatchFinalizeArgs) Kind() string { return "batch_finalize" }

// InsertOpts makes delivery unique per batch while unfinished.
func (BatchFinalizeArgs) InsertOpts() river.InsertOpts {
	return river.InsertOpts{
		MaxAttempts: finalizeMaxAttempts,
		UniqueOpts:  river.UniqueOpts{ByArgs: true, ByState: uniqueUnfinished},
	}
}

// BatchFinalizeWorker works BatchFinalizeArgs.
type BatchFinalizeWorker struct {
	river.WorkerDefaults[BatchFinalizeArgs]
	deps Deps
}

// NextRetry backs off exponentially up to ten minutes between attempts.
func (w *BatchFinalizeWorker) NextRetry(job *river.Job[BatchFinalizeArgs]) time.Time {
	return time.Now().Add(backoff(job.Attempt, 10*time.Minute))
}

// ProcessedManifest is the body sent to ingest.
type ProcessedManifest struct {
	BatchID  string            `json:"batch_id"`
	Manifest manifest.Manifest `json:"manifest"`
}

// Work builds the final manifest and delivers it once.
func (w *BatchFinalizeWorker) Work(ctx context.Context, job *river.Job[BatchFinalizeArgs]) error {
	id := job.Args.BatchID
	q := db.New(w.deps.Pool)
	batch, err := q.BatchGetByID(ctx, id)
	if errors.Is(err, pgx.ErrNoRows) {
		return river.JobCancel(fmt.Errorf("batch %s does not exist", id))
	}
	if err != nil {
		return err
	}
	if batch.Status != "DONE" || batch.IngestStatus == "delivered" {
		return nil
	}
	files, err := loadGeneration(ctx, w.deps.Pool, id, batch.Generation)
	if err != nil {
		return err
	}
	body, err := json.Marshal(ProcessedManifest{BatchID: id, Manifest: finalManifest(id, files)})
	if err != nil {
		return err
	}

	target, deliverErr := w.deliver(ctx, batch, body)
	status, lastErr := "delivered", (*string)(nil)
	if deliverErr != nil {
		msg := deliverErr.Error()
		lastErr = &msg
		status = "pending"
		if job.Attempt >= job.MaxAttempts {
			status = "failed"
		}
	}
	err = pgx.BeginFunc(ctx, w.deps.Pool, func(tx pgx.Tx) error {
		q := db.New(tx)
		if err := q.BatchIngestRecord(ctx, db.BatchIngestRecordParams{ID: id, IngestStatus: status, LastError: lastErr}); err != nil {
			return err
		}
		typ, data := db.EventBatchDelivered, map[string]any{"target": target, "attempt": job.Attempt}
		if deliverErr != nil {
			typ, data["error"] = db.EventIngestFailed, deliverErr.Error()
		}
		return q.EventRecord(ctx, db.Event{BatchID: id, Type: typ, Data: data})
	})
	if err != nil {
		return err
	}
	if deliverErr != nil {
		w.deps.Logger.Warn("delivering to ingest failed", "batch_id", id, "attempt", job.Attempt, "error", deliverErr)
		return deliverErr
	}
	w.deps.Logger.Info("batch delivered", "batch_id", id, "target", target)
	return nil
}

// deliver sends the body to ingest, or, with no WORKER_URL, writes it next
// to the manifest as staging/{batch_id}/_manifest.processed.json. It returns
// where the manifest went (no credentials in it).
func (w *BatchFinalizeWorker) deliver(ctx context.Context, batch db.Batch, body []byte) (string, error) {
	if w.deps.Config.WorkerURL == "" {
		key := "staging/" + batch.ID + "/_manifest.processed.json"
		err := w.deps.Store.Put(ctx, w.deps.Config.R2Bucket, key, bytes.NewReader(body), int64(len(body)), "application/json")
		return "s3://" + w.deps.Config.R2Bucket + "/" + key, err
	}
	endpoint := w.deps.Config.WorkerURL + "/api/batches/" + url.PathEscape(batch.ID) + "/enqueue-processed"
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, endpoint, bytes.NewReader(body))
	if err != nil {
		return endpoint, err
	}
	req.Header.Set("Content-Type", "application/json")
	// One key per completion: retries of this delivery repeat it, so ingest
	// can drop duplicates; a batch completed again (after a retry) gets a
	// new one.
	req.Header.Set("Idempotency-Key", batch.ID+"@"+batch.CompletedAt.UTC().Format(time.RFC3339Nano))
	resp, err := w.deps.HTTPClient.Do(req)
	if err != nil {
		return endpoint, fmt.Errorf("calling ingest: %w", err)
	}
	defer resp.Body.Close()
	snippet, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
	if resp.StatusCode/100 != 2 {
		return endpoint, fmt.Errorf("ingest answered %d: %s", resp.StatusCode, bytes.TrimSpace(snippet))
	}
	return endpoint, nil
}

// finalManifest is the BatchManifest of spec 001 built from the final file
// list: files grouped by their manifest directory and processing config, in
// list order, each with its preprocessor_tags.
func finalManifest(batchID string, files []phases.File) manifest.Manifest {
	groups := make([]manifest.DirectoryGroup, 0, len(files))
	for _, f := range files {
		tags := f.Tags
		if tags == nil {
			tags = []string{}
		}
		groups = append(groups, manifest.DirectoryGroup{
			DirectoryPath: f.DirectoryPath,
			ProcessingConfig: manifest.ProcessingConfig{
				OCR: f.ProcessingConfig.OCR, Describe: f.ProcessingConfig.Describe, Pinax: f.ProcessingConfig.Pinax,
			},
			Files: []manifest.FileInfo{{
				R2Key: f.R2Key, LogicalPath: f.LogicalPath, FileName: f.FileName, FileSize: f.FileSize,
				ContentType: f.ContentType, CID: f.CID, PreprocessorTags: tags,
			}},
		})
	}
	return manifest.Build(batchID, groups)
}
