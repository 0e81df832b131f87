// Package docindex is spec 003's document processor: a document (an
// object of the staging bucket, posted through the API or made by a
// batch's documents phase) is indexed step by step into searchable chunks
// (download and chunk, embeddings, tags, store), each step a bounded run
// of its one River job that commits its output and comes back for the
// next. A batch's document ends as a task does, under the batch's shared
// fan-in lock with a phase_check made sure of (jobs.EndTasks).
package docindex

import (
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/rivertype"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"github.com/arke-institute/orchestrator/db"
	"github.com/arke-institute/orchestrator/embedding"
	"github.com/arke-institute/orchestrator/fanin"
	"github.com/arke-institute/orchestrator/jobs"
	"github.com/arke-institute/orchestrator/metrics"
	"github.com/arke-institute/orchestrator/pause"
	"github.com/arke-institute/orchestrator/phases"
	"github.com/arke-institute/orchestrator/provider"
	"github.com/arke-institute/orchestrator/ratelimit"
	"github.com/arke-institute/orchestrator/search"
	"github.com/arke-institute/orchestrator/tagging"
	"github.com/arke-institute/orchestrator/textchunk"
	"github.com/arke-institute/orchestrator/tracing"
)

// Spec 003's batch sizes and retries.
const (
	// EmbeddingsBatch is how many chunks one embeddings step embeds.
	EmbeddingsBatch = 10
	// TagsBatch is how many chunks one tags step tags.
	TagsBatch = tagging.DefaultBatchSize
	// DocumentRetries is how many transient failures a document survives
	// in all (spec 003's retryCount < 3); the next one fails it.
	DocumentRetries = 3
	// stepDelay is the pause between two steps (spec 003's 100 ms alarm).
	stepDelay = 100 * time.Millisecond
)

// DocumentStepArgs runs the steps of one document version, one bounded
// step per run: download (and chunk), embeddings (EmbeddingsBatch chunks
// a run), tags (TagsBatch a run, then the document's), store. Each run
// commits its step's outcome and snoozes for the next, as spec 003's
// alarm does; a snooze is not an attempt. There is one job per document
// (unique by id), so a retried run redoes only what is not committed.
type DocumentStepArgs struct {
	DocumentID int64 `json:"document_id"`
	// Resume is the document's resumes when the job was queued: a retry's
	// job is not the failed run's, which may still be finishing.
	Resume int32 `json:"resume,omitempty"`
}

// Kind implements river.JobArgs.
func (DocumentStepArgs) Kind() string { return "document_step" }

// InsertOpts makes the job unique per document.
func (DocumentStepArgs) InsertOpts() river.InsertOpts {
	return river.InsertOpts{MaxAttempts: 25, UniqueOpts: river.UniqueOpts{ByArgs: true, ByState: fanin.UniqueUnfinished}}
}

// Providers are what the document steps call: the embeddings and tags
// providers.
type Providers struct {
	Embedder embedding.Embedder
	Tagger   tagging.Tagger
}

// DocumentStepWorker runs DocumentStepArgs: it is the pipeline, which the
// documents executor and the API's document routes use too.
type DocumentStepWorker struct {
	river.WorkerDefaults[DocumentStepArgs]
	deps    jobs.Deps
	cfg     Config
	docs    Providers
	limiter *ratelimit.Limiter // nil: no limit (tests that work one job)
	// phase is the phase a batch's documents belong to: their ends join
	// its fan-in.
	phase string
}

// New is the pipeline with its providers, for the documents of batches in
// phase (and those posted on their own).
func New(deps jobs.Deps, cfg Config, providers Providers, phase string) *DocumentStepWorker {
	return &DocumentStepWorker{deps: deps, cfg: cfg, docs: providers, limiter: ratelimit.New(deps.Pool), phase: phase}
}

// NewUnlimited is New without the providers' shared rate limit, for tests
// that work one job by hand.
func NewUnlimited(deps jobs.Deps, cfg Config, providers Providers, phase string) *DocumentStepWorker {
	return &DocumentStepWorker{deps: deps, cfg: cfg, docs: providers, phase: phase}
}

