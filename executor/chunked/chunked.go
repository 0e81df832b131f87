// Package chunked is the executor that processes a phase's items
// in-process, in chunks (spec 004's OCR): entering the phase writes its
// chunks and their items (phases.Chunker packs them) and enqueues one
// ChunkArgs job per chunk, in the phase's own queue. A chunk job settles
// a few items per run with the phase's Engine, under the engine's
// provider's adaptive rate limit that every process shares, and snoozes
// between runs; the run that finds none left ends the chunk under the
// batch's shared fan-in lock and makes sure a phase_check runs
// (jobs.EndTasks), as a task's callback does. The check counts the
// phase's open chunks, and the transform reads each file's item as its
// task, its result the engine's.
//
// The executor knows nothing of what an item is: OCR is one chunked phase,
// with its own engine (package ocrrefs) and limiter key; a second chunked
// phase brings its engine and touches none of this.
package chunked

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river"

	"github.com/arke-institute/orchestrator/db"
	"github.com/arke-institute/orchestrator/fanin"
	"github.com/arke-institute/orchestrator/jobs"
	"github.com/arke-institute/orchestrator/metrics"
	"github.com/arke-institute/orchestrator/phases"
	"github.com/arke-institute/orchestrator/ratelimit"
)

// Kind is the executor's name in phases.Spec.Executor.
const Kind = "chunked"

// Executor runs the phases whose Spec.Executor is Kind, each with the
// engine its Spec.Engine names.
type Executor struct {
	deps    jobs.Deps
	cfg     Config
	limiter *ratelimit.Limiter
	engines map[string]Engine
}

var (
	_ jobs.Executor = (*Executor)(nil)
	_ jobs.Router   = (*Executor)(nil)
	_ jobs.Viewer   = (*Executor)(nil)
)

// New returns the executor of cfg with its engines.
func New(deps jobs.Deps, cfg Config, engines ...Engine) *Executor {
	e := &Executor{deps: deps, cfg: cfg, limiter: ratelimit.New(deps.Pool), engines: map[string]Engine{}}
	for _, eng := range engines {
		e.engines[eng.Name()] = eng
	}
	return e
}

// Kind is Kind.
func (e *Executor) Kind() string { return Kind }

// PausedKinds implements jobs.Pausable: while paused, a chunk sends nothing to its provider.
func (e *Executor) PausedKinds() []string { return []string{ChunkArgs{}.Kind()} }

// Check refuses a phase that makes no chunks, has no chunk size, or whose
// engine is not registered.
func (e *Executor) Check(p phases.Phase) error {
	s := p.Spec()
	if _, ok := p.(phases.Chunker); !ok {
		return errors.New("a chunked phase must make chunks (phases.Chunker)")
	}
	if s.Defaults.ChunkSize.Groups <= 0 || s.Defaults.ChunkSize.Refs <= 0 {
		return errors.New("a chunked phase needs a default chunk size")
	}
	if _, ok := e.engines[s.Engine]; !ok {
		return fmt.Errorf("no engine %q is registered for it", s.Engine)
	}
	return nil
}

// Jobs registers the chunk jobs, in each chunked phase's queue.
func (e *Executor) Jobs(w *river.Workers) jobs.Jobs {
	river.AddWorker(w, &ChunkWorker{deps: e.deps, limiter: e.limiter, engines: e.engines})
	out := jobs.Jobs{Queues: map[string]river.QueueConfig{}, Timeout: jobs.ShortTimeout}
	for _, p := range e.deps.Executors.PhasesOf(Kind) {
		st := e.engines[p.Spec().Engine].Tuning()
		out.Queues[Queue(p.Spec().Name)] = river.QueueConfig{MaxWorkers: st.Workers}
		out.Timeout = min(out.Timeout, runTimeout(st.Timeout))
	}
	return out
}

// ChunkArgs is one chunk of a batch's chunked phase. Unique while
// unfinished: one run of a chunk's job at a time, which is what lets a run
// take every item left processing as a crashed run's leftover.
type ChunkArgs struct {
	BatchID string `json:"batch_id"`
	Phase   string `json:"phase"`
	ChunkID string `json:"chunk_id"`
}

// Kind is the River job kind.
func (ChunkArgs) Kind() string { return "chunk" }

// InsertOpts puts the job in its phase's queue (Queue), unique while
// unfinished. Its attempts are the chunk's global retries, set when it is
// enqueued (chunkParams).
func (a ChunkArgs) InsertOpts() river.InsertOpts {
	return river.InsertOpts{Queue: Queue(phases.Name(a.Phase)),
		UniqueOpts: river.UniqueOpts{ByArgs: true, ByState: fanin.UniqueUnfinished}}
}

