package jobs

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river"
	"go.opentelemetry.io/otel/attribute"

	"github.com/arke-institute/orchestrator/db"
	"github.com/arke-institute/orchestrator/fanin"
	"github.com/arke-institute/orchestrator/manifest"
	"github.com/arke-institute/orchestrator/phases"
	"github.com/arke-institute/orchestrator/tracing"
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
		UniqueOpts:  river.UniqueOpts{ByArgs: true, ByState: fanin.UniqueUnfinished},
	}
}

// BatchFinalizeWorker works BatchFinalizeArgs.
type BatchFinalizeWorker struct {
	Defaults[BatchFinalizeArgs]
	deps Deps
}

// NextRetry backs off exponentially up to ten minutes between attempts.
func (w *BatchFinalizeWorker) NextRetry(job *river.Job[BatchFinalizeArgs]) time.Time {
	return time.Now().Add(Backoff(job.Attempt, 10*time.Minute))
}

// ProcessedManifest is the body sent to ingest.
type ProcessedManifest struct {
	BatchID  string            `json:"batch_id"`
	Manifest manifest.Manifest `json:"manifest"`
}

// Work builds the final manifest and delivers it once.
func (w *BatchFinalizeWorker) Work(ctx context.Context, job *river.Job[BatchFinalizeArgs]) (err error) {
	id := job.Args.BatchID
	ctx, span := w.deps.Tracer.StartBatchStep(ctx, id, "batch.finalize", attribute.Int("attempt", job.Attempt))
	defer func() { tracing.End(span, err) }()
	batch, err := w.deps.JobBatch(ctx, id)
	if err != nil {
		return err
	}
	if phases.BatchStatus(batch.Status) != phases.BatchDone || batch.IngestStatus == "delivered" {
		return nil
	}
	failures, err := w.deps.Executors.Failures(ctx, db.New(w.deps.Pool), id)
	if err != nil {
		return err
	}
	body, err := spoolManifest(ctx, w.deps.Pool, id, batch.Generation, failures)
	if err != nil {
		return err
	}
	defer body.Close()

	target, deliverErr := w.deliver(ctx, batch, body)
	if w.deps.Settings.WorkerURL != "" {
		w.deps.Metrics.IngestAttempted(deliverErr != nil)
	}
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
		w.deps.Logger.WarnContext(ctx, "delivering to ingest failed", "batch_id", id, "attempt", job.Attempt, "error", deliverErr)
		return deliverErr
	}
	w.deps.Logger.InfoContext(ctx, "batch delivered", "batch_id", id, "target", target)
	return nil
}

// deliver sends the body to ingest, or, with no WORKER_URL, writes it next
// to the manifest as staging/{batch_id}/_manifest.processed.json. It returns
// where the manifest went, with any password in WORKER_URL masked: the
// target is logged and kept in the batch's events.
func (w *BatchFinalizeWorker) deliver(ctx context.Context, batch db.Batch, body *spooled) (string, error) {
	if w.deps.Settings.WorkerURL == "" {
		key := "staging/" + batch.ID + "/" + processedManifestName
		err := w.deps.Store.Put(ctx, w.deps.Settings.StagingBucket(), key, body.reader(), body.size, "application/json")
		return "s3://" + w.deps.Settings.StagingBucket() + "/" + key, err
	}
	endpoint := w.deps.Settings.WorkerURL + "/api/batches/" + url.PathEscape(batch.ID) + "/enqueue-processed"
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, endpoint, body.reader())
	if err != nil {
		return "WORKER_URL", errors.New("WORKER_URL is not a valid URL") // the parser's error would repeat it
	}
	// A section of the file: its length is known, and a redirect or a
	// retry of the transport reads it again from the start.
	req.ContentLength = body.size
	req.GetBody = func() (io.ReadCloser, error) { return io.NopCloser(body.reader()), nil }
	endpoint = req.URL.Redacted()
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

// finalGenerationSQL reads a generation grouped the way manifest.Build
// groups it: by directory and processing config, groups in the order their
// first file appears, files in list order, each row with its group's file
// count and byte total (capped like manifest.Build's saturating sums).
// Processing configs are all written by insertGeneration from one struct, so
// equal configs are equal jsonb.
//
// A file indexed as a document (files.document_id) has the document's id
// and tags, when it completed.
const finalGenerationSQL = `SELECT f.directory_path, f.processing_config, f.r2_key, f.logical_path, f.file_name, f.file_size,
	f.content_type, f.cid, f.preprocessor_tags, d.id, d.document_tags,
	count(*) OVER g, least(sum(f.file_size) OVER g, 9223372036854775807)::bigint
FROM files f
LEFT JOIN documents d ON d.id = f.document_id AND d.status = 'completed'
WHERE f.batch_id = $1 AND f.generation = $2
WINDOW g AS (PARTITION BY f.directory_path, f.processing_config)
ORDER BY min(f.ordinal) OVER g, f.ordinal`