// Timeout bounds a run: at most one provider call (DOCUMENT_TIMEOUT_MS)
// and its reads and writes. It is also how soon River rescues the job of
// a process that died mid-run: the default job timeout would leave the
// document stalled for five minutes.
func (w *DocumentStepWorker) Timeout(*river.Job[DocumentStepArgs]) time.Duration {
	return RunTimeout(w.cfg.Timeout)
}

// RunTimeout is a step run's bound for a provider call timeout.
func RunTimeout(call time.Duration) time.Duration { return call + 15*time.Second }

// snoozeError asks for the step to run again after wait: no token of the
// provider's shared bucket was free.
type snoozeError struct{ wait time.Duration }

func (e *snoozeError) Error() string { return fmt.Sprintf("provider busy: next token in %s", e.wait) }

// call makes one request to a provider under its role's adaptive bucket
// (bucket, e.g. "embeddings:<host>", "tags:<host>", or a shared
// "embeddings+tags:<host>"), one per provider host for every process, as
// the OCR phase's: a token before, the outcome reported after. Local
// providers are not limited.
func (w *DocumentStepWorker) call(ctx context.Context, bucket ratelimit.RoleBucket, providerName string, fn func() error) error {
	if providerName == "local" || w.limiter == nil {
		return fn()
	}
	key, limit := bucket.Key(providerName), bucket.Limit
	g, err := w.limiter.TakeAdaptive(ctx, key, limit)
	if err != nil {
		return err
	}
	if !g.Granted {
		return &snoozeError{wait: g.Wait}
	}
	err = fn()
	if ctx.Err() != nil {
		return err
	}
	w.deps.Metrics.ProviderRequest(providerName, metrics.ProviderOutcomeOf(err))
	if _, _, rerr := w.limiter.Report(ctx, key, limit, ratelimit.ResultOf(err, g.At)); rerr != nil {
		return rerr
	}
	return err
}

// Work runs the document's current step. A run that fails on the job's
// last attempt fails the document (giveUp): River discards the job, and
// no later run would end the document.
func (w *DocumentStepWorker) Work(ctx context.Context, job *river.Job[DocumentStepArgs]) (err error) {
	ctx, span := w.deps.Tracer.StartWork(ctx, "", tracing.WorkDocument, strconv.FormatInt(job.Args.DocumentID, 10), "document.step",
		attribute.Int("attempt", job.Attempt))
	defer func() {
		if _, ok := errors.AsType[*rivertype.JobSnoozeError](err); ok {
			span.End()
			return
		}
		tracing.End(span, err)
	}()
	err = w.work(ctx, job)
	if err == nil || job.Attempt < job.MaxAttempts || errors.Is(ctx.Err(), context.Canceled) {
		// Done, snoozed or to be retried; or stopped (a shutdown gives the
		// attempt back).
		return err
	}
	if _, ok := errors.AsType[*rivertype.JobSnoozeError](err); ok {
		return err
	}
	reason := fmt.Sprintf("gave up after %d attempts: %v", job.Attempt, err)
	if _, gerr := w.giveUp(context.WithoutCancel(ctx), job.Args.DocumentID, reason); gerr != nil {
		return errors.Join(err, gerr)
	}
	return err
}

// giveUp fails a running document for good with reason, as a failed step
// does, and reports whether it did. It ends a batch's document as a step
// does (endDocument), so the batch's phase sees it ended.
func (w *DocumentStepWorker) giveUp(ctx context.Context, id int64, reason string) (bool, error) {
	client, _ := river.ClientFromContextSafely[pgx.Tx](ctx) // absent only when a test calls Work
	return w.Fail(ctx, client, id, -1, reason)
}

// Why a document failed (documents.failure), as a task's failure says.
const (
	// FailurePermanent is the document or its content: not UTF-8, too
	// large, refused by the provider.
	FailurePermanent = "permanent"
	// FailureInfrastructure is a provider or store that stayed down or
	// rate-limited past TRANSIENT_RETRY_WINDOW, or a step job River gave
	// up on: a retry with mode=infrastructure resumes it.
	FailureInfrastructure = "infrastructure"
)

