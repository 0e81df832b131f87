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

	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river"

	"github.com/arke-institute/orchestrator/batchurls"
	"github.com/arke-institute/orchestrator/blob"
	"github.com/arke-institute/orchestrator/db"
	"github.com/arke-institute/orchestrator/executor/tasks"
	"github.com/arke-institute/orchestrator/fanin"
	"github.com/arke-institute/orchestrator/jobs"
	"github.com/arke-institute/orchestrator/phases"
	"github.com/arke-institute/orchestrator/ratelimit"
	"github.com/arke-institute/orchestrator/tasktoken"
)

// Kind is the executor's name in phases.Spec.Executor.
const Kind = "machine"

// Executor runs the phases whose executor is Kind. Its tasks are the
// task table's (tasks.Table): how they are written, counted, put back,
// expired, stopped and pruned; a launcher of machines is its own.
type Executor struct {
	tasks.Table
	deps    jobs.Deps
	cfg     Config
	limiter *ratelimit.Limiter
	// urls presigns the URLs machines reach storage with: they get no
	// credentials.
	urls *batchurls.Signer
	// checked is when each (batch, phase)'s machines were last checked
	// (checkMachines).
	checked *checkTimes
	// tokens seals and opens the tasks' callback tokens.
	tokens *tasktoken.Keyring
	// fleet bounds the launches (MAX_MACHINES,
	// MAX_MACHINE_SECONDS_PER_HOUR).
	fleet *Fleet
}

var (
	_ jobs.Executor    = (*Executor)(nil)
	_ jobs.Extender    = (*Executor)(nil)
	_ jobs.OpenCounter = (*Executor)(nil)
	_ jobs.Requeuer    = (*Executor)(nil)
	_ jobs.Overtaker   = (*Executor)(nil)
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
	return &Executor{Table: tasks.New(deps, Kind), deps: deps, cfg: cfg, limiter: ratelimit.New(deps.Pool), urls: urls, checked: newCheckTimes(),
		tokens: tasktoken.New(deps.Pool), fleet: NewFleet(deps.Pool, cfg, deps.Metrics)}, nil
}

// Fleet is the executor's spend bounds, which the pools' launches share.
func (e *Executor) Fleet() *Fleet { return e.fleet }

// Progress counts the batches' tasks of the machine phases (tasks.Table),
// with the spend bound their launches wait for, if any (BoundsInto).
func (e *Executor) Progress(ctx context.Context, q *db.Queries, batchIDs []string) (map[string][]jobs.PhaseProgress, error) {
	out, err := e.Table.Progress(ctx, q, batchIDs)
	if err != nil {
		return nil, err
	}
	return out, BoundsInto(ctx, q, out)
}

// Kind is Kind.
func (e *Executor) Kind() string { return Kind }

// PausedKinds implements jobs.Pausable: while paused, a phase launches no machine.
func (e *Executor) PausedKinds() []string { return []string{PhaseLaunchArgs{}.Kind()} }

// Check refuses a phase whose machines could not be launched (CheckPhase).
func (e *Executor) Check(p phases.Phase) error { return CheckPhase(p) }

// CheckPhase refuses a phase without a worker program, Fly app, image,
// guest or launch pacing: its machines could not be launched, whether a
// machine per task or a pool's.
func CheckPhase(p phases.Phase) error {
	s, d := p.Spec(), p.Spec().Defaults
	if s.Worker == "" || d.FlyAppName == "" || d.WorkerImage == "" || d.BatchSize <= 0 || d.AlarmDelay <= 0 || d.TaskTimeout <= 0 || d.Guest.MemoryMB <= 0 {
		return errors.New("a machine phase needs a worker, a Fly app, an image, a guest and launch defaults (batch size, alarm delay, task timeout)")
	}
	return nil
}

// Jobs registers the launcher, machine cleanup and the orphan reaper
// (every ORPHAN_REAP_INTERVAL unless it is 0); all are short.
func (e *Executor) Jobs(w *river.Workers) jobs.Jobs {
	river.AddWorker(w, &PhaseLaunchWorker{deps: e.deps, cfg: e.cfg, limiter: e.limiter, urls: e.urls, tokens: e.tokens, fleet: e.fleet})
	river.AddWorker(w, &DestroyWorker{deps: e.deps})
	river.AddWorker(w, &ReapWorker{e: e})
	j := jobs.Jobs{Timeout: jobs.ShortTimeout}
	if e.cfg.ReapInterval > 0 {
		j.Periodic = append(j.Periodic, river.NewPeriodicJob(
			river.PeriodicInterval(e.cfg.ReapInterval),
			func() (river.JobArgs, *river.InsertOpts) { return ReapArgs{}, nil },
			&river.PeriodicJobOpts{ID: "machine_reap"},
		))
	}
	return j
}

// Enter writes a pending task for each file of the phase's work and
// enqueues the phase's launcher.
func (e *Executor) Enter(ctx context.Context, tx jobs.Tx, at jobs.PhaseAt, files []phases.File) (map[string]any, error) {
	n, err := e.Insert(ctx, tx, at, files)
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
	return e.Insert(ctx, tx, at, files)
}

// Retry puts the phase's failed tasks back to pending, forgetting their
// last launch (a late callback of it no longer authenticates), with
// TASK_MAX_ATTEMPTS attempts afresh, and enqueues the launcher: also for
// a stopped batch with none failed, whose launcher the stop cancelled
// while its generation was being written (its tasks come as it goes on).
func (e *Executor) Retry(ctx context.Context, tx jobs.Tx, at jobs.PhaseAt, scope jobs.RetryScope) (jobs.RetryOutcome, error) {
	out, err := e.Requeue(ctx, tx, at, scope)
	if err != nil || out.Count == 0 && !scope.Stopped {
		return out, err
	}
	if _, err := tx.River.InsertTx(ctx, tx.Tx, PhaseLaunchArgs{BatchID: at.BatchID, Phase: at.Name()}, nil); err != nil {
		return jobs.RetryOutcome{}, fmt.Errorf("enqueueing phase_launch for %s %s: %w", at.BatchID, at.Name(), err)
	}
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
	ended, err := e.End(ctx, tx, batchID, reason)
	if err != nil {
		return 0, err
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

// Overtaken destroys the machines of tasks that a success of an earlier
// attempt completed after they were launched again: a later attempt's
// machine, whose work is no longer wanted, or a timed-out one still
// waiting for its destruction.
func (e *Executor) Overtaken(ctx context.Context, tx jobs.Tx, tasks []fanin.Overtaken) error {
	byApp := map[string][]string{}
	for _, t := range tasks {
		if t.MachineID != "" {
			app := e.cfg.Phases[phases.Name(t.Phase)].App
			byApp[app] = append(byApp[app], t.MachineID)
		}
	}
	for app, ids := range byApp {
		if _, err := tx.River.InsertTx(ctx, tx.Tx, DestroyArgs{App: app, MachineIDs: ids}, nil); err != nil {
			return fmt.Errorf("queueing the destruction of overtaken machines: %w", err)
		}
	}
	return nil
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
