package jobs

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/riverqueue/river/rivertype"
	"go.opentelemetry.io/otel/attribute"

	"github.com/arke-institute/orchestrator/blob"
	"github.com/arke-institute/orchestrator/db"
	"github.com/arke-institute/orchestrator/fanin"
	"github.com/arke-institute/orchestrator/manifest"
	"github.com/arke-institute/orchestrator/phases"
	"github.com/arke-institute/orchestrator/tracing"
)

// batchStartMaxAttempts bounds retries of transient storage errors: with
// batchStartRetryDelay's schedule that is about half an hour of trying.
const batchStartMaxAttempts = 12

// BatchStartArgs starts a batch that intake accepted: it reads and validates
// the manifest, writes the first file generation and discovers the first
// phase with work. Unique per batch.
type BatchStartArgs struct {
	BatchID string `json:"batch_id"`
}

// Kind is the River job kind.
func (BatchStartArgs) Kind() string { return "batch_start" }

// InsertOpts makes the job unique per batch while unfinished.
func (BatchStartArgs) InsertOpts() river.InsertOpts {
	return river.InsertOpts{
		MaxAttempts: batchStartMaxAttempts,
		UniqueOpts:  river.UniqueOpts{ByArgs: true, ByState: fanin.UniqueUnfinished},
	}
}

// BatchStartWorker works BatchStartArgs.
type BatchStartWorker struct {
	Defaults[BatchStartArgs]
	deps Deps
}

// NextRetry retries transient storage errors after 2, 4, 8 ... seconds,
// capped at five minutes, with jitter so that many batches hit by one storage
// outage do not all come back at the same instant.
func (w *BatchStartWorker) NextRetry(job *river.Job[BatchStartArgs]) time.Time {
	return time.Now().Add(Backoff(job.Attempt, 5*time.Minute))
}

// Work reads the manifest and moves the batch out of PENDING: into its first
// phase with work, to DONE when no phase has work, or to ERROR when the
// manifest is missing or invalid. Only transient storage errors are retried.
func (w *BatchStartWorker) Work(ctx context.Context, job *river.Job[BatchStartArgs]) (err error) {
	ctx, span := w.deps.Tracer.StartBatchStep(ctx, job.Args.BatchID, "batch.start", attribute.Int("attempt", job.Attempt))
	defer func() { tracing.End(span, err) }()
	err = w.start(ctx, job)
	if err == nil || job.Attempt < job.MaxAttempts {
		return err
	}
	if _, ok := errors.AsType[*rivertype.JobCancelError](err); ok {
		return err
	}
	// The last attempt failed, for whatever reason (a database failure, a
	// file list the database refuses): the batch must not stay PENDING.
	if ferr := w.fail(context.WithoutCancel(ctx), job, fmt.Sprintf("starting the batch failed %d times, giving up: %v", job.Attempt, err)); ferr != nil {
		return errors.Join(err, ferr)
	}
	return nil
}

// start is one attempt of Work.
func (w *BatchStartWorker) start(ctx context.Context, job *river.Job[BatchStartArgs]) error {
	id := job.Args.BatchID
	log := w.deps.Logger.With("batch_id", id, "job_id", job.ID)
	q := db.New(w.deps.Pool)

	batch, err := w.deps.JobBatch(ctx, id)
	if err != nil {
		return err
	}
	if phases.BatchStatus(batch.Status) != phases.BatchPending {
		log.Info("batch already started", "status", batch.Status)
		return nil
	}
	var msg manifest.QueueMessage
	if err := json.Unmarshal(batch.QueueMessage, &msg); err != nil {
		return w.fail(ctx, job, fmt.Sprintf("stored queue message is unreadable: %v", err))
	}

	key := msg.ManifestR2Key
	data, err := w.readManifest(ctx, key)
	var tooLarge *manifestTooLarge
	switch {
	case errors.As(err, &tooLarge):
		return w.fail(ctx, job, tooLarge.Error())
	case errors.Is(err, blob.ErrNotFound):
		return w.fail(ctx, job, "manifest not found: "+key)
	case err != nil && !blob.IsTransient(err):
		return w.fail(ctx, job, fmt.Sprintf("reading manifest %s: %v", key, err))
	case err != nil && job.Attempt >= job.MaxAttempts:
		return w.fail(ctx, job, fmt.Sprintf("reading manifest %s failed %d times, giving up: %v", key, job.Attempt, err))
	case err != nil:
		// Transient: leave a trace operators can see, then let River retry.
		if evErr := q.EventRecord(ctx, db.Event{BatchID: id, Type: db.EventBatchStartFailed, Data: map[string]any{
			"attempt": job.Attempt, "max_attempts": job.MaxAttempts, "error": err.Error(),
		}}); evErr != nil {
			log.Error("recording start failure", "error", evErr)
		}
		log.Warn("reading manifest failed, will retry", "attempt", job.Attempt, "error", err)
		return fmt.Errorf("reading manifest %s: %w", key, err)
	}

	m, err := manifest.ParseManifest(data, msg, w.deps.Settings.Limits)
	if err != nil {
		var verr *manifest.ValidationError
		if errors.As(err, &verr) {
			return w.fail(ctx, job, fmt.Sprintf("invalid manifest %s: %s", key, strings.Join(verr.Problems, "; ")))
		}
		return w.fail(ctx, job, fmt.Sprintf("invalid manifest %s: %v", key, err))
	}

	// The transaction below must not refer to m: only the flat file list
	// should stay alive, the manifest is garbage once flattened (at 100,000
	// files it is tens of MB).
	totalBytes := m.TotalBytes
	gen0 := manifestFiles(m)

	var finished *db.Batch // the batch, if it had no work and is DONE
	err = pgx.BeginFunc(ctx, w.deps.Pool, func(tx pgx.Tx) error {
		q := db.New(tx)
		// Lock the batch so a concurrent admin reset or a second run of this
		// job sees either nothing or all of what we do.
		batch, err := q.BatchGetByIDForUpdate(ctx, id)
		if err != nil {
			return fmt.Errorf("locking batch %s: %w", id, err)
		}
		if phases.BatchStatus(batch.Status) != phases.BatchPending {
			_, err := river.JobCompleteTx[*riverpgxv5.Driver](ctx, tx, job)
			return err
		}
		files, err := insertGeneration(ctx, tx, id, 0, "", 0, gen0)
		if err != nil {
			return err
		}
		if finished, err = enterNextPhase(ctx, Tx{Tx: tx, River: river.ClientFromContext[pgx.Tx](ctx)}, w.deps, id, phases.First(), 0, files); err != nil {
			return err
		}
		if _, err := river.JobCompleteTx[*riverpgxv5.Driver](ctx, tx, job); err != nil {
			return fmt.Errorf("completing batch_start job: %w", err)
		}
		log.InfoContext(ctx, "batch started", "files", len(files), "bytes", totalBytes)
		return nil
	})
	if err == nil {
		w.deps.BatchFinished(finished)
	}
	return err
}