// Fail fails document id for good with reason in its errors, if it is
// still running (and, with resumes >= 0, not resumed since: its count of
// resumes is that). A batch's document ends under the batch's shared
// fan-in lock with a phase_check made sure of (jobs.EndTasks), as a step
// ends it. It reports whether it failed the document.
func (w *DocumentStepWorker) Fail(ctx context.Context, client *river.Client[pgx.Tx], id int64, resumes int32, reason string) (bool, error) {
	d := w.deps
	doc, err := db.New(d.Pool).DocumentGet(ctx, id)
	if errors.Is(err, pgx.ErrNoRows) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	var (
		failed db.Document
		ended  bool
	)
	end := func(tx pgx.Tx) (bool, error) {
		q := db.New(tx)
		cur, err := q.DocumentGetForUpdate(ctx, id)
		if err != nil {
			return false, err
		}
		if !cur.Status.Open() || resumes >= 0 && cur.Resumes != resumes {
			return false, nil
		}
		failed, err = q.DocumentRecordError(ctx, db.DocumentRecordErrorParams{ID: id, Error: reason, Fail: true, Failure: FailureInfrastructure})
		ended = err == nil
		return ended, err
	}
	if err = w.end(ctx, client, doc, end); err != nil {
		return false, err
	}
	if !ended {
		return false, nil
	}
	took := time.Duration(0)
	if failed.StartedAt != nil && failed.FailedAt != nil {
		took = failed.FailedAt.Sub(*failed.StartedAt)
	}
	d.Metrics.DocumentFinished(metrics.DocumentFailed, took)
	d.Logger.Warn("document failed", "document_id", id, "r2_key", doc.R2Key, "step", failed.CurrentStep, "error", reason)
	return true, nil
}

// work is one run of Work.
func (w *DocumentStepWorker) work(ctx context.Context, job *river.Job[DocumentStepArgs]) error {
	started := time.Now()
	id := job.Args.DocumentID
	q := db.New(w.deps.Pool)
	doc, err := q.DocumentGet(ctx, id)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil // deleted: nothing to do
	}
	if err != nil {
		return err
	}
	if !doc.Status.Open() {
		return nil
	}
	if p, err := w.deps.Pauses.Of(ctx, batchOf(doc), string(phases.DocumentIndexing)); err != nil || p != nil {
		if p != nil {
			return river.JobSnooze(pause.Recheck) // no step while paused
		}
		return err
	}
	if doc.Status == db.DocumentNotStarted {
		if err := q.DocumentStart(ctx, id); err != nil {
			return err
		}
	}
	run := &stepRun{doc: doc, step: doc.CurrentStep, started: started, phase: w.phase, meter: &provider.Meter{}}
	ctx = provider.WithMeter(ctx, run.meter)
	if span := trace.SpanFromContext(ctx); span.IsRecording() {
		span.SetAttributes(attribute.String("document.step", run.step))
		if doc.BatchID != nil {
			w.deps.Tracer.LinkBatch(ctx, *doc.BatchID)
		}
	}
	switch run.step {
	case "download":
		err = w.download(ctx, run)
	case "embeddings":
		err = w.embed(ctx, run)
	case "tags":
		err = w.tag(ctx, run)
	case "store":
		err = w.store(ctx, run)
	default:
		err = permanentf("unknown step %q", run.step)
	}
	if err != nil {
		return w.failed(ctx, run, err)
	}
	w.ran(run, metrics.StepDone)
	if run.completed {
		took := time.Since(started)
		if doc.StartedAt != nil {
			took = time.Since(*doc.StartedAt)
		}
		w.deps.Metrics.DocumentFinished(metrics.DocumentCompleted, took)
		w.deps.Logger.Info("document completed", "document_id", id, "r2_key", doc.R2Key, "chunks", doc.TotalChunks,
			"duration_ms", took.Milliseconds())
		return nil
	}
	return river.JobSnooze(stepDelay)
}

// stepRun is one run of a document's step.
type stepRun struct {
	doc     db.Document // as the run found it
	step    string
	started time.Time
	// phase is the phase the document's usage is counted in; meter sums
	// the run's provider calls, which record commits with the run.
	phase string
	meter *provider.Meter
	// finished says the run finished its step, completed that it
	// completed the document; timing is the step's step_timing entry, once
	// the run recorded itself (record).
	finished, completed bool
	timing              json.RawMessage
}

// stepTiming is a step's entry in documents.step_timing.
type stepTiming struct {
	StartedAt   time.Time  `json:"startedAt"`
	CompletedAt *time.Time `json:"completedAt"`
	Runs        int        `json:"runs"`
	WorkMs      float64    `json:"workMs"`
}