// processedManifest writes to buf the JSON of the ProcessedManifest for
// the batch's final generation, with the batch's failed work by cause
// (failures: a file whose work failed is in the manifest as it came into
// the phase): the BatchManifest of spec 001, files grouped by their
// manifest directory and processing config, in list order, each with its
// preprocessor_tags. It is streamed from the rows: at 100,000 files,
// building the file list, the groups and the Manifest before marshalling
// held the final manifest four times over, and made delivery the process's
// peak memory (and so, later, did the body held whole: spoolManifest).
func processedManifest(ctx context.Context, conn db.DBTX, buf *bufio.Writer, batchID string, generation int32, failures Failures) error {
	rows, err := conn.Query(ctx, finalGenerationSQL, batchID, generation)
	if err != nil {
		return fmt.Errorf("reading generation %d of batch %s: %w", generation, batchID, err)
	}
	defer rows.Close()
	// The caller's Flush reports a failed write: the writes' own errors
	// can go unchecked.
	buf.WriteString(`{"batch_id":`) //nolint:errcheck // see above
	id, err := json.Marshal(batchID)
	if err != nil {
		return err
	}
	buf.Write(id)                   //nolint:errcheck // see above
	buf.WriteString(`,"manifest":`) //nolint:errcheck // see above
	out := manifest.NewStreamWriter(buf, batchID)
	var (
		dir, lastDir       string
		cfgJSON, lastCfg   []byte
		cid                *string
		docID              *int64
		f                  manifest.FileInfo
		groupFiles, groupB int64
		first              = true
	)
	configs := map[string]phases.ProcessingConfig{}
	for rows.Next() {
		f, cid, docID = manifest.FileInfo{}, nil, nil
		if err := rows.Scan(&dir, &cfgJSON, &f.R2Key, &f.LogicalPath, &f.FileName, &f.FileSize,
			&f.ContentType, &cid, &f.PreprocessorTags, &docID, &f.DocumentTags, &groupFiles, &groupB); err != nil {
			return fmt.Errorf("reading generation %d of batch %s: %w", generation, batchID, err)
		}
		if first || dir != lastDir || !bytes.Equal(cfgJSON, lastCfg) {
			cfg, ok := configs[string(cfgJSON)]
			if !ok {
				if err := json.Unmarshal(cfgJSON, &cfg); err != nil {
					return fmt.Errorf("file %s: reading processing_config: %w", f.R2Key, err)
				}
				configs[string(cfgJSON)] = cfg
			}
			out.StartGroup(dir, manifest.ProcessingConfig{OCR: cfg.OCR, Describe: cfg.Describe, Pinax: cfg.Pinax}, groupFiles, groupB)
			first, lastDir, lastCfg = false, dir, bytes.Clone(cfgJSON)
		}
		if cid != nil {
			f.CID = *cid
		}
		if f.PreprocessorTags == nil {
			f.PreprocessorTags = []string{}
		}
		if docID != nil {
			f.DocumentID = *docID
			if f.DocumentTags == nil {
				f.DocumentTags = []string{}
			}
		}
		out.File(f)
	}
	if err := rows.Err(); err != nil {
		return fmt.Errorf("reading generation %d of batch %s: %w", generation, batchID, err)
	}
	if err := out.Close(); err != nil {
		return err
	}
	counts, err := json.Marshal(failures)
	if err != nil {
		return err
	}
	_, err = fmt.Fprintf(buf, `,"failures":%s}`, counts)
	return err
}

// spooled is a final manifest written to a temporary file, which Close
// removes.
type spooled struct {
	f    *os.File
	size int64
}

// reader reads the whole manifest, from its start, each time it is called.
func (s *spooled) reader() io.ReadSeeker { return io.NewSectionReader(s.f, 0, s.size) }

func (s *spooled) Close() error {
	err := s.f.Close()
	if rerr := os.Remove(s.f.Name()); err == nil {
		err = rerr
	}
	return err
}

// spoolManifest writes the final manifest (processedManifest) to a
// temporary file, from which it is sent: at 100,000 files it is some 30 MB,
// and held in memory while sent it made delivery the process's peak
// memory (docs/performance.md).
func spoolManifest(ctx context.Context, conn db.DBTX, batchID string, generation int32, failures Failures) (*spooled, error) {
	f, err := os.CreateTemp("", "manifest-*.json")
	if err != nil {
		return nil, fmt.Errorf("spooling the final manifest: %w", err)
	}
	s := &spooled{f: f}
	w := bufio.NewWriterSize(f, 64<<10)
	err = processedManifest(ctx, conn, w, batchID, generation, failures)
	if err == nil {
		err = w.Flush()
	}
	if err == nil {
		s.size, err = f.Seek(0, io.SeekCurrent)
	}
	if err != nil {
		_ = s.Close() // the spooling's error is the one to report
		return nil, fmt.Errorf("spooling the final manifest: %w", err)
	}
	return s, nil
}
