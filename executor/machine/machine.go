// Package machine is the executor that runs one short-lived machine per
// task (spec 000): a phase's work is tasks, one per file its Discover
// finds; its launcher (phase_launch) claims pending tasks under the launch
// rate limit every orchestrator shares and launches their machines; each
// machine's worker posts one callback, which ends its task (package
// callbackcommit); the sweep times out tasks past their deadline, and a
// failed attempt is retried on a fresh machine while it has attempts left.
package machine

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/oklog/ulid/v2"
	"github.com/riverqueue/river"

	"github.com/arke-institute/orchestrator/batchurls"
	"github.com/arke-institute/orchestrator/blob"
	"github.com/arke-institute/orchestrator/db"
	"github.com/arke-institute/orchestrator/fanin"
	"github.com/arke-institute/orchestrator/jobs"
	"github.com/arke-institute/orchestrator/phases"
	"github.com/arke-institute/orchestrator/ratelimit"
)

// Kind is the executor's name in phases.Spec.Executor.
const Kind = "machine"

// Executor runs the phases whose Spec.Executor is Kind.
type Executor struct {
	deps    jobs.Deps
	cfg     Config
	limiter *ratelimit.Limiter
	// urls presigns the URLs machines reach storage with: they get no
	// credentials.
	urls *batchurls.Signer
}

var (
	_ jobs.Executor    = (*Executor)(nil)
	_ jobs.Extender    = (*Executor)(nil)
	_ jobs.OpenCounter = (*Executor)(nil)
	_ jobs.Requeuer    = (*Executor)(nil)
	_ jobs.Sweeper     = (*Executor)(nil)
	_ jobs.Viewer      = (*Executor)(nil)
	_ jobs.Router      = (*Executor)(nil)
)

// New returns the executor of cfg. presigner presigns the machines' URLs
// (nil: deps.Store's, if it presigns).
func New(deps jobs.Deps, cfg Config, presigner blob.Presigner) (*Executor, error) {
	if p, ok := deps.Store.(blob.Presigner); ok && presigner == nil {
		presigner = p
	}
	urls, err := batchurls.New(presigner, deps.Settings.Buckets)
	if err != nil {
		return nil, fmt.Errorf("machines' URLs: %w", err)
	}
	if deps.Compute == nil {
		return nil, errors.New("the machine executor needs a compute backend")
	}
	return &Executor{deps: deps, cfg: cfg, limiter: ratelimit.New(deps.Pool), urls: urls}, nil
}

// Kind is Kind.
func (e *Executor) Kind() string { return Kind }

// Check refuses a phase without a worker program, Fly app, image, guest
// or launch pacing: its machines could not be launched.
func (e *Executor) Check(p phases.Phase) error {
	s, d := p.Spec(), p.Spec().Defaults
	if s.Worker == "" || d.FlyAppName == "" || d.WorkerImage == "" || d.BatchSize <= 0 || d.AlarmDelay <= 0 || d.TaskTimeout <= 0 || d.Guest.MemoryMB <= 0 {
		return errors.New("a machine phase needs a worker, a Fly app, an image, a guest and launch defaults (batch size, alarm delay, task timeout)")
	}
	return nil
}

// Jobs registers the launcher and machine cleanup; both are short.
func (e *Executor) Jobs(w *river.Workers) jobs.Jobs {
	river.AddWorker(w, &PhaseLaunchWorker{deps: e.deps, cfg: e.cfg, limiter: e.limiter, urls: e.urls})
	river.AddWorker(w, &DestroyWorker{deps: e.deps})
	return jobs.Jobs{Timeout: jobs.ShortTimeout}
}

// Enter writes a pending task for each file of the phase's work and
// enqueues the phase's launcher.
func (e *Executor) Enter(ctx context.Context, tx jobs.Tx, at jobs.PhaseAt, files []phases.File) (map[string]any, error) {
	n, err := insertTasks(ctx, tx, at, files)
	if err != nil {
		return nil, err
	}
	if _, err := tx.River.InsertTx(ctx, tx.Tx, PhaseLaunchArgs{BatchID: at.BatchID, Phase: at.Name()}, nil); err != nil {
		return nil, fmt.Errorf("enqueueing phase_launch for %s %s: %w", at.BatchID, at.Name(), err)
	}
	return map[string]any{"tasks": n}, nil
}

// Extend writes the tasks of a part of the phase's generation; the
// launcher, waiting while the generation is being written, claims them.
func (e *Executor) Extend(ctx context.Context, tx jobs.Tx, at jobs.PhaseAt, files []phases.File) (int, error) {
	return insertTasks(ctx, tx, at, files)
}

