package chunked

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"github.com/arke-institute/orchestrator/db"
	"github.com/arke-institute/orchestrator/fanin"
	"github.com/arke-institute/orchestrator/jobs"
	"github.com/arke-institute/orchestrator/metrics"
	"github.com/arke-institute/orchestrator/pause"
	"github.com/arke-institute/orchestrator/phases"
	"github.com/arke-institute/orchestrator/provider"
	"github.com/arke-institute/orchestrator/ratelimit"
	"github.com/arke-institute/orchestrator/tracing"
)

// ChunkWorker works ChunkArgs: one run is spec 004's alarm. It takes up
// to MAX_CONCURRENT_PER_ALARM tokens from the provider's shared limiter,
// claims as many items, processes them at once, commits each item's
// outcome as it ends, and snoozes ALARM_INTERVAL_MS (or until the limiter
// has a token) while items remain. A snooze is not an attempt: the job's
// attempts count only failed runs, the chunk's global retries.
//
// A crashed run (kill -9) leaves its claimed items processing and its job
// running; River rescues the job once its Timeout has passed, and the next
// run puts those items back first (ChunkItemReleaseClaims). An item whose
// outcome was committed is never claimed again.
type ChunkWorker struct {
	river.WorkerDefaults[ChunkArgs]
	deps    jobs.Deps
	limiter *ratelimit.Limiter
	engines map[string]Engine
}

// Timeout bounds a run: its items' calls (the engine's timeout) and their
// reads and writes. It is also how soon River rescues the job of a process
// that died (River waits for both this and RescueStuckJobsAfter).
func (w *ChunkWorker) Timeout(job *river.Job[ChunkArgs]) time.Duration {
	if job == nil {
		return jobs.ShortTimeout
	}
	return runTimeout(w.engine(job.Args).Tuning().Timeout)
}

// runTimeout is a chunk run's bound for an engine call timeout: items are
// started for runBudget, each may take the call's timeout, and the rest
// of 15 s is left for reads and writes.
func runTimeout(call time.Duration) time.Duration { return call + 15*time.Second }

// engine is the engine of a's phase.
func (w *ChunkWorker) engine(a ChunkArgs) Engine {
	p, _ := phases.Get(phases.Name(a.Phase))
	if p == nil {
		return unknownPhase{a.Phase}
	}
	return w.engines[p.Spec().Engine]
}

// NextRetry retries a failed run within seconds (2, 4, 8, 16, 30 s).
func (w *ChunkWorker) NextRetry(job *river.Job[ChunkArgs]) time.Time {
	return time.Now().Add(jobs.Backoff(job.Attempt, 30*time.Second))
}

// chunkRun is one run of a chunk's job.
type chunkRun struct {
	w      *ChunkWorker
	args   ChunkArgs
	engine Engine
	cfg    Tuning
	key    string // the limiter's key
	// instructions are the batch's own for every AI call, read at the
	// run's start.
	instructions string
}

// retryRule is how the chunk's items retry the provider's transient
// failures and 429s: TRANSIENT_RETRY_WINDOW, with MAX_RETRIES_PER_REF
// retries granted however short the window.
func (r chunkRun) retryRule() provider.Retry {
	rule := r.w.deps.Settings.TransientRetry
	rule.MinRetries = r.cfg.MaxRetriesPerRef
	return rule
}

func (r chunkRun) params() (batchID, phase, chunkID string) {
	return r.args.BatchID, r.args.Phase, r.args.ChunkID
}

