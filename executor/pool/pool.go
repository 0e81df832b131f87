// Package pool is the executor whose machines lease tasks (spec 000's
// "machine pooling"): a phase's work is tasks, one per file, as for the
// machine executor, but a pool keeps a few machines per phase (per batch
// by default) that lease task after task instead of one machine per task,
// so that Fly's one machine creation a second serves a large batch in
// minutes. A lease is the task's row moving to processing with a new
// attempt, a deadline and a callback token (PoolLease, FOR UPDATE SKIP
// LOCKED); the worker posts the task's result on the usual callback path
// (the same fan-in), heartbeats while it works, and leases again. A
// machine that dies loses its leases to the sweep. A pool's manager
// (pool_scale) keeps its machines at POOL_SIZE_<PHASE> while it has work,
// under the launch limiter every launch shares.
package pool

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river"

	"github.com/arke-institute/orchestrator/batchurls"
	"github.com/arke-institute/orchestrator/blob"
	"github.com/arke-institute/orchestrator/db"
	"github.com/arke-institute/orchestrator/executor/machine"
	"github.com/arke-institute/orchestrator/executor/tasks"
	"github.com/arke-institute/orchestrator/fanin"
	"github.com/arke-institute/orchestrator/jobs"
	"github.com/arke-institute/orchestrator/phases"
	"github.com/arke-institute/orchestrator/ratelimit"
	"github.com/arke-institute/orchestrator/tasktoken"
)

// Kind is the executor's name (EXECUTOR_<PHASE>=pool).
const Kind = "pool"