// record adds the run to its step's timing, and its provider calls to its
// batch's usage (the step names the role: embeddings, tags), through q:
// the transaction that commits the run's outcome, so they agree. finished
// says the run
// finished the step; ok that it did its work, so the document is no longer
// failing (documents.failing_since).
func (r *stepRun) record(ctx context.Context, q *db.Queries, finished, ok bool) error {
	ended := time.Now()
	timing, err := q.DocumentRecordStepRun(ctx, db.DocumentRecordStepRunParams{ID: r.doc.ID, Step: r.step, Ok: ok,
		StartedAt: r.started, Finished: finished, EndedAt: ended, WorkMs: float64(ended.Sub(r.started).Microseconds()) / 1000})
	if err != nil {
		return fmt.Errorf("recording the %s step's run: %w", r.step, err)
	}
	if err := q.UsageAddMeter(ctx, batchOf(r.doc), r.phase, r.step, r.meter); err != nil {
		return err
	}
	r.finished, r.timing = finished, timing
	return nil
}

// ran counts a run that ended with outcome (a metrics.Step* constant) and
// logs it: at info level the run that finished a step, with the step's
// runs and times; at debug level the others.
func (w *DocumentStepWorker) ran(run *stepRun, outcome string) {
	took := time.Since(run.started)
	w.deps.Metrics.DocumentStep(run.step, outcome, took)
	attrs := []any{"document_id", run.doc.ID, "r2_key", run.doc.R2Key, "step", run.step, "outcome", outcome, "run_ms", took.Milliseconds()}
	var t stepTiming
	if !run.finished || json.Unmarshal(run.timing, &t) != nil || t.CompletedAt == nil {
		w.deps.Logger.Debug("document step run", attrs...)
		return
	}
	w.deps.Logger.Info("document step finished", append(attrs, "runs", t.Runs, "work_ms", t.WorkMs,
		"duration_ms", t.CompletedAt.Sub(t.StartedAt).Milliseconds())...)
}

// permanentError is a failure no retry mends (not UTF-8, too large,
// missing).
type permanentError struct{ msg string }

func (e *permanentError) Error() string { return e.msg }

func permanentf(format string, args ...any) error {
	return &permanentError{fmt.Sprintf(format, args...)}
}

// failed records a failed step in the document's history and decides:
// a permanent failure (or the provider refusing the key) fails the
// document; a transient one or a 429 is retried by the one rule of
// TRANSIENT_RETRY_WINDOW (provider.Retry: backoff 1, 2, 4 s... up to a
// minute, a 429 after the provider's Retry-After, DocumentRetries granted
// however short the window), and once the document has been failing for
// longer, it fails with the reason ("provider quota exhausted for N min").
func (w *DocumentStepWorker) failed(ctx context.Context, run *stepRun, err error) error {
	doc := run.doc
	// A transaction that failed after the run recorded itself rolled the
	// record back.
	run.finished, run.completed, run.timing = false, false, nil
	if ctx.Err() != nil {
		w.ran(run, metrics.StepRetried)
		return err // the job was stopped: River retries it
	}
	var perm *permanentError
	var snooze *snoozeError
	if errors.As(err, &snooze) {
		w.ran(run, metrics.StepWaited)
		return river.JobSnooze(snooze.wait)
	}
	class := provider.ClassOf(err)
	decision := provider.Decision{Reason: err.Error()}
	if !errors.As(err, &perm) && (class == provider.Transient || class == provider.RateLimited) {
		var since time.Time
		if doc.FailingSince != nil {
			since = *doc.FailingSince
		}
		rule := w.deps.Settings.TransientRetry
		rule.MinRetries = DocumentRetries
		decision = rule.Decide(err, int(doc.RetryCount), since, time.Now())
	}
	if decision.Retry && class == provider.RateLimited {
		// Back-pressure, not in the history: only when the document began
		// failing is recorded.
		if doc.FailingSince == nil {
			if err := db.New(w.deps.Pool).DocumentMarkFailing(ctx, doc.ID); err != nil {
				return err
			}
		}
		w.ran(run, metrics.StepWaited)
		return river.JobSnooze(decision.Wait)
	}
	recorded := err
	if !decision.Retry {
		recorded = errors.New(decision.Reason)
	}
	failure := FailurePermanent
	if !errors.As(err, &perm) && (class == provider.Transient || class == provider.RateLimited) {
		failure = FailureInfrastructure // the provider or the store stayed down past the window
	}
	row, rerr := w.recordError(ctx, run, recorded, !decision.Retry, decision.Counted, failure)
	if rerr != nil {
		return rerr
	}
	attrs := []any{"document_id", doc.ID, "r2_key", doc.R2Key, "step", doc.CurrentStep, "error", recorded}
	if decision.Retry {
		w.ran(run, metrics.StepRetried)
		// Retried: information, not a warning (the failure that ends the
		// document is one).
		w.deps.Logger.Info("document step failed, retrying", append(attrs, "retry_in_ms", decision.Wait.Milliseconds())...)
		return river.JobSnooze(decision.Wait)
	}
	w.ran(run, metrics.StepFailed)
	took := time.Duration(0)
	if row.StartedAt != nil && row.FailedAt != nil {
		took = row.FailedAt.Sub(*row.StartedAt)
	}
	w.deps.Metrics.DocumentFinished(metrics.DocumentFailed, took)
	w.deps.Logger.Warn("document failed", attrs...)
	return nil
}