// Work runs the chunk once. A run that fails counts against the chunk's
// global retries; the last one ends the chunk ERROR, its settled items
// kept.
func (w *ChunkWorker) Work(ctx context.Context, job *river.Job[ChunkArgs]) (err error) {
	ctx, span := w.deps.Tracer.StartWork(ctx, job.Args.BatchID, tracing.WorkChunk, job.Args.BatchID+"/"+job.Args.Phase+"/"+job.Args.ChunkID, "chunk.run",
		tracing.PhaseKey.String(job.Args.Phase), attribute.Int("attempt", job.Attempt))
	defer func() { endRun(span, err) }()
	eng := w.engine(job.Args)
	run := chunkRun{w: w, args: job.Args, engine: eng, cfg: eng.Tuning(), key: eng.LimitKey(job.Args.BatchID, job.Args.ChunkID)}
	err = run.work(ctx)
	if err == nil {
		return nil
	}
	if _, ok := errors.AsType[*river.JobSnoozeError](err); ok {
		return err
	}
	a := job.Args
	msg := err.Error()
	if cerr := db.New(w.deps.Pool).ChunkCountFailure(context.WithoutCancel(ctx), db.ChunkCountFailureParams{
		BatchID: a.BatchID, Phase: a.Phase, ChunkID: a.ChunkID, Error: &msg,
	}); cerr != nil {
		w.deps.Logger.Warn("counting a chunk's failure", "batch_id", a.BatchID, "chunk_id", a.ChunkID, "error", cerr)
	}
	if job.Attempt < job.MaxAttempts {
		return err
	}
	if ferr := run.finish(ctx, fmt.Sprintf("chunk failed after %d attempts: %v", job.Attempt, err)); ferr != nil {
		return ferr
	}
	return nil
}

// endRun ends a run's span: a snooze (the run comes back) is no failure.
func endRun(span trace.Span, err error) {
	if _, ok := errors.AsType[*river.JobSnoozeError](err); ok {
		span.SetAttributes(attribute.Bool("snooze", true))
		err = nil
	}
	tracing.End(span, err)
}

func (r chunkRun) work(ctx context.Context) error {
	batchID, phase, chunkID := r.params()
	q := db.New(r.w.deps.Pool)
	chunk, err := q.ChunkGet(ctx, db.ChunkGetParams{BatchID: batchID, Phase: phase, ChunkID: chunkID})
	if errors.Is(err, pgx.ErrNoRows) {
		return nil // the batch is gone
	}
	if err != nil {
		return fmt.Errorf("loading chunk %s of %s: %w", chunkID, batchID, err)
	}
	if chunkTerminal(chunk.State) {
		return nil
	}
	batch, err := r.w.deps.JobBatch(ctx, batchID)
	if err != nil {
		return err
	}
	if batch.Status != phase {
		return nil // reset or failed: the chunk waits for a retry to enqueue it again
	}
	if p, err := r.w.deps.Pauses.Of(ctx, batchID, phase); err != nil || p != nil {
		if p != nil {
			return river.JobSnooze(pause.Recheck) // no provider call while paused
		}
		return err
	}
	if chunk.State == db.ChunkPending {
		if err := r.start(ctx); err != nil {
			return err
		}
	}
	if _, err := q.ChunkItemReleaseClaims(ctx, db.ChunkItemReleaseClaimsParams{BatchID: batchID, Phase: phase, ChunkID: chunkID}); err != nil {
		return fmt.Errorf("releasing chunk %s's claims: %w", chunkID, err)
	}
	prog, err := q.ChunkItemProgress(ctx, db.ChunkItemProgressParams{BatchID: batchID, Phase: phase, ChunkID: chunkID})
	if err != nil {
		return err
	}
	if prog.Pending == 0 {
		return r.finish(ctx, "")
	}
	if prog.NextDue.After(prog.Now) {
		return river.JobSnooze(prog.NextDue.Sub(prog.Now)) // every pending item is backing off
	}

	if r.instructions, err = q.BatchGeneralPrompt(ctx, batchID); err != nil {
		return fmt.Errorf("reading the instructions of batch %s: %w", batchID, err)
	}
	wait, stopWith, err := r.keepBusy(ctx)
	if err != nil {
		return err
	}
	if stopWith != "" {
		return r.finish(ctx, stopWith)
	}
	prog, err = q.ChunkItemProgress(ctx, db.ChunkItemProgressParams{BatchID: batchID, Phase: phase, ChunkID: chunkID})
	if err != nil {
		return err
	}
	if prog.Pending+prog.Processing == 0 {
		return r.finish(ctx, "")
	}
	if wait > 0 {
		return river.JobSnooze(jitter(wait, r.cfg.AlarmInterval))
	}
	return river.JobSnooze(r.cfg.AlarmInterval)
}