// Queues are the River queues of the chunked phases' chunk jobs: of the
// phases whose spec runs on this kind (no setting moves a phase onto it).
func Queues() []string {
	var out []string
	for _, p := range phases.All() {
		if p.Spec().Executor == Kind {
			out = append(out, Queue(p.Spec().Name))
		}
	}
	return out
}

// Queue is the River queue of a chunked phase's chunk jobs: its short
// name in lower case ("ocr"). A process started with only that queue
// (`orchestrator serve -queues ocr`) works chunks and nothing else.
func Queue(phase phases.Name) string {
	p, ok := phases.Get(phase)
	if !ok {
		return river.QueueDefault
	}
	return strings.ToLower(p.Spec().Short)
}

// chunkParams are the insert parameters of the jobs of chunks ids of a
// batch's phase: maxAttempts is one run plus the chunk's global retries.
func chunkParams(batchID string, phase phases.Name, ids []string, maxAttempts int) []river.InsertManyParams {
	params := make([]river.InsertManyParams, 0, len(ids))
	for _, id := range ids {
		args := ChunkArgs{BatchID: batchID, Phase: string(phase), ChunkID: id}
		opts := args.InsertOpts()
		opts.MaxAttempts = maxAttempts
		params = append(params, river.InsertManyParams{Args: args, InsertOpts: &opts})
	}
	return params
}

// Enter packs files (the stored generation) into chunks (phases.Chunker),
// writes them and their items (a skipped item is written settled, and
// counted), and enqueues a job per chunk. The chunks of a phase entered
// again (a DONE batch retried) are numbered on from those of its earlier
// run, which stay.
func (e *Executor) Enter(ctx context.Context, tx jobs.Tx, at jobs.PhaseAt, files []phases.File) (map[string]any, error) {
	q := tx.Queries()
	batchID, name := at.BatchID, at.Phase.Spec().Name
	eng := e.engines[at.Phase.Spec().Engine]
	chunks := at.Phase.(phases.Chunker).Chunks(files, e.cfg.ChunkSize[name])
	earlier, err := q.ChunkSummary(ctx, db.ChunkSummaryParams{BatchID: batchID, Phase: string(name)})
	if err != nil {
		return nil, fmt.Errorf("counting earlier chunks of %s %s: %w", batchID, name, err)
	}
	if earlier.ChunksTotal > 0 {
		for i := range chunks {
			chunks[i].ID = strconv.Itoa(int(earlier.ChunksTotal) + i)
		}
	}
	rows := make([]db.ChunkInsertManyParams, 0, len(chunks))
	var items []db.ChunkItemInsertManyParams
	ids := make([]string, 0, len(chunks))
	refs, skipped := 0, 0
	for _, c := range chunks {
		row := db.ChunkInsertManyParams{BatchID: batchID, Phase: string(name), ChunkID: c.ID, TotalRefs: int32(len(c.Items))}
		for i, it := range c.Items {
			item := db.ChunkItemInsertManyParams{
				BatchID: batchID, Phase: string(name), ChunkID: c.ID, ItemIndex: int32(i),
				DirectoryPath: it.Ref.DirectoryPath, FileID: it.Ref.ID, R2Key: it.Ref.R2Key, Status: db.ItemPending,
			}
			if it.SkipReason != "" {
				item.Status, item.Error = db.ItemSkipped, &it.SkipReason
				row.Skipped++
			}
			items = append(items, item)
		}
		refs += len(c.Items)
		skipped += int(row.Skipped)
		rows = append(rows, row)
		ids = append(ids, c.ID)
	}
	if _, err := q.ChunkInsertMany(ctx, rows); err != nil {
		return nil, fmt.Errorf("inserting %d chunks of %s: %w", len(rows), name, err)
	}
	if _, err := q.ChunkItemInsertMany(ctx, items); err != nil {
		return nil, fmt.Errorf("inserting %d chunk items of %s: %w", len(items), name, err)
	}
	e.deps.Metrics.ChunkItemsFinished(string(name), metrics.ItemSkipped, skipped)
	if _, err := tx.River.InsertManyTx(ctx, tx.Tx, chunkParams(batchID, name, ids, eng.Tuning().MaxGlobalRetries+1)); err != nil {
		return nil, fmt.Errorf("enqueueing the chunks of %s %s: %w", batchID, name, err)
	}
	return map[string]any{"chunks": len(chunks), "refs": refs, "skipped": skipped}, nil
}