// recordError adds err to the document's history, and the run to its
// step's timing in the same transaction; with fail it fails the document
// for failure's reason, which ends it (endDocument). row is the document
// as recorded.
func (w *DocumentStepWorker) recordError(ctx context.Context, run *stepRun, err error, fail, counted bool, failure string) (row db.Document, rerr error) {
	record := func(tx pgx.Tx) (err2 error) {
		q := db.New(tx)
		if row, err2 = q.DocumentRecordError(ctx, db.DocumentRecordErrorParams{ID: run.doc.ID, Error: err.Error(), Fail: fail, Counted: counted, Failure: failure}); err2 != nil {
			return err2
		}
		return run.record(ctx, q, false, false)
	}
	if !fail {
		rerr = pgx.BeginFunc(ctx, w.deps.Pool, record)
	} else {
		rerr = w.endDocument(ctx, run.doc, func(tx pgx.Tx) (bool, error) { return true, record(tx) })
	}
	return row, rerr
}

// download reads the document, refuses one over the size cap or not
// UTF-8, and chunks it. Content the key's current version already has is
// not processed again: the new version takes over its chunks and is done.
func (w *DocumentStepWorker) download(ctx context.Context, run *stepRun) error {
	doc, cfg := run.doc, w.cfg
	data, err := w.text(ctx, doc)
	if err != nil {
		return err
	}
	sum := sha256.Sum256(data)
	chunks := textchunk.Split(string(data), textchunk.Options{TargetTokens: cfg.ChunkTokens})
	// Adopting a stored version's chunks ends the document here.
	return w.endDocument(ctx, doc, func(tx pgx.Tx) (adopted bool, err error) {
		q := db.New(tx)
		if err := q.DocumentLockKey(ctx, doc.R2Key); err != nil {
			return false, err
		}
		prev, err := q.DocumentCurrentBySHA(ctx, db.DocumentCurrentBySHAParams{R2Key: doc.R2Key, ContentSha256: sum[:]})
		switch {
		case err == nil:
			if err := adoptChunks(ctx, q, prev, doc, int64(len(data))); err != nil {
				return false, err
			}
			run.completed = true
			return true, run.record(ctx, q, true, true)
		case !errors.Is(err, pgx.ErrNoRows):
			return false, err
		}
		if err := storeChunks(ctx, q, doc, chunks, sum[:], int64(len(data)), cmp.Or(cfg.SearchTextConfig, search.DefaultTextConfig)); err != nil {
			return false, err
		}
		return false, run.record(ctx, q, true, true)
	})
}