// runBudget is how long a run of a chunk job goes on starting items; the
// items it started then finish, within their call's timeout. Runs end so
// that River's rescue of a dead process's job, which waits for the run's
// Timeout (the call's plus 15 s), stays prompt, and so that the chunks of
// other batches get their turn at the workers.
const runBudget = 5 * time.Second

// exchangeEvery spaces a run's exchanges with the limiter: the outcomes
// of the items that ended and the tokens for as many new ones, in one
// transaction, at most this often, so the bucket's row sees a few
// transactions a second per chunk rather than two per request.
const exchangeEvery = 50 * time.Millisecond

// ended is an item's end, as its goroutine hands it back to the run.
type ended struct {
	called bool
	result ratelimit.Result
	stop   string
	err    error
}

// keepBusy keeps MAX_CONCURRENT_PER_ALARM items of the chunk going for up
// to runBudget: as each ends, the next is started with a token of the
// provider's bucket, so a slow item holds its own slot and no other. It
// returns when none is in flight: the run's budget spent, the chunk's
// pending items all claimed (the rest backing off or done), or the bucket
// empty for longer than a pause, when wait says how long until its next
// token. stopWith is set when the chunk must stop (an item's stop); err
// is the first failure to exchange with the limiter or commit an item,
// which fails the run once its items in flight have ended.
func (r chunkRun) keepBusy(ctx context.Context) (wait time.Duration, stopWith string, err error) {
	slots := r.cfg.MaxConcurrentPerAlarm
	done := make(chan ended, slots)
	var (
		inflight  int
		results   []ratelimit.Result
		exhausted bool // no pending item was left to claim
		lastSwap  time.Time
	)
	budget := time.Now().Add(runBudget)
	collect := func(e ended) {
		inflight--
		if e.called {
			results = append(results, e.result)
		}
		if e.err != nil && err == nil {
			err = e.err
		}
		if e.stop != "" && stopWith == "" {
			stopWith = e.stop
		}
	}
	for {
		starting := !exhausted && stopWith == "" && err == nil && ctx.Err() == nil && time.Now().Before(budget)
		want := 0
		if starting {
			want = slots - inflight
		}
		wait = 0
		if want > 0 || (len(results) > 0 && inflight == 0) || len(results) >= slots {
			if pause := exchangeEvery - time.Since(lastSwap); pause > 0 && inflight > 0 {
				// Too soon after the last exchange: let more items end first.
				select {
				case e := <-done:
					collect(e)
					continue
				case <-time.After(pause):
				}
			}
			lastSwap = time.Now()
			granted, grant, xerr := r.exchange(ctx, results, want)
			results = results[:0]
			if xerr != nil && err == nil {
				err = xerr
			}
			if granted > 0 {
				n, cerr := r.launch(ctx, granted, grant, done)
				inflight += n
				if cerr != nil && err == nil {
					err = cerr
				}
				exhausted = n < granted
			}
			if granted < want {
				wait = grant.Wait
			}
		}
		if inflight == 0 {
			return wait, stopWith, err
		}
		var next <-chan time.Time
		if starting && wait > 0 && inflight < slots {
			next = time.After(max(wait, exchangeEvery))
		}
		select {
		case e := <-done:
			collect(e)
		case <-next:
		}
	}
}