// ensureJobs makes sure every open chunk of a batch's phase has its job
// (unique: an existing one is kept), as a retry or the sweep's backstop
// need. It returns how many it enqueued.
func (e *Executor) ensureJobs(ctx context.Context, tx pgx.Tx, client *river.Client[pgx.Tx], batchID string, p phases.Phase) (int, error) {
	phase := p.Spec().Name
	maxAttempts := e.engines[p.Spec().Engine].Tuning().MaxGlobalRetries + 1
	ids, err := db.New(tx).ChunkListOpen(ctx, db.ChunkListOpenParams{BatchID: batchID, Phase: string(phase)})
	if err != nil {
		return 0, fmt.Errorf("listing open chunks of %s %s: %w", batchID, phase, err)
	}
	if len(ids) == 0 {
		return 0, nil
	}
	res, err := client.InsertManyTx(ctx, tx, chunkParams(batchID, phase, ids, maxAttempts))
	if err != nil {
		return 0, fmt.Errorf("enqueueing the chunks of %s %s: %w", batchID, phase, err)
	}
	n := 0
	for _, r := range res {
		if !r.UniqueSkippedAsDuplicate {
			n++
		}
	}
	return n, nil
}

// HasOpen asks whether a chunk of the phase is neither DONE nor ERROR.
func (e *Executor) HasOpen(ctx context.Context, q *db.Queries, at jobs.PhaseAt) (bool, error) {
	n, err := q.ChunkCountOpen(ctx, db.ChunkCountOpenParams{BatchID: at.BatchID, Phase: at.Name()})
	return n > 0, err
}

// Outcomes joins each file's item of the phase as its task: a done item
// is a completed task whose result is its engine's; any other item
// (failed, skipped, or left pending by a chunk that ended early) is a
// failed task, which leaves the file as it was.
func (e *Executor) Outcomes() jobs.Outcomes {
	return jobs.Outcomes{
		Join:   "LEFT JOIN chunk_items t ON t.file_id = f.id AND t.batch_id = $1 AND t.phase = $3",
		ID:     "CASE WHEN t.file_id IS NOT NULL THEN t.chunk_id || '/' || t.item_index END",
		Status: "CASE WHEN t.status = 'done' THEN 'completed' WHEN t.file_id IS NOT NULL THEN 'failed' END",
		Result: "CASE WHEN t.status = 'done' THEN t.result END",
		Order:  "t.chunk_id, t.item_index",
	}
}

// Progress counts each phase's items ("refs": a skipped one needed
// nothing and is complete), with its chunks in Detail.
func (e *Executor) Progress(ctx context.Context, q *db.Queries, batchIDs []string) (map[string][]jobs.PhaseProgress, error) {
	rows, err := q.ChunkSummaryByBatches(ctx, batchIDs)
	if err != nil {
		return nil, err
	}
	infra := map[[2]string]int64{}
	if len(rows) > 0 {
		counts, err := q.ChunkItemCountInfraFailed(ctx, batchIDs)
		if err != nil {
			return nil, err
		}
		for _, c := range counts {
			infra[[2]string{c.BatchID, c.Phase}] = c.N
		}
	}
	out := map[string][]jobs.PhaseProgress{}
	for _, r := range rows {
		done := int64(r.RefsDone + r.RefsSkipped)
		out[r.BatchID] = append(out[r.BatchID], jobs.PhaseProgress{
			Phase: r.Phase, Executor: Kind, Unit: "refs",
			TasksTotal: int64(r.RefsTotal), TasksPending: int64(r.RefsTotal) - done - int64(r.RefsFailed),
			TasksCompleted: done, TasksFailed: int64(r.RefsFailed), TasksSkipped: int64(r.RefsSkipped),
			TasksFailedInfrastructure: infra[[2]string{r.BatchID, r.Phase}],
			Detail:                    map[string]int64{"chunks_total": int64(r.ChunksTotal), "chunks_done": int64(r.ChunksDone), "chunks_error": int64(r.ChunksError)},
		})
	}
	return out, nil
}

