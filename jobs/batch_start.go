package jobs

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"path"
	"strings"
	"time"
	"unique"

	"github.com/jackc/pgx/v5"
	"github.com/oklog/ulid/v2"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/riverqueue/river/rivertype"

	"github.com/arke-institute/orchestrator/blob"
	"github.com/arke-institute/orchestrator/db"
	"github.com/arke-institute/orchestrator/manifest"
	"github.com/arke-institute/orchestrator/phases"
)

// batchStartMaxAttempts bounds retries of transient storage errors: with
// batchStartRetryDelay's schedule that is about half an hour of trying.
const batchStartMaxAttempts = 12

// uniqueUnfinished is the ByState of our unique jobs: every state in which
// the job has yet to finish. completed is left out on purpose: a unique job
// that has finished must not block a new one (design.md, fan-in).
var uniqueUnfinished = []rivertype.JobState{
	rivertype.JobStateAvailable,
	rivertype.JobStatePending,
	rivertype.JobStateRetryable,
	rivertype.JobStateRunning,
	rivertype.JobStateScheduled,
}

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
		UniqueOpts:  river.UniqueOpts{ByArgs: true, ByState: uniqueUnfinished},
	}
}

// BatchStartWorker works BatchStartArgs.
type BatchStartWorker struct {
	river.WorkerDefaults[BatchStartArgs]
	deps Deps
}

// NextRetry retries transient storage errors after 2, 4, 8 ... seconds,
// capped at five minutes, with jitter so that many batches hit by one storage
// outage do not all come back at the same instant.
func (w *BatchStartWorker) NextRetry(job *river.Job[BatchStartArgs]) time.Time {
	return time.Now().Add(backoff(job.Attempt, 5*time.Minute))
}

// backoff is 2^attempt seconds capped at max, plus up to 20% jitter.
func backoff(attempt int, max time.Duration) time.Duration {
	d := max
	if attempt < 20 {
		d = min(time.Duration(1<<attempt)*time.Second, max)
	}
	return d + time.Duration(rand.Int64N(int64(d)/5+1))
}

// Work reads the manifest and moves the batch out of PENDING: into its first
// phase with work, to DONE when no phase has work, or to ERROR when the
// manifest is missing or invalid. Only transient storage errors are retried.
func (w *BatchStartWorker) Work(ctx context.Context, job *river.Job[BatchStartArgs]) error {
	id := job.Args.BatchID
	log := w.deps.Logger.With("batch_id", id, "job_id", job.ID)
	q := db.New(w.deps.Pool)

	batch, err := w.deps.jobBatch(ctx, id)
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
	data, err := w.deps.Store.Get(ctx, w.deps.Config.R2Bucket, key)
	switch {
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

	m, err := manifest.ParseManifest(data, msg, w.deps.limits())
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
		if finished, err = enterNextPhase(ctx, tx, id, phases.First(), 0, files); err != nil {
			return err
		}
		if _, err := river.JobCompleteTx[*riverpgxv5.Driver](ctx, tx, job); err != nil {
			return fmt.Errorf("completing batch_start job: %w", err)
		}
		log.Info("batch started", "files", len(files), "bytes", totalBytes)
		return nil
	})
	if err == nil {
		w.deps.batchFinished(finished)
	}
	return err
}