// manifestTooLarge is a manifest over MANIFEST_MAX_BYTES: refused, not
// retried, and never read whole.
type manifestTooLarge struct {
	key         string
	size, max   int64
	sizeIsKnown bool
}

func (e *manifestTooLarge) Error() string {
	if e.sizeIsKnown {
		return fmt.Sprintf("manifest %s is %d bytes, more than MANIFEST_MAX_BYTES (%d)", e.key, e.size, e.max)
	}
	return fmt.Sprintf("manifest %s is more than MANIFEST_MAX_BYTES (%d bytes)", e.key, e.max)
}

// readManifest reads the manifest at key: its size, which the store gives
// before the body, is checked against MANIFEST_MAX_BYTES first, and the
// body is read through that limit too (a server that did not say).
func (w *BatchStartWorker) readManifest(ctx context.Context, key string) ([]byte, error) {
	limit := w.deps.Settings.ManifestMaxBytes
	rc, size, err := w.deps.Store.Open(ctx, w.deps.Settings.StagingBucket(), key)
	if err != nil {
		return nil, err
	}
	defer rc.Close()
	if size > limit {
		return nil, &manifestTooLarge{key: key, size: size, max: limit, sizeIsKnown: true}
	}
	data, err := io.ReadAll(io.LimitReader(rc, limit+1))
	if err != nil {
		return nil, err
	}
	if int64(len(data)) > limit {
		return nil, &manifestTooLarge{key: key, max: limit}
	}
	return data, nil
}

// fail puts the batch in ERROR with message and completes the job in the same
// transaction: a missing or invalid manifest is not retried.
func (w *BatchStartWorker) fail(ctx context.Context, job *river.Job[BatchStartArgs], message string) error {
	w.deps.Logger.Warn("batch failed to start", "batch_id", job.Args.BatchID, "error", message)
	var failed *db.Batch
	err := pgx.BeginFunc(ctx, w.deps.Pool, func(tx pgx.Tx) error {
		var err error
		if failed, err = failBatch(ctx, Tx{Tx: tx, River: river.ClientFromContext[pgx.Tx](ctx)}, w.deps, job.Args.BatchID, "", message); err != nil {
			return err
		}
		_, err = river.JobCompleteTx[*riverpgxv5.Driver](ctx, tx, job)
		return err
	})
	if err == nil {
		w.deps.BatchFinished(failed)
	}
	return err
}

// manifestFiles flattens a manifest into generation 0, in manifest order.
func manifestFiles(m manifest.Manifest) []phases.File {
	n := 0
	for _, d := range m.Directories {
		n += len(d.Files)
	}
	out := make([]phases.File, 0, n)
	for _, d := range m.Directories {
		cfg := phases.ProcessingConfig{OCR: d.ProcessingConfig.OCR, Describe: d.ProcessingConfig.Describe, Pinax: d.ProcessingConfig.Pinax}
		for _, f := range d.Files {
			out = append(out, phases.File{
				R2Key: f.R2Key, LogicalPath: f.LogicalPath, FileName: f.FileName, FileSize: f.FileSize,
				ContentType: f.ContentType, CID: f.CID, ProcessingConfig: cfg, DirectoryPath: d.DirectoryPath,
			})
		}
	}
	return out
}