// exchange reports the outcomes of the items that ended and takes up to
// want tokens (see ratelimit.Exchange); a change of the bucket's shape is
// recorded as an event of this chunk's batch (one per exchange that
// changed it, not one per request) and in the metrics. A run cut short
// still reports.
func (r chunkRun) exchange(ctx context.Context, results []ratelimit.Result, want int) (int, ratelimit.Grant, error) {
	if want == 0 {
		ctx = context.WithoutCancel(ctx)
	}
	x, err := r.w.limiter.Exchange(ctx, r.key, r.cfg.Limit, results, want)
	if err != nil {
		return 0, ratelimit.Grant{}, err
	}
	b := x.Bucket
	if len(results) > 0 {
		r.w.deps.Metrics.RateLimitShape(r.key, b.RefillRate, b.MaxTokens)
	}
	if !x.Changed {
		return x.Granted, x.Grant, nil
	}
	batchID, phase, chunkID := r.params()
	data := map[string]any{"key": r.key, "max_tokens": b.MaxTokens, "rps": b.RefillRate, "chunk_id": chunkID}
	if x.Slowed {
		data["cause"] = "rate_limited"
		if b.BackoffUntil.After(x.At) {
			data["backoff_until"] = b.BackoffUntil
		}
	} else {
		data["cause"] = "successes"
	}
	r.w.deps.Logger.Info("rate limit changed", "key", r.key, "max_tokens", b.MaxTokens, "rps", b.RefillRate, "cause", data["cause"])
	err = db.New(r.w.deps.Pool).EventRecord(context.WithoutCancel(ctx), db.Event{BatchID: batchID, Type: db.EventRateLimitChanged, Phase: phase, TaskID: chunkID, Data: data})
	return x.Granted, x.Grant, err
}

// launch claims up to n pending items and starts each in a goroutine of
// its own with its token, which hands its end to done; started is how
// many it claimed (fewer when fewer were pending: their tokens go unused).
func (r chunkRun) launch(ctx context.Context, n int, grant ratelimit.Grant, done chan<- ended) (started int, err error) {
	batchID, phase, chunkID := r.params()
	items, err := db.New(r.w.deps.Pool).ChunkItemClaimPending(ctx, db.ChunkItemClaimPendingParams{
		BatchID: batchID, Phase: phase, ChunkID: chunkID, MaxItems: int32(n),
	})
	if err != nil {
		return 0, fmt.Errorf("claiming items of chunk %s: %w", chunkID, err)
	}
	for _, it := range items {
		go func() { done <- r.item(ctx, it, grant) }()
	}
	return len(items), nil
}

// jitter is wait, at least min, plus up to half of min at random: the
// chunks that found the limiter empty do not all come back at once.
func jitter(wait, least time.Duration) time.Duration {
	return max(wait, least) + time.Duration(rand.Int64N(int64(least)/2+1))
}

// chunkTerminal reports whether a chunk in state has ended.
func chunkTerminal(state db.ChunkState) bool { return state == db.ChunkDone || state == db.ChunkError }

// start moves a new chunk through FETCHING (its items are rows already:
// nothing to fetch; each item's ref is read as it is processed) to
// PROCESSING, and records that it started.
func (r chunkRun) start(ctx context.Context) error {
	batchID, phase, chunkID := r.params()
	return pgx.BeginFunc(ctx, r.w.deps.Pool, func(tx pgx.Tx) error {
		q := db.New(tx)
		for _, state := range []db.ChunkState{db.ChunkFetching, db.ChunkProcessing} {
			if _, err := q.ChunkSetState(ctx, db.ChunkSetStateParams{BatchID: batchID, Phase: phase, ChunkID: chunkID, State: state}); err != nil {
				return fmt.Errorf("starting chunk %s: %w", chunkID, err)
			}
		}
		return q.EventRecord(ctx, db.Event{BatchID: batchID, Type: db.EventChunkStarted, Phase: phase, TaskID: chunkID,
			Data: map[string]any{"chunk_id": chunkID, "limiter": r.key}})
	})
}