// insertTasks writes a pending task of the phase for each file of its
// work. Like db.TaskInsertMany, but each row is made as COPY asks for it
// rather than all of them first.
func insertTasks(ctx context.Context, tx jobs.Tx, at jobs.PhaseAt, files []phases.File) (int, error) {
	work := phases.Work(at.Phase, files)
	name, prefix := at.Name(), phases.TaskIDPrefix(at.Phase.Spec().Name)
	i := -1
	tasks := pgx.CopyFromFunc(func() ([]any, error) {
		if i++; i >= len(work) {
			return nil, nil
		}
		return []any{prefix + "_" + strings.ToLower(ulid.Make().String()), at.BatchID, name, work[i].ID}, nil
	})
	if _, err := tx.CopyFrom(ctx, pgx.Identifier{"tasks"}, []string{"id", "batch_id", "phase", "file_id"}, tasks); err != nil {
		return 0, fmt.Errorf("inserting %d %s tasks: %w", len(work), name, err)
	}
	return len(work), nil
}

// HasOpen asks the task counters (task_counts), which the statements that
// change tasks update in their own transaction: under the batch's
// exclusive lock they are as exact as the tasks.
func (e *Executor) HasOpen(ctx context.Context, q *db.Queries, at jobs.PhaseAt) (bool, error) {
	return q.TaskHasOpen(ctx, db.TaskHasOpenParams{BatchID: at.BatchID, Phase: at.Name()})
}

// OpenCount is how many tasks of the phase are open, while the batch is
// in it (0 otherwise), from the counters.
func (e *Executor) OpenCount(ctx context.Context, q *db.Queries, ref fanin.PhaseRef) (int64, error) {
	n, err := q.PhaseOpenCount(ctx, db.PhaseOpenCountParams{BatchID: ref.BatchID, Phase: ref.Phase})
	if errors.Is(err, pgx.ErrNoRows) {
		return 0, nil
	}
	return n, err
}

// Outcomes joins each file's task of the phase: its status and its
// worker's success callback body. Were a file to have two tasks, the
// first by id decides.
func (e *Executor) Outcomes() jobs.Outcomes {
	return jobs.Outcomes{
		Join: "LEFT JOIN tasks t ON t.file_id = f.id AND t.batch_id = $1 AND t.phase = $3",
		ID:   "t.id", Status: "t.status", Result: "t.result", Order: "t.id",
	}
}

// Progress counts the batches' tasks per phase and status, from the
// counters.
func (e *Executor) Progress(ctx context.Context, q *db.Queries, batchIDs []string) (map[string][]jobs.PhaseProgress, error) {
	rows, err := q.TaskCountByBatches(ctx, batchIDs)
	if err != nil {
		return nil, err
	}
	type key struct{ batch, phase string }
	byPhase := map[key]*jobs.PhaseProgress{}
	var order []key
	for _, r := range rows {
		k := key{r.BatchID, r.Phase}
		p := byPhase[k]
		if p == nil {
			p = &jobs.PhaseProgress{Phase: r.Phase, Executor: Kind, Unit: "tasks"}
			byPhase[k] = p
			order = append(order, k)
		}
		p.TasksTotal += r.Count
		switch phases.TaskStatus(r.Status) {
		case phases.TaskPending:
			p.TasksPending += r.Count
		case phases.TaskProcessing:
			p.TasksProcessing += r.Count
		case phases.TaskCompleted:
			p.TasksCompleted += r.Count
		case phases.TaskFailed:
			p.TasksFailed += r.Count
		}
	}
	out := map[string][]jobs.PhaseProgress{}
	for _, k := range order {
		out[k.batch] = append(out[k.batch], *byPhase[k])
	}
	return out, nil
}

// Retry puts the phase's failed tasks back to pending, forgetting their
// last launch (a late callback of it no longer authenticates), with
// TASK_MAX_ATTEMPTS attempts afresh, and enqueues the launcher: also for
// a stopped batch with none failed, whose launcher the stop cancelled
// while its generation was being written (its tasks come as it goes on).
func (e *Executor) Retry(ctx context.Context, tx jobs.Tx, at jobs.PhaseAt, stopped bool) (jobs.RetryOutcome, error) {
	requeued, err := tx.Queries().TaskRequeueFailed(ctx, db.TaskRequeueFailedParams{BatchID: at.BatchID, Phase: at.Name()})
	if err != nil {
		return jobs.RetryOutcome{}, fmt.Errorf("requeueing failed tasks of %s: %w", at.BatchID, err)
	}
	out := jobs.RetryOutcome{Count: len(requeued), Data: map[string]any{"tasks_requeued": len(requeued)}}
	if len(requeued) == 0 && !stopped {
		return out, nil
	}
	if _, err := tx.River.InsertTx(ctx, tx.Tx, PhaseLaunchArgs{BatchID: at.BatchID, Phase: at.Name()}, nil); err != nil {
		return jobs.RetryOutcome{}, fmt.Errorf("enqueueing phase_launch for %s %s: %w", at.BatchID, at.Name(), err)
	}
	for _, id := range requeued {
		out.Events = append(out.Events, db.Event{BatchID: at.BatchID, Type: db.EventTaskRequeued, Phase: at.Name(), TaskID: id}.Row())
	}
	return out, nil
}

