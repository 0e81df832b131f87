package jobs

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"iter"
	"slices"
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
	"github.com/arke-institute/orchestrator/gcgoal"
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
	// build.ChunkFiles is how many files of generation 0 each COPY writes.
	build BuildSizes
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

// manifestGCPercent is the collector's percentage (GOGC) while a manifest
// is held (package gcgoal): the whole process collects more often for the
// seconds a batch takes to start.
const manifestGCPercent = 25

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
	// The manifest is held whole until the batch has started (20 MB at
	// 100,000 files), and reading it makes several times that in garbage:
	// at the collector's default goal, twice the live heap, that made the
	// process's peak memory.
	defer gcgoal.Tighten(manifestGCPercent)()
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

	doc, err := manifest.ValidateManifest(data, msg, w.deps.Settings.Limits)
	if err != nil {
		var verr *manifest.ValidationError
		if errors.As(err, &verr) {
			return w.fail(ctx, job, fmt.Sprintf("invalid manifest %s: %s", key, strings.Join(verr.Problems, "; ")))
		}
		return w.fail(ctx, job, fmt.Sprintf("invalid manifest %s: %v", key, err))
	}
	// Generation 0 is read from the manifest's JSON a part at a time: at
	// 100,000 files the JSON is some 20 MB, and its files decoded whole
	// (as the manifest's, then as phases') were 30 MB more each.
	first := w.firstPhase(doc)

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
		ptx := Tx{Tx: tx, River: river.ClientFromContext[pgx.Tx](ctx)}
		if first != nil {
			err = enterInParts(ctx, ptx, w.deps, id, first, doc, w.build.ChunkFiles)
		} else {
			// Whole, for enterNextPhase: the batch is DONE at once, or
			// its first phase cannot take a generation part by part.
			var files []phases.File
			if files, err = insertGeneration(ctx, tx, id, 0, "", 0, slices.Collect(manifestFiles(doc))); err == nil {
				finished, err = enterNextPhase(ctx, ptx, w.deps, id, phases.First(), 0, files)
			}
		}
		if err != nil {
			return err
		}
		if _, err := river.JobCompleteTx[*riverpgxv5.Driver](ctx, tx, job); err != nil {
			return fmt.Errorf("completing batch_start job: %w", err)
		}
		log.InfoContext(ctx, "batch started", "files", doc.TotalFiles, "bytes", doc.TotalBytes)
		return nil
	})
	if err == nil {
		w.deps.BatchFinished(finished)
	}
	return err
}

// firstPhase is the phase that a batch of doc's files enters, found a
// part of generation 0 at a time, when it and every phase before it run on
// executors that take a generation part by part (Extender); nil otherwise,
// or when no phase has work: enterNextPhase then decides on the whole
// generation. Such a phase finds in a whole generation the work it finds
// in its parts (phase_build relies on it too), so it has work in the whole
// exactly when it has some in a part.
func (w *BatchStartWorker) firstPhase(doc *manifest.Document) phases.Phase {
	var candidates []phases.Phase // phases.All() starts at phases.First()
	for _, p := range phases.All() {
		if _, ok := w.deps.Executors.executor(p).(Extender); !ok {
			break
		}
		candidates = append(candidates, p)
	}
	found := len(candidates)
	for part := range parts(manifestFiles(doc), w.build.ChunkFiles) {
		for i, p := range candidates[:found] {
			if len(phases.Work(p, part)) > 0 {
				found = i
				break
			}
		}
		if found == 0 {
			break
		}
	}
	if found == len(candidates) {
		return nil
	}
	return candidates[found]
}

// enterInParts writes generation 0 from doc part by part (size files
// each) and moves the batch into phase p, whose executor, an Extender, is
// given the first part by Enter and the others by Extend, all in tx:
// enterNextPhase's work, without the whole generation in memory at once.
func enterInParts(ctx context.Context, tx Tx, d Deps, batchID string, p phases.Phase, doc *manifest.Document, size int) (err error) {
	name := string(p.Spec().Name)
	ctx, span := d.Tracer.StartBatchStep(ctx, batchID, "phase.enter", tracing.PhaseKey.String(name),
		attribute.Int("generation", 0), attribute.Int("files", int(doc.TotalFiles)))
	defer func() { tracing.End(span, err) }()
	q := tx.Queries()
	if _, err := q.BatchSetPhase(ctx, db.BatchSetPhaseParams{ID: batchID, Phase: name, Generation: 0}); err != nil {
		return fmt.Errorf("moving batch %s to %s: %w", batchID, name, err)
	}
	ex := d.Executors.executor(p)
	ext, ok := ex.(Extender)
	if !ok {
		return fmt.Errorf("the executor of %s cannot take a generation part by part", name)
	}
	at := PhaseAt{BatchID: batchID, Phase: p, Generation: 0}
	var (
		data     map[string]any
		ordinal  int32
		extended int
	)
	for part := range parts(manifestFiles(doc), size) {
		stored, err := insertGeneration(ctx, tx.Tx, batchID, 0, "", ordinal, part)
		if err != nil {
			return err
		}
		if ordinal == 0 {
			if data, err = ex.Enter(ctx, tx, at, stored); err != nil {
				return fmt.Errorf("entering %s of batch %s: %w", name, batchID, err)
			}
		} else {
			n, err := ext.Extend(ctx, tx, at, stored)
			if err != nil {
				return fmt.Errorf("entering %s of batch %s: %w", name, batchID, err)
			}
			extended += n
		}
		ordinal += int32(len(part))
	}
	// Enter counted the first part's tasks: phase.started counts them all,
	// as when Enter is given the whole generation.
	if n, ok := data["tasks"].(int); ok {
		data["tasks"] = n + extended
	}
	return q.EventRecord(ctx, db.Event{BatchID: batchID, Type: db.EventPhaseStarted, Phase: name, Data: withGeneration(data, 0)})
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
	// Sized up front when the size is known: grown by doubling, the
	// buffer left as much garbage again as the manifest.
	buf := bytes.NewBuffer(make([]byte, 0, max(size, 0)+bytes.MinRead))
	if _, err := buf.ReadFrom(io.LimitReader(rc, limit+1)); err != nil {
		return nil, err
	}
	data := buf.Bytes()
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

// manifestFiles are generation 0, in manifest order, read from doc one
// file at a time.
func manifestFiles(doc *manifest.Document) iter.Seq[phases.File] {
	return func(yield func(phases.File) bool) {
		for i, d := range doc.Directories {
			cfg := phases.ProcessingConfig{OCR: d.ProcessingConfig.OCR, Describe: d.ProcessingConfig.Describe, Pinax: d.ProcessingConfig.Pinax}
			for f := range doc.Files(i) {
				if !yield(phases.File{
					R2Key: f.R2Key, LogicalPath: f.LogicalPath, FileName: f.FileName, FileSize: f.FileSize,
					ContentType: f.ContentType, CID: f.CID, ProcessingConfig: cfg, DirectoryPath: d.DirectoryPath,
				}) {
					return
				}
			}
		}
	}
}

// parts cuts files into slices of size files (the last may be shorter),
// each a new slice that its receiver may keep or change.
func parts(files iter.Seq[phases.File], size int) iter.Seq[[]phases.File] {
	return func(yield func([]phases.File) bool) {
		part := make([]phases.File, 0, size)
		for f := range files {
			if part = append(part, f); len(part) == size {
				if !yield(part) {
					return
				}
				part = make([]phases.File, 0, size)
			}
		}
		if len(part) > 0 {
			yield(part)
		}
	}
}