// item processes one claimed item with its token and commits its outcome;
// its end carries the outcome for the limiter when the provider was
// called, a stop when the whole chunk must stop (the provider refused the
// key), and an error only for a failure to commit.
func (r chunkRun) item(ctx context.Context, it db.ChunkItem, grant ratelimit.Grant) (e ended) {
	batchID, phase, chunkID := r.params()
	w := r.w
	ctx, span := w.deps.Tracer.StartWork(ctx, batchID, tracing.WorkChunk, batchID+"/"+phase+"/"+chunkID, "chunk.item",
		attribute.Int("item", int(it.ItemIndex)), attribute.String("r2_key", it.R2Key))
	defer span.End()
	meter := &provider.Meter{} // what the item's calls consumed, committed with its outcome
	out := r.engine.Process(provider.WithMeter(ctx, meter), Item{BatchID: batchID, ChunkID: chunkID, Index: it.ItemIndex, R2Key: it.R2Key, Instructions: r.instructions})
	cut := ctx.Err() != nil // the run was cut short (timeout, shutdown): not the item's fault
	if out.Called && !cut {
		e.called, e.result = true, ratelimit.ResultOf(out.Err, grant.At)
		if e.result.Outcome == ratelimit.RateLimited && out.RetryAfter > e.result.RetryAfter {
			e.result.RetryAfter = out.RetryAfter
		}
		w.deps.Metrics.ProviderRequest(r.engine.Provider(), metrics.ProviderOutcomeOf(out.Err))
	}
	ctx = context.WithoutCancel(ctx) // the outcome is committed even if the run is cut short now
	key := db.ChunkItemSetPendingParams{BatchID: batchID, Phase: phase, ChunkID: chunkID, ItemIndex: it.ItemIndex}
	class := provider.ClassOf(out.Err)
	var retry provider.Decision
	if class == provider.Transient || class == provider.RateLimited {
		var since time.Time
		if it.FailingSince != nil {
			since = *it.FailingSince
		}
		retry = r.retryRule().Decide(out.Err, int(it.RetryCount), since, time.Now())
		if class == provider.RateLimited {
			retry.Wait = 0 // the limiter's backoff paces the phase's calls
		}
	}
	err := pgx.BeginFunc(ctx, w.deps.Pool, func(tx pgx.Tx) error {
		var err error
		q := db.New(tx)
		if e.stop, err = r.settle(ctx, q, it, out, key, cut, retry); err != nil {
			return err
		}
		return q.UsageAddMeter(ctx, batchID, phase, r.engine.Name(), meter)
	})
	if err != nil {
		e.err = fmt.Errorf("recording item %d of chunk %s: %w", it.ItemIndex, chunkID, err)
	}
	return e
}

// settle writes an item's outcome through q: done, failed, retried later,
// or back to pending (a run cut short, a refused key: then stop says why
// the chunk stops).
func (r chunkRun) settle(ctx context.Context, q *db.Queries, it db.ChunkItem, out Outcome, key db.ChunkItemSetPendingParams, cut bool, retry provider.Decision) (stop string, err error) {
	batchID, phase, chunkID := r.params()
	w := r.w
	msg := ""
	if out.Err != nil {
		msg = out.Err.Error()
	}
	class := provider.ClassOf(out.Err)
	switch {
	case out.Err != nil && cut:
		_, err = q.ChunkItemSetPending(ctx, key)
	case out.Err == nil:
		_, err = q.ChunkItemSetDone(ctx, db.ChunkItemSetDoneParams{BatchID: batchID, Phase: phase, ChunkID: chunkID, ItemIndex: it.ItemIndex,
			Result: out.Result})
		w.deps.Metrics.ChunkItemsFinished(phase, metrics.ItemDone, 1)
	case class == provider.Auth:
		_, err = q.ChunkItemSetPending(ctx, key)
		stop = "the provider refused the request: " + msg
	case retry.Retry:
		_, err = q.ChunkItemSetRetry(ctx, db.ChunkItemSetRetryParams{BatchID: batchID, Phase: phase, ChunkID: chunkID, ItemIndex: it.ItemIndex,
			Error: &msg, Counted: retry.Counted, BackoffSecs: retry.Wait.Seconds()})
	default:
		failure := "permanent" // the provider refused the image
		if retry.Reason != "" {
			msg, failure = retry.Reason, "infrastructure" // retried for TRANSIENT_RETRY_WINDOW
		}
		_, err = q.ChunkItemSetError(ctx, db.ChunkItemSetErrorParams{BatchID: batchID, Phase: phase, ChunkID: chunkID, ItemIndex: it.ItemIndex, Error: &msg, Failure: failure})
		w.deps.Metrics.ChunkItemsFinished(phase, metrics.ItemFailed, 1)
	}
	return stop, err
}