// storeChunks writes the chunks of doc's content (of size bytes, hashing
// as sum), with their full-text search vectors as the text search
// configuration textConfig parses them; the next step is embeddings.
func storeChunks(ctx context.Context, q *db.Queries, doc db.Document, chunks []textchunk.Chunk, sum []byte, size int64, textConfig string) error {
	if err := q.DocumentChunksDelete(ctx, doc.ID); err != nil {
		return err
	}
	rows := make([]db.DocumentChunkInsertManyParams, len(chunks))
	for i, c := range chunks {
		rows[i] = db.DocumentChunkInsertManyParams{DocumentID: doc.ID, ChunkIndex: int32(i), Text: c.Text, Heading: c.Heading, Tokens: int32(c.Tokens),
			FirstPage: int32(c.FirstPage), LastPage: int32(c.LastPage)}
	}
	if _, err := q.DocumentChunkInsertMany(ctx, rows); err != nil {
		return err
	}
	if err := q.DocumentChunksSetSearchText(ctx, db.DocumentChunksSetSearchTextParams{DocumentID: doc.ID, TextConfig: textConfig}); err != nil {
		return fmt.Errorf("parsing the chunks' text for full-text search (SEARCH_TEXT_CONFIG %q): %w", textConfig, err)
	}
	return q.DocumentDownloaded(ctx, db.DocumentDownloadedParams{ID: doc.ID, ContentSha256: sum, SizeBytes: &size, TotalChunks: int32(len(chunks))})
}

// adoptChunks makes doc, whose content is prev's, the key's current
// version with prev's chunks and tags, done at once.
func adoptChunks(ctx context.Context, q *db.Queries, prev, doc db.Document, size int64) error {
	if err := q.DocumentChunksDelete(ctx, doc.ID); err != nil {
		return err
	}
	if err := q.DocumentChunksMove(ctx, db.DocumentChunksMoveParams{FromID: prev.ID, ToID: doc.ID}); err != nil {
		return err
	}
	if err := q.DocumentDownloaded(ctx, db.DocumentDownloadedParams{ID: doc.ID, ContentSha256: prev.ContentSha256, SizeBytes: &size, TotalChunks: prev.TotalChunks}); err != nil {
		return err
	}
	if err := q.DocumentSetTags(ctx, db.DocumentSetTagsParams{ID: doc.ID, DocumentTags: prev.DocumentTags}); err != nil {
		return err
	}
	return completeDocument(ctx, q, doc)
}

// embed embeds the next EmbeddingsBatch chunks, or moves on to tags.
func (w *DocumentStepWorker) embed(ctx context.Context, run *stepRun) error {
	doc, q := run.doc, db.New(w.deps.Pool)
	rows, err := q.DocumentChunksInStatus(ctx, db.DocumentChunksInStatusParams{DocumentID: doc.ID, Status: db.DocumentChunkPending, MaxChunks: EmbeddingsBatch})
	if err != nil {
		return err
	}
	if len(rows) == 0 {
		return w.commit(ctx, run, true, func(q *db.Queries) error {
			return q.DocumentSetStep(ctx, db.DocumentSetStepParams{ID: doc.ID, CurrentStep: "tags"})
		})
	}
	texts := make([]string, len(rows))
	for i, r := range rows {
		// The headings in force say what the text is about.
		texts[i] = r.Text
		if r.Heading != "" {
			texts[i] = r.Heading + "\n\n" + r.Text
		}
	}
	var vectors [][]float32
	err = w.call(ctx, w.cfg.Embeddings, w.docs.Embedder.Provider(), func() (err error) {
		vectors, err = w.docs.Embedder.Embed(ctx, texts)
		return err
	})
	if err != nil {
		return err
	}
	model, dims := w.docs.Embedder.Model(), int32(w.docs.Embedder.Dimensions())
	return w.commitChunks(ctx, run, statuses(db.DocumentChunkEmbeddingDone, db.DocumentChunkTagsDone, db.DocumentChunkStored), func(q *db.Queries) error {
		for i, r := range rows {
			if len(vectors[i]) != int(dims) {
				return fmt.Errorf("the embedder %s answered a vector of %d dimensions for chunk %d, want %d", model, len(vectors[i]), r.ChunkIndex, dims)
			}
			if err := q.DocumentChunkSetEmbedding(ctx, db.DocumentChunkSetEmbeddingParams{DocumentID: doc.ID, ChunkIndex: r.ChunkIndex, Embedding: vectors[i],
				EmbeddingModel: model, EmbeddingDims: dims, Signature: search.Signature(vectors[i]), Quantised: search.Quantise(vectors[i])}); err != nil {
				return err
			}
		}
		return nil
	})
}