// Retry puts the phase's failed items back to pending with their retries
// restored, reopens chunks that stopped early (a provider that refused
// the key), and makes sure every open chunk has its job.
func (e *Executor) Retry(ctx context.Context, tx jobs.Tx, at jobs.PhaseAt, scope jobs.RetryScope) (jobs.RetryOutcome, error) {
	q := tx.Queries()
	requeued, err := q.ChunkItemRequeueFailed(ctx, db.ChunkItemRequeueFailedParams{BatchID: at.BatchID, Phase: at.Name(), InfraOnly: scope.InfraOnly})
	if err != nil {
		return jobs.RetryOutcome{}, fmt.Errorf("requeueing failed items of %s: %w", at.BatchID, err)
	}
	reopened, err := q.ChunkReopen(ctx, db.ChunkReopenParams{BatchID: at.BatchID, Phase: at.Name()})
	if err != nil {
		return jobs.RetryOutcome{}, fmt.Errorf("reopening chunks of %s: %w", at.BatchID, err)
	}
	items := 0
	perChunk := map[string]int32{}
	for _, r := range requeued {
		items += int(r.Requeued)
		perChunk[r.ChunkID] = r.Requeued
	}
	enqueued, err := e.ensureJobs(ctx, tx.Tx, tx.River, at.BatchID, at.Phase)
	if err != nil {
		return jobs.RetryOutcome{}, err
	}
	out := jobs.RetryOutcome{Count: len(requeued) + int(reopened),
		Data: map[string]any{"items_requeued": items, "chunks_reopened": int(reopened) + len(requeued)}}
	if enqueued > 0 {
		e.deps.Logger.Info("a retry enqueued chunk jobs", "batch_id", at.BatchID, "phase", at.Name(), "chunks", enqueued)
	}
	if items > 0 {
		out.Events = append(out.Events, db.Event{BatchID: at.BatchID, Type: db.EventItemsRequeued, Phase: at.Name(),
			Data: map[string]any{"items": items, "by_chunk": perChunk}}.Row())
	}
	return out, nil
}

// Rerun drops the batch's items neither done nor skipped (failed, or left
// pending by a chunk that stopped); a new pass makes them anew in new
// chunks. Its counts are "<engine>_items" (e.g. "ocr_items").
func (e *Executor) Rerun(ctx context.Context, tx jobs.Tx, batchID string, scope jobs.RetryScope) (jobs.Rerun, error) {
	rows, err := tx.Queries().ChunkItemDropUnfinished(ctx, db.ChunkItemDropUnfinishedParams{BatchID: batchID, InfraOnly: scope.InfraOnly})
	if err != nil {
		return jobs.Rerun{}, fmt.Errorf("removing the unfinished items of batch %s: %w", batchID, err)
	}
	out := jobs.Rerun{Counts: map[string]any{}}
	for _, p := range e.deps.Executors.PhasesOf(Kind) {
		out.Counts[p.Spec().Engine+"_items"] = 0
	}
	for _, r := range rows {
		out.Keys = append(out.Keys, r.R2Key)
		if p, ok := phases.Get(phases.Name(r.Phase)); ok {
			out.Counts[p.Spec().Engine+"_items"] = out.Counts[p.Spec().Engine+"_items"].(int) + 1
		}
	}
	return out, nil
}

// Backstop makes sure every open chunk of the phase has its job.
func (e *Executor) Backstop(ctx context.Context, at jobs.PhaseAt) error {
	client := river.ClientFromContext[pgx.Tx](ctx)
	return pgx.BeginFunc(ctx, e.deps.Pool, func(tx pgx.Tx) error {
		n, err := e.ensureJobs(ctx, tx, client, at.BatchID, at.Phase)
		if n > 0 {
			e.deps.Logger.Warn("backstop re-enqueued lost chunk jobs", "batch_id", at.BatchID, "phase", at.Name(), "chunks", n)
		}
		return err
	})
}

// Stop leaves the chunks as they are: a reset cancels their jobs, a run
// that is under way finds the batch no longer in the phase and stops, and
// an admin retry enqueues them again.
func (e *Executor) Stop(context.Context, jobs.Tx, string, string) (int, error) { return 0, nil }

// The tables Prune removes rows from, as PruneResult.Removed names them.
const (
	TableChunkItems = "chunk_items"
	TableChunks     = "chunks"
)

// Prune removes the batch's items, then its chunks.
func (e *Executor) Prune(ctx context.Context, q *db.Queries, batchID string, rows int32) (jobs.Removal, error) {
	out := jobs.Removal{Rows: map[string]int64{}}
	for _, s := range []struct {
		table string
		del   func() (int64, error)
	}{
		{TableChunkItems, func() (int64, error) {
			return q.ChunkItemDeleteByBatch(ctx, db.ChunkItemDeleteByBatchParams{BatchID: batchID, Max: rows})
		}},
		{TableChunks, func() (int64, error) {
			return q.ChunkDeleteByBatch(ctx, db.ChunkDeleteByBatchParams{BatchID: batchID, Max: rows})
		}},
	} {
		n, statements, err := jobs.DeleteInSteps(rows, s.del)
		out.Rows[s.table] += n
		out.Statements += statements
		if err != nil {
			return out, err
		}
	}
	return out, nil
}