// finish ends the chunk: PUBLISHING (each done item's ref was written as
// it ended; this records the chunk's outcome, spec 004's callback body, as
// its chunk.completed event), then DONE, or ERROR when stopWith says why
// the chunk stopped or more than OCR_MAX_FAILED_FRACTION of its items
// failed. The end joins the fan-in as a task's callback does (EndTasks):
// under the batch's shared lock, it makes sure a phase_check runs.
func (r chunkRun) finish(ctx context.Context, stopWith string) error {
	batchID, phase, chunkID := r.params()
	w := r.w
	q := db.New(w.deps.Pool)
	if _, err := q.ChunkSetState(ctx, db.ChunkSetStateParams{BatchID: batchID, Phase: phase, ChunkID: chunkID, State: db.ChunkPublishing}); err != nil {
		return err
	}
	chunk, err := q.ChunkGet(ctx, db.ChunkGetParams{BatchID: batchID, Phase: phase, ChunkID: chunkID})
	if err != nil {
		return err
	}
	groups, err := q.ChunkItemGroupResults(ctx, db.ChunkItemGroupResultsParams{BatchID: batchID, Phase: phase, ChunkID: chunkID})
	if err != nil {
		return err
	}
	state, errMsg := db.ChunkDone, stopWith
	if limit := r.cfg.MaxFailedFraction; errMsg == "" && chunk.TotalRefs > 0 && float64(chunk.Failed) > limit*float64(chunk.TotalRefs) {
		errMsg = fmt.Sprintf("%d of %d refs failed (more than %s %g)", chunk.Failed, chunk.TotalRefs, failedFractionSetting(phase), limit)
	}
	if errMsg != "" {
		state = db.ChunkError
	}
	body := chunkCallback(chunk, groups, errMsg)
	return fanin.EndTasks(ctx, w.deps.Pool, river.ClientFromContext[pgx.Tx](ctx), fanin.PhaseRef{BatchID: batchID, Phase: phase}, func(tx pgx.Tx) (bool, error) {
		var e *string
		if errMsg != "" {
			e = &errMsg
		}
		n, err := db.New(tx).ChunkSetState(ctx, db.ChunkSetStateParams{BatchID: batchID, Phase: phase, ChunkID: chunkID, State: state, Error: e})
		if err != nil || n == 0 {
			return false, err
		}
		typ := db.EventChunkCompleted
		if state == db.ChunkError {
			typ = db.EventChunkFailed
		}
		body.Summary.ProcessingTimeMS = time.Since(derefTime(chunk.StartedAt)).Milliseconds()
		return true, db.New(tx).EventRecord(ctx, db.Event{BatchID: batchID, Type: typ, Phase: phase, TaskID: chunkID, Data: body})
	})
}

func derefTime(t *time.Time) time.Time {
	if t == nil {
		return time.Now()
	}
	return *t
}