// Rerun drops the batch's failed tasks (a new pass makes new ones for the
// files they failed on).
func (e *Executor) Rerun(ctx context.Context, tx jobs.Tx, batchID string) (jobs.Rerun, error) {
	rows, err := tx.Queries().TaskDeleteFailedByBatch(ctx, batchID)
	if err != nil {
		return jobs.Rerun{}, fmt.Errorf("removing the failed tasks of batch %s: %w", batchID, err)
	}
	byPhase := map[string]int{}
	out := jobs.Rerun{Keys: make([]string, 0, len(rows))}
	for _, r := range rows {
		byPhase[r.Phase]++
		out.Keys = append(out.Keys, r.R2Key)
	}
	out.Counts = map[string]any{"tasks": byPhase}
	return out, nil
}

// Backstop makes sure a phase with pending tasks has its launcher.
func (e *Executor) Backstop(ctx context.Context, at jobs.PhaseAt) error {
	pending, err := db.New(e.deps.Pool).TaskCountPending(ctx, db.TaskCountPendingParams{BatchID: at.BatchID, Phase: at.Name()})
	if err != nil || pending == 0 {
		return err
	}
	res, err := river.ClientFromContext[pgx.Tx](ctx).Insert(ctx, PhaseLaunchArgs{BatchID: at.BatchID, Phase: at.Name()}, nil)
	if err == nil && !res.UniqueSkippedAsDuplicate {
		e.deps.Logger.Warn("backstop re-enqueued a lost launcher", "batch_id", at.BatchID, "phase", at.Name())
	}
	return err
}

// Stop ends every open task of the batch with reason and queues its
// machines still running for destruction. Late callbacks for those tasks
// then get 409.
func (e *Executor) Stop(ctx context.Context, tx jobs.Tx, batchID, reason string) (int, error) {
	ended, err := tx.Queries().TaskFailOpenByBatch(ctx, db.TaskFailOpenByBatchParams{BatchID: batchID, Error: &reason})
	if err != nil {
		return 0, fmt.Errorf("ending open tasks of %s: %w", batchID, err)
	}
	byApp := map[string][]string{}
	for _, t := range ended {
		if t.MachineID != nil {
			app := e.cfg.Phases[phases.Name(t.Phase)].App
			byApp[app] = append(byApp[app], *t.MachineID)
		}
	}
	for app, ids := range byApp {
		if _, err := tx.River.InsertTx(ctx, tx.Tx, DestroyArgs{App: app, MachineIDs: ids}, nil); err != nil {
			return 0, err
		}
	}
	return len(ended), nil
}

// The tables Prune removes rows from, as PruneResult.Removed names them.
const (
	TableTasks      = "tasks"
	TableTaskCounts = "task_counts"
)

// Prune removes the batch's tasks, then its counters.
func (e *Executor) Prune(ctx context.Context, q *db.Queries, batchID string, rows int32) (jobs.Removal, error) {
	n, statements, err := jobs.DeleteInSteps(rows, func() (int64, error) {
		return q.TaskDeleteByBatch(ctx, db.TaskDeleteByBatchParams{BatchID: batchID, Max: rows})
	})
	out := jobs.Removal{Rows: map[string]int64{TableTasks: n}, Statements: statements}
	if err != nil {
		return out, err
	}
	counts, err := q.TaskCountDeleteByBatch(ctx, batchID)
	out.Rows[TableTaskCounts] = counts
	return out, err
}

// Requeued enqueues the launchers of phases whose tasks callbacks put
// back to pending (a retryable failure: a fresh machine retries it).
func (e *Executor) Requeued(ctx context.Context, tx jobs.Tx, refs []fanin.PhaseRef) error {
	params := make([]river.InsertManyParams, 0, len(refs))
	seen := map[fanin.PhaseRef]bool{}
	for _, r := range refs {
		if seen[r] {
			continue // one insert may not touch a unique job twice
		}
		seen[r] = true
		params = append(params, river.InsertManyParams{Args: PhaseLaunchArgs(r)})
	}
	if _, err := tx.River.InsertManyTx(ctx, tx.Tx, params); err != nil {
		return fmt.Errorf("enqueueing phase_launch: %w", err)
	}
	return nil
}