// fail puts the batch in ERROR with message and completes the job in the same
// transaction: a missing or invalid manifest is not retried.
func (w *BatchStartWorker) fail(ctx context.Context, job *river.Job[BatchStartArgs], message string) error {
	w.deps.Logger.Warn("batch failed to start", "batch_id", job.Args.BatchID, "error", message)
	var failed *db.Batch
	err := pgx.BeginFunc(ctx, w.deps.Pool, func(tx pgx.Tx) error {
		var err error
		if failed, err = failBatch(ctx, db.New(tx), job.Args.BatchID, "", message); err != nil {
			return err
		}
		_, err = river.JobCompleteTx[*riverpgxv5.Driver](ctx, tx, job)
		return err
	})
	if err == nil {
		w.deps.batchFinished(failed)
	}
	return err
}

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
// in files, creates its tasks, moves the batch into it and enqueues its
// launcher. When from is "" or no phase has work, the batch is DONE with
// this generation as its final file list, and delivery to ingest is queued;
// the batch is then returned, for the caller to count once its transaction
// has committed (Deps.batchFinished). Runs inside a job, in the job's
// transaction.
func enterNextPhase(ctx context.Context, tx pgx.Tx, batchID string, from phases.Name, generation int32, files []phases.File) (*db.Batch, error) {
	q := db.New(tx)
	client := river.ClientFromContext[pgx.Tx](ctx)
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

// insertGeneration writes a file generation, or a stretch of one whose first
// file is at ordinal first, with COPY and returns it as stored: with the row IDs that tasks and the next generation refer to,
// and the defaults the rows got. Only the IDs are read back: reading whole
// rows again cost seconds at 100,000 files. files is modified in place.
func insertGeneration(ctx context.Context, tx pgx.Tx, batchID string, generation int32, phase phases.Name, first int32, files []phases.File) ([]phases.File, error) {
	q := db.New(tx)
	src := &generationSource{batchID: batchID, generation: generation, first: first, files: files, i: -1,
		configs: map[phases.ProcessingConfig][]byte{}}
	if phase != "" {
		s := string(phase)
		src.phase = &s
	}
	if _, err := tx.CopyFrom(ctx, pgx.Identifier{"files"}, fileColumns, src); err != nil {
		return nil, fmt.Errorf("writing generation %d of batch %s: %w", generation, batchID, err)
	}
	ids, err := q.FileListIDsByBatchGeneration(ctx, db.FileListIDsByBatchGenerationParams{BatchID: batchID, Generation: generation, MinOrdinal: first})
	if err != nil {
		return nil, fmt.Errorf("reading the IDs of generation %d of batch %s: %w", generation, batchID, err)
	}
	if len(ids) != len(files) {
		return nil, fmt.Errorf("generation %d of batch %s: wrote %d files, found %d", generation, batchID, len(files), len(ids))
	}
	for i, id := range ids {
		files[i].ID = id
	}
	return files, nil
}

// fileColumns are db.FileInsertMany's columns, in the order
// generationSource.Values gives them.
var fileColumns = []string{"batch_id", "generation", "ordinal", "parent_id", "phase", "directory_path", "r2_key",
	"logical_path", "file_name", "file_size", "content_type", "cid", "processing_config", "preprocessor_tags"}

// generationSource feeds a generation to COPY one file at a time. It does
// what db.FileInsertMany does without first converting the whole generation
// into parameter rows: at 100,000 files those rows were a second copy of the
// generation, alive together with it, and the largest part of the peak.
type generationSource struct {
	batchID    string
	generation int32
	first      int32   // the ordinal of files[0]
	phase      *string // nil for generation 0
	files      []phases.File
	i          int
	configs    map[phases.ProcessingConfig][]byte // a batch has few distinct ones
	err        error
}

var _ pgx.CopyFromSource = (*generationSource)(nil)

// Next moves to the next file.
func (s *generationSource) Next() bool {
	s.i++
	return s.err == nil && s.i < len(s.files)
}

// Values fills in the file's defaults (directory from its logical path, no
// tags as an empty array), which insertGeneration's callers rely on, and
// returns its row.
func (s *generationSource) Values() ([]any, error) {
	f := &s.files[s.i]
	cfg, ok := s.configs[f.ProcessingConfig]
	if !ok {
		var err error
		if cfg, err = json.Marshal(f.ProcessingConfig); err != nil {
			s.err = err
			return nil, err
		}
		s.configs[f.ProcessingConfig] = cfg
	}
	if f.DirectoryPath == "" {
		f.DirectoryPath = path.Dir(f.LogicalPath)
	}
	var parent *int64
	if f.ParentID != 0 {
		parent = &f.ParentID
	}
	var cid *string
	if f.CID != "" {
		cid = &f.CID
	}
	if f.Tags == nil {
		f.Tags = []string{}
	}
	return []any{s.batchID, s.generation, s.first + int32(s.i), parent, s.phase, f.DirectoryPath, f.R2Key,
		f.LogicalPath, f.FileName, f.FileSize, f.ContentType, cid, cfg, f.Tags}, nil
}

// Err reports an error that ended the rows early.
func (s *generationSource) Err() error { return s.err }

// fileFromRow converts a files row into the value phases work with. configs
// caches decoded processing configs by their JSON.
func fileFromRow(r db.File, configs map[string]phases.ProcessingConfig) (phases.File, error) {
	cfg, ok := configs[string(r.ProcessingConfig)]
	if !ok {
		if err := json.Unmarshal(r.ProcessingConfig, &cfg); err != nil {
			return phases.File{}, fmt.Errorf("file %d: reading processing_config: %w", r.ID, err)
		}
		configs[string(r.ProcessingConfig)] = cfg
	}
	// Content types and directories repeat across a whole generation:
	// interned, 100,000 files share a handful of strings instead of holding
	// one copy each.
	f := phases.File{
		ID: r.ID, R2Key: r.R2Key, LogicalPath: r.LogicalPath, FileName: r.FileName, FileSize: r.FileSize,
		ContentType: unique.Make(r.ContentType).Value(), ProcessingConfig: cfg, Tags: r.PreprocessorTags,
		DirectoryPath: unique.Make(r.DirectoryPath).Value(),
	}
	if r.ParentID != nil {
		f.ParentID = *r.ParentID
	}
	if r.CID != nil {
		f.CID = *r.CID
	}
	return f, nil
}