// tag tags the next TagsBatch chunks, or, when none is left, the document
// from its chunks, and moves on to store.
func (w *DocumentStepWorker) tag(ctx context.Context, run *stepRun) error {
	doc, q := run.doc, db.New(w.deps.Pool)
	rows, err := q.DocumentChunksInStatus(ctx, db.DocumentChunksInStatusParams{DocumentID: doc.ID, Status: db.DocumentChunkEmbeddingDone, MaxChunks: TagsBatch})
	if err != nil {
		return err
	}
	instructions, err := w.instructions(ctx, doc)
	if err != nil {
		return err
	}
	if len(rows) == 0 {
		all, err := q.DocumentChunkTags(ctx, doc.ID)
		if err != nil {
			return err
		}
		texts, tags := make([]string, len(all)), make([][]string, len(all))
		for i, c := range all {
			texts[i], tags[i] = c.Text, c.Tags
		}
		var docTags []string
		err = w.call(ctx, w.cfg.Tags, w.docs.Tagger.Provider(), func() (err error) {
			docTags, err = w.docs.Tagger.TagDocument(ctx, texts, tags, instructions)
			return err
		})
		gaveUp := tagsGivenUp(err)
		if err != nil && !gaveUp {
			return err
		}
		if docTags == nil {
			docTags = []string{}
		}
		return w.commit(ctx, run, true, func(q *db.Queries) error {
			if gaveUp {
				if err := q.DocumentNoteError(ctx, db.DocumentNoteErrorParams{ID: doc.ID, Error: "the document's tags: " + err.Error()}); err != nil {
					return err
				}
			}
			return q.DocumentSetTags(ctx, db.DocumentSetTagsParams{ID: doc.ID, DocumentTags: docTags})
		})
	}
	texts := make([]string, len(rows))
	for i, r := range rows {
		texts[i] = r.Text
	}
	var tags [][]string
	err = w.call(ctx, w.cfg.Tags, w.docs.Tagger.Provider(), func() (err error) {
		tags, err = w.docs.Tagger.TagChunks(ctx, texts, instructions)
		return err
	})
	gaveUp := tagsGivenUp(err)
	if err != nil && !gaveUp {
		return err
	}
	return w.commitChunks(ctx, run, statuses(db.DocumentChunkTagsDone, db.DocumentChunkStored), func(q *db.Queries) error {
		if gaveUp {
			msg := fmt.Sprintf("the tags of chunks %d to %d: %v", rows[0].ChunkIndex, rows[len(rows)-1].ChunkIndex, err)
			if err := q.DocumentNoteError(ctx, db.DocumentNoteErrorParams{ID: doc.ID, Error: msg}); err != nil {
				return err
			}
		}
		for i, r := range rows {
			var t []string
			if i < len(tags) {
				t = tags[i]
			}
			if t == nil {
				t = []string{}
			}
			if err := q.DocumentChunkSetTags(ctx, db.DocumentChunkSetTagsParams{DocumentID: doc.ID, ChunkIndex: r.ChunkIndex, Tags: t}); err != nil {
				return err
			}
		}
		return nil
	})
}

// tagsGivenUp reports that a tags call failed for good in a way that
// concerns the tags alone: an answer that could not be read even after a
// repair prompt, or texts the provider refuses. The chunks (or the
// document) then go on without tags, the error kept in the document's
// history: its text and vectors are searchable all the same. A refused
// key, an outage or a 429 are not given up so; they stop or retry the
// step as any provider failure does.
func tagsGivenUp(err error) bool { return provider.ClassOf(err) == provider.Permanent }

// commit runs write and records the run (finished: it finished its step)
// in one transaction, so the step's outcome and its timing agree.
func (w *DocumentStepWorker) commit(ctx context.Context, run *stepRun, finished bool, write func(q *db.Queries) error) error {
	return pgx.BeginFunc(ctx, w.deps.Pool, func(tx pgx.Tx) error {
		q := db.New(tx)
		if err := write(q); err != nil {
			return err
		}
		return run.record(ctx, q, finished, true)
	})
}

// commitChunks is commit for a run that wrote a batch of chunks: the
// document's processed chunks are recounted as those in a done status.
func (w *DocumentStepWorker) commitChunks(ctx context.Context, run *stepRun, done []string, write func(q *db.Queries) error) error {
	return w.commit(ctx, run, false, func(q *db.Queries) error {
		if err := write(q); err != nil {
			return err
		}
		return q.DocumentCountProcessed(ctx, db.DocumentCountProcessedParams{ID: run.doc.ID, Done: done})
	})
}