// Executor runs the phases whose executor is Kind. Its tasks are the task
// table's (tasks.Table), as the machine executor's are; its machines are
// its pools'.
type Executor struct {
	tasks.Table
	deps jobs.Deps
	cfg  Config
	// machines is the machine executor's configuration: the phases' apps,
	// images, guests and timeouts, and the launch settings.
	machines machine.Config
	limiter  *ratelimit.Limiter
	// urls presigns the URLs a leased task's worker reaches storage with.
	urls *batchurls.Signer
	// tokens seals and opens the machines' and the tasks' tokens.
	tokens *tasktoken.Keyring
	// fleet bounds the launches (MAX_MACHINES,
	// MAX_MACHINE_SECONDS_PER_HOUR), with the machine executor's.
	fleet *machine.Fleet
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

// New returns the executor of cfg, whose machines are those machines
// configures, launched under fleet's spend bounds (the machine
// executor's, so that they bound both; nil: a fleet of its own).
// presigner presigns the workers' URLs (nil: deps.Store's, if it
// presigns).
func New(deps jobs.Deps, cfg Config, machines machine.Config, fleet *machine.Fleet, presigner blob.Presigner) (*Executor, error) {
	if p, ok := deps.Store.(blob.Presigner); ok && presigner == nil {
		presigner = p
	}
	urls, err := batchurls.New(presigner, deps.Settings.Buckets)
	if err != nil {
		return nil, fmt.Errorf("pool workers' URLs: %w", err)
	}
	if deps.Compute == nil {
		return nil, errors.New("the pool executor needs a compute backend")
	}
	if fleet == nil {
		fleet = machine.NewFleet(deps.Pool, machines, deps.Metrics)
	}
	return &Executor{Table: tasks.New(deps, Kind), deps: deps, cfg: cfg, machines: machines, limiter: ratelimit.New(deps.Pool), urls: urls,
		tokens: tasktoken.New(deps.Pool), fleet: fleet}, nil
}

// Kind is Kind.
func (e *Executor) Kind() string { return Kind }

// PausedKinds implements jobs.Pausable: while paused, a pool launches no machine and leases no task.
func (e *Executor) PausedKinds() []string { return []string{ScaleArgs{}.Kind()} }

// Check refuses a phase whose machines could not be launched
// (machine.CheckPhase).
func (e *Executor) Check(p phases.Phase) error { return machine.CheckPhase(p) }

// Jobs registers the pools' managers (pool_scale). Their machines'
// destruction is the machine executor's job (machine.DestroyArgs).
func (e *Executor) Jobs(w *river.Workers) jobs.Jobs {
	river.AddWorker(w, &ScaleWorker{e: e})
	return jobs.Jobs{Timeout: jobs.ShortTimeout}
}

// Enter writes a pending task for each file of the phase's work, opens
// the phase's pool for the batch and wakes its manager.
func (e *Executor) Enter(ctx context.Context, tx jobs.Tx, at jobs.PhaseAt, files []phases.File) (map[string]any, error) {
	n, err := e.Insert(ctx, tx, at, files)
	if err != nil {
		return nil, err
	}
	pool, err := e.open(ctx, tx.Queries(), at.BatchID, at.Phase.Spec().Name)
	if err != nil {
		return nil, err
	}
	if err := wake(ctx, tx, pool.ID); err != nil {
		return nil, err
	}
	return map[string]any{"tasks": n, "pool": pool.ID}, nil
}

// Extend writes the tasks of a part of the phase's generation; the pool's
// machines lease them as they come.
func (e *Executor) Extend(ctx context.Context, tx jobs.Tx, at jobs.PhaseAt, files []phases.File) (int, error) {
	n, err := e.Insert(ctx, tx, at, files)
	if err != nil || n == 0 {
		return n, err
	}
	return n, e.wakePhase(ctx, tx, at.BatchID, at.Phase.Spec().Name)
}

// open is the open pool of a batch's phase (the phase's shared one, with
// POOL_SCOPE=phase), made if there is none.
func (e *Executor) open(ctx context.Context, q *db.Queries, batchID string, phase phases.Name) (db.Pool, error) {
	p := db.PoolOpenParams{Phase: string(phase), App: e.machines.Phases[phase].App}
	if e.cfg.Scope != ScopePhase {
		p.BatchID = &batchID
	}
	pool, err := q.PoolOpen(ctx, p)
	if err != nil {
		return db.Pool{}, fmt.Errorf("opening the %s pool of %s: %w", phase, batchID, err)
	}
	return pool, nil
}

// wakePhase wakes the manager of a batch's phase's pool.
func (e *Executor) wakePhase(ctx context.Context, tx jobs.Tx, batchID string, phase phases.Name) error {
	pool, err := e.open(ctx, tx.Queries(), batchID, phase)
	if err != nil {
		return err
	}
	return wake(ctx, tx, pool.ID)
}

// wake makes sure the pool's manager runs (unique while unfinished: a
// manager waiting for its next run takes the new work then).
func wake(ctx context.Context, tx jobs.Tx, poolID int64) error {
	if _, err := tx.River.InsertTx(ctx, tx.Tx, ScaleArgs{PoolID: poolID}, nil); err != nil {
		return fmt.Errorf("enqueueing pool_scale for pool %d: %w", poolID, err)
	}
	return nil
}

// Retry puts the phase's failed tasks back to pending and wakes its pool:
// also for a stopped batch with none failed (its tasks may still come).
func (e *Executor) Retry(ctx context.Context, tx jobs.Tx, at jobs.PhaseAt, scope jobs.RetryScope) (jobs.RetryOutcome, error) {
	out, err := e.Requeue(ctx, tx, at, scope)
	if err != nil || out.Count == 0 && !scope.Stopped {
		return out, err
	}
	return out, e.wakePhase(ctx, tx, at.BatchID, at.Phase.Spec().Name)
}

// Backstop makes sure a phase with pending tasks has its pool's manager.
func (e *Executor) Backstop(ctx context.Context, at jobs.PhaseAt) error {
	pending, err := db.New(e.deps.Pool).TaskCountPending(ctx, db.TaskCountPendingParams{BatchID: at.BatchID, Phase: at.Name()})
	if err != nil || pending == 0 {
		return err
	}
	client := river.ClientFromContext[pgx.Tx](ctx)
	return pgx.BeginFunc(ctx, e.deps.Pool, func(tx pgx.Tx) error {
		return e.wakePhase(ctx, jobs.Tx{Tx: tx, River: client}, at.BatchID, at.Phase.Spec().Name)
	})
}

// Requeued wakes the pools of phases whose tasks callbacks put back to
// pending (a retryable failure: another lease retries it).
func (e *Executor) Requeued(ctx context.Context, tx jobs.Tx, refs []fanin.PhaseRef) error {
	seen := map[fanin.PhaseRef]bool{}
	for _, r := range refs {
		if seen[r] {
			continue
		}
		seen[r] = true
		if err := e.wakePhase(ctx, tx, r.BatchID, phases.Name(r.Phase)); err != nil {
			return err
		}
	}
	return nil
}

// Stop ends the batch's open tasks of the pool phases with reason, closes
// its pools and queues their machines for destruction (a reset). A shared
// pool serves other batches: its machines go on.
func (e *Executor) Stop(ctx context.Context, tx jobs.Tx, batchID, reason string) (int, error) {
	ended, err := e.End(ctx, tx, batchID, reason)
	if err != nil {
		return 0, err
	}
	closed, err := tx.Queries().PoolClose(ctx, db.PoolCloseParams{BatchID: &batchID, Reason: "batch stopped: " + reason})
	if err != nil {
		return 0, fmt.Errorf("closing the pools of %s: %w", batchID, err)
	}
	var gone doomed
	for _, m := range closed {
		gone.add(m.App, m.MachineID)
	}
	return len(ended), gone.destroy(ctx, tx)
}

// doomed are pool machines to destroy, by app.
type doomed map[string][]string

// add adds a machine of app, if it has an id (its launch answered).
func (d *doomed) add(app string, machineID *string) {
	if machineID == nil {
		return
	}
	if *d == nil {
		*d = doomed{}
	}
	(*d)[app] = append((*d)[app], *machineID)
}

// destroy queues the machines for destruction (machine.DestroyArgs).
func (d doomed) destroy(ctx context.Context, tx jobs.Tx) error {
	for app, ids := range d {
		if _, err := tx.River.InsertTx(ctx, tx.Tx, machine.DestroyArgs{App: app, MachineIDs: ids}, nil); err != nil {
			return err
		}
	}
	return nil
}

// TablePools is the table Prune removes a batch's pools from (their
// machines' rows go with them).
const TablePools = "pools"

// Prune removes the batch's tasks of the pool phases and their counters,
// then its pools.
func (e *Executor) Prune(ctx context.Context, q *db.Queries, batchID string, rows int32) (jobs.Removal, error) {
	out, err := e.Table.Prune(ctx, q, batchID, rows)
	if err != nil {
		return out, err
	}
	n, err := q.PoolDeleteByBatch(ctx, &batchID)
	if out.Rows == nil {
		out.Rows = map[string]int64{}
	}
	out.Rows[TablePools] = n
	out.Statements++
	return out, err
}

// Sweep takes back the leases past their deadline or whose heartbeats
// stopped (their machine died or hangs), a few (batch, phase) groups a
// run: within the restart grace it takes back nothing. A task with
// attempts left is leased again; the machine that held it is destroyed.
func (e *Executor) Sweep(ctx context.Context, client *river.Client[pgx.Tx], grace bool) error {
	if grace {
		return nil
	}
	groups, err := e.ExpiredGroups(ctx)
	if err != nil {
		return err
	}
	for _, g := range groups {
		lease := leaseFor(e.machines.Phases[phases.Name(g.Phase)].TaskTimeout)
		err := e.Expire(ctx, client, g.BatchID, g.Phase, tasks.Expiry{LeaseSeconds: lease.Seconds(), Then: func(tx jobs.Tx, rows []db.TaskFailExpiredRow) error {
			var lost []int64
			for _, r := range rows {
				if r.PoolMachineID != nil {
					lost = append(lost, *r.PoolMachineID)
				}
			}
			lose, err := tx.Queries().PoolMachineLose(ctx, db.PoolMachineLoseParams{IDs: lost, Reason: "its lease was taken back"})
			if err != nil {
				return err
			}
			var gone doomed
			for _, m := range lose {
				gone.add(m.App, m.MachineID)
			}
			if err := gone.destroy(ctx, tx); err != nil {
				return err
			}
			return e.wakePhase(ctx, tx, g.BatchID, phases.Name(g.Phase))
		}})
		if err != nil {
			return err
		}
	}
	return nil
}

// Routes are the pool machines' lease route, and the heartbeat route of
// the task a worker holds (the worker's URLs route is the machine
// executor's: it serves any task).
func (e *Executor) Routes() []jobs.Route {
	return []jobs.Route{{
		Method: "POST", Path: "/pools/:poolId/lease", Access: jobs.AccessTask,
		Handle: func(ctx context.Context, r jobs.Request) (any, error) {
			id, err := strconv.ParseInt(r.Params["poolId"], 10, 64)
			if err != nil {
				return nil, fmt.Errorf("pool %q: %w", r.Params["poolId"], errUnknownPool)
			}
			return e.Lease(ctx, id, r.Token, r.Body)
		},
	}, {
		Method: "POST", Path: "/callback/:batchId/:taskId/heartbeat", Access: jobs.AccessTask,
		Handle: func(ctx context.Context, r jobs.Request) (any, error) {
			return e.Heartbeat(ctx, r.Params["batchId"], r.Params["taskId"], r.Token)
		},
	}}
}

// heartbeatEvery is how often a worker heartbeats while it holds a lease
// of a phase whose task timeout is timeout: a sixth of it, from 0.5 to
// 10 s, so that a lease (three heartbeats) lasts at most half the timeout.
func heartbeatEvery(timeout time.Duration) time.Duration {
	return min(max(timeout/6, 500*time.Millisecond), 10*time.Second)
}

// leaseFor is how long a lease holds without a heartbeat: three of them,
// so that a machine that died loses its task well before the task's
// deadline.
func leaseFor(timeout time.Duration) time.Duration { return 3 * heartbeatEvery(timeout) }