// ChunkCallback is spec 004's chunk callback body, which our chunks record
// as their chunk.completed (or chunk.failed) event: per directory group
// (spec 004's PI) the refs completed and failed, and a summary.
type ChunkCallback struct {
	BatchID string        `json:"batch_id"`
	ChunkID string        `json:"chunk_id"`
	Status  string        `json:"status"` // success | partial | error
	Results []GroupResult `json:"results"`
	Summary ChunkSummary  `json:"summary"`
	Error   string        `json:"error,omitempty"`
}

// GroupResult is one directory group's outcome in a chunk.
type GroupResult struct {
	PI            string      `json:"pi"` // the directory path
	Status        string      `json:"status"`
	RefsCompleted int64       `json:"refs_completed"`
	RefsFailed    int64       `json:"refs_failed"`
	RefsSkipped   int64       `json:"refs_skipped"`
	FailedRefs    []FailedRef `json:"failed_refs,omitempty"`
}

// FailedRef is a ref that failed, with why.
type FailedRef struct {
	Filename string `json:"filename"`
	Error    string `json:"error"`
}

// ChunkSummary counts a chunk's refs.
type ChunkSummary struct {
	TotalRefs        int32 `json:"total_refs"`
	Completed        int32 `json:"completed"`
	Failed           int32 `json:"failed"`
	Skipped          int32 `json:"skipped"`
	ProcessingTimeMS int64 `json:"processing_time_ms"`
}

func chunkCallback(c db.Chunk, groups []db.ChunkItemGroupResultsRow, errMsg string) ChunkCallback {
	out := ChunkCallback{BatchID: c.BatchID, ChunkID: c.ChunkID, Status: resultStatus(int64(c.Failed), int64(c.TotalRefs-c.Skipped)),
		Summary: ChunkSummary{TotalRefs: c.TotalRefs, Completed: c.Completed, Failed: c.Failed, Skipped: c.Skipped}, Error: errMsg}
	if errMsg != "" {
		out.Status = "error"
	}
	for _, g := range groups {
		gr := GroupResult{PI: g.DirectoryPath, Status: resultStatus(g.Failed, g.Total-g.Skipped),
			RefsCompleted: g.Completed, RefsFailed: g.Failed, RefsSkipped: g.Skipped}
		_ = json.Unmarshal(g.FailedRefs, &gr.FailedRefs)
		out.Results = append(out.Results, gr)
	}
	return out
}

// resultStatus is spec 004's status of a group of sent refs: success when
// none failed, error when all did, partial in between.
func resultStatus(failed, sent int64) string {
	switch {
	case failed == 0:
		return "success"
	case failed >= sent:
		return "error"
	default:
		return "partial"
	}
}

// failedFractionSetting names the setting of a phase's largest share of
// failed items: <SHORT>_MAX_FAILED_FRACTION (OCR_MAX_FAILED_FRACTION).
func failedFractionSetting(phase string) string {
	if p, ok := phases.Get(phases.Name(phase)); ok {
		return p.Spec().Short + "_MAX_FAILED_FRACTION"
	}
	return "the phase's largest share of failed items"
}

// unknownPhase is the engine of a chunk whose phase is no longer
// registered: every item fails with why.
type unknownPhase struct{ phase string }

func (u unknownPhase) Name() string                { return "" }
func (u unknownPhase) Provider() string            { return "none" }
func (u unknownPhase) LimitKey(_, _ string) string { return "unknown:" + u.phase }
func (u unknownPhase) Tuning() Tuning {
	return Tuning{Limit: ratelimit.Adaptive{InitialMaxTokens: 1, InitialRefillRate: 1, MaxMaxTokens: 1, MaxRefillRate: 1, MinMaxTokens: 1, MinRefillRate: 1}, Timeout: time.Second, MaxConcurrentPerAlarm: 1, AlarmInterval: time.Second, Workers: 1}
}
func (u unknownPhase) Process(context.Context, Item) Outcome {
	return Outcome{Err: &provider.Error{Class: provider.Auth, Message: "the chunk's phase " + u.phase + " is not registered"}}
}