// statuses are chunk statuses as the queries take them.
func statuses(ss ...db.DocumentChunkStatus) []string {
	out := make([]string, len(ss))
	for i, s := range ss {
		out[i] = string(s)
	}
	return out
}

// store makes the version its key's current one, in one transaction: its
// chunks become searchable as the previous version's stop being.
func (w *DocumentStepWorker) store(ctx context.Context, run *stepRun) error {
	return w.endDocument(ctx, run.doc, func(tx pgx.Tx) (bool, error) {
		q := db.New(tx)
		if err := q.DocumentLockKey(ctx, run.doc.R2Key); err != nil {
			return false, err
		}
		if err := completeDocument(ctx, q, run.doc); err != nil {
			return false, err
		}
		run.completed = true
		return true, run.record(ctx, q, true, true)
	})
}

// completeDocument stores doc's chunks and makes it its key's current
// version. The caller holds the key's lock.
func completeDocument(ctx context.Context, q *db.Queries, doc db.Document) error {
	if err := q.DocumentUncurrent(ctx, db.DocumentUncurrentParams{R2Key: doc.R2Key, ID: doc.ID}); err != nil {
		return err
	}
	if err := q.DocumentChunksStored(ctx, doc.ID); err != nil {
		return err
	}
	return q.DocumentComplete(ctx, doc.ID)
}

// NewProviders makes the providers cfg names: OpenAI-compatible APIs when
// EMBEDDINGS_API_URL and TAGS_API_URL are set, else the local ones (a
// feature-hashing embedder, a TF-IDF tagger), which need nothing.
func NewProviders(c Config) (Providers, error) {
	var docs Providers
	if c.EmbeddingsAPIURL != "" {
		e, err := embedding.NewOpenAI(embedding.OpenAIConfig{URL: c.EmbeddingsAPIURL, APIKey: c.EmbeddingsAPIKey,
			Model: c.EmbeddingsModel, Dimensions: c.EmbeddingsDimensions, BatchSize: EmbeddingsBatch, Timeout: c.Timeout})
		if err != nil {
			return Providers{}, fmt.Errorf("embeddings provider: %w", err)
		}
		docs.Embedder = e
	} else {
		docs.Embedder = embedding.NewLocal(c.EmbeddingsDimensions)
	}
	if c.TagsAPIURL != "" {
		t, err := tagging.NewOpenAI(tagging.OpenAIConfig{URL: c.TagsAPIURL, APIKey: c.TagsAPIKey, Model: c.TagsModel, Timeout: c.Timeout})
		if err != nil {
			return Providers{}, fmt.Errorf("tags provider: %w", err)
		}
		docs.Tagger = t
	} else {
		docs.Tagger = tagging.Local{}
	}
	return docs, nil
}

// end runs end, which ends doc (stores it, or fails it for good) when it
// reports so, in one transaction. A batch's document ends as a task does,
// under the batch's shared fan-in lock with a phase_check made sure of
// (jobs.EndTasks), so that the phase's end is never missed; any other
// document in a plain transaction.
func (w *DocumentStepWorker) end(ctx context.Context, client *river.Client[pgx.Tx], doc db.Document, end func(tx pgx.Tx) (ended bool, err error)) error {
	if doc.BatchID == nil {
		return pgx.BeginFunc(ctx, w.deps.Pool, func(tx pgx.Tx) error {
			_, err := end(tx)
			return err
		})
	}
	return fanin.EndTasks(ctx, w.deps.Pool, client, fanin.PhaseRef{BatchID: *doc.BatchID, Phase: w.phase}, end)
}

// endDocument is end with the job's River client.
func (w *DocumentStepWorker) endDocument(ctx context.Context, doc db.Document, end func(tx pgx.Tx) (ended bool, err error)) error {
	return w.end(ctx, river.ClientFromContext[pgx.Tx](ctx), doc, end)
}

// batchOf is the id of doc's batch, "" for a document posted alone.
func batchOf(doc db.Document) string {
	if doc.BatchID == nil {
		return ""
	}
	return *doc.BatchID
}
