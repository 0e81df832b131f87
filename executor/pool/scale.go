package pool

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river"

	"github.com/arke-institute/orchestrator/compute"
	"github.com/arke-institute/orchestrator/db"
	"github.com/arke-institute/orchestrator/executor/machine"
	"github.com/arke-institute/orchestrator/fanin"
	"github.com/arke-institute/orchestrator/jobs"
	"github.com/arke-institute/orchestrator/pause"
	"github.com/arke-institute/orchestrator/phases"
	"github.com/arke-institute/orchestrator/tasktoken"
	"github.com/arke-institute/orchestrator/worker/protocol"
)

// ScaleArgs is the job of a pool's manager (pool_scale), unique while
// unfinished: it runs about once a second while its pool has work.
type ScaleArgs struct {
	PoolID int64 `json:"pool_id"`
}

// Kind is the River job kind.
func (ScaleArgs) Kind() string { return "pool_scale" }

// InsertOpts makes the manager unique per pool.
func (ScaleArgs) InsertOpts() river.InsertOpts {
	return river.InsertOpts{UniqueOpts: river.UniqueOpts{ByArgs: true, ByState: fanin.UniqueUnfinished}}
}

// ScaleWorker manages a pool: it keeps POOL_SIZE_<PHASE> machines while
// the pool has work (fewer when fewer tasks are open), replaces those that
// stopped calling, never has more than POOL_MAX_MACHINES_<PHASE> of its
// app alive, and closes the pool once its batch has left the phase.
type ScaleWorker struct {
	jobs.Defaults[ScaleArgs]
	e *Executor
}

// Timings of a pool's manager.
const (
	// scaleEvery is how often the manager looks while its pool has work.
	scaleEvery = time.Second
	// startLimit is how long a launched machine may take to make its
	// first lease request before it is taken for lost.
	startLimit = 3 * time.Minute
	// silenceLimit is how long a machine may go unheard (no lease request,
	// no heartbeat) before it is taken for lost: longer than a lease
	// request's wait plus a missed heartbeat or two.
	silenceLimit = LeasePoll + 45*time.Second
)

// Work is one look at the pool.
func (w *ScaleWorker) Work(ctx context.Context, job *river.Job[ScaleArgs]) error {
	e := w.e
	q := db.New(e.deps.Pool)
	pool, err := q.PoolGet(ctx, job.Args.PoolID)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil // pruned
	}
	if err != nil || pool.ClosedAt != nil {
		return err
	}
	log := e.deps.Logger.With("pool_id", pool.ID, "phase", pool.Phase, "batch_id", deref(pool.BatchID))
	if err := w.dropSilent(ctx, pool); err != nil {
		return err
	}
	st, err := q.PoolState(ctx, pool.ID)
	if err != nil {
		return err
	}
	open := st.Pending + st.Processing
	if open == 0 {
		return w.settle(ctx, pool)
	}
	if p, err := e.deps.Pauses.Of(ctx, deref(pool.BatchID), pool.Phase); err != nil || p != nil {
		if p != nil {
			return river.JobSnooze(pause.Recheck) // no launch while paused
		}
		return err
	}
	phase := phases.Name(pool.Phase)
	want := min(int64(e.cfg.Size[phase]), open) - st.Live
	want = min(want, int64(e.cfg.MaxMachines[phase])-st.AppLive)
	if want <= 0 {
		return river.JobSnooze(scaleEvery)
	}
	// A batch of higher priority waiting for machines of the app goes
	// first: a batch's pool launches at most one, its minimum share.
	yielded, err := w.givesWay(ctx, pool)
	if err != nil {
		return err
	}
	if yielded {
		want = 1
	}
	// The spend bounds first, so that a held launch takes no token.
	bounds, err := e.fleet.Take(ctx, int(want))
	if err != nil {
		return err
	}
	if bounds.N == 0 {
		if err := w.held(ctx, pool, bounds); err != nil {
			return err
		}
		return river.JobSnooze(scaleEvery)
	}
	if bounds.N < int(want) {
		// A bound holds the rest back: say so, launch what it leaves.
		if err := w.held(ctx, pool, bounds); err != nil {
			bounds.Settle(0)
			return err
		}
	}
	want = int64(bounds.N)
	granted, wait, err := e.limiter.Take(ctx, machine.LaunchKey(pool.App), e.machines.LaunchLimit(), int(want))
	if err != nil {
		bounds.Settle(0)
		return err
	}
	// Each launch writes its machine's row first: a reading from then on
	// counts it.
	defer bounds.Settle(granted)
	if granted > 0 {
		launched, failure := w.launch(ctx, pool, granted)
		if launched > 0 {
			log.Info("launched pool machines", "count", launched)
			e.deps.Metrics.PoolMachinesLaunched(pool.Phase, launched)
		}
		if failure != nil {
			return w.launchFailed(ctx, pool, failure)
		}
		if launched > 0 {
			if err := w.recovered(ctx, pool, bounds.Bound == ""); err != nil {
				return err
			}
		}
	}
	switch {
	case yielded && granted > 0:
		return river.JobSnooze(max(scaleEvery, machine.YieldWait(e.machines.LaunchLimit(), e.deps.Settings.Priorities.Share)))
	case granted < int(want):
		return river.JobSnooze(max(wait, 50*time.Millisecond))
	}
	return river.JobSnooze(scaleEvery)
}

// givesWay tells whether a batch's pool leaves its launches to a batch of
// higher priority waiting for machines of its app (see
// executor/machine/precedence.go). A shared pool never does: its leases
// serve the highest priorities first.
func (w *ScaleWorker) givesWay(ctx context.Context, pool db.Pool) (bool, error) {
	if pool.BatchID == nil {
		return false, nil
	}
	batch, err := w.e.deps.JobBatch(ctx, *pool.BatchID)
	if err != nil {
		return false, err
	}
	return w.e.machines.Outranked(ctx, db.New(w.e.deps.Pool), batch.ID, batch.Priority, pool.App)
}

// dropSilent takes the pool's machines unheard of for too long for lost
// (dead, or hung): they are destroyed, and no longer count.
func (w *ScaleWorker) dropSilent(ctx context.Context, pool db.Pool) error {
	q := db.New(w.e.deps.Pool)
	now := time.Now()
	stale, err := q.PoolMachineStale(ctx, db.PoolMachineStaleParams{PoolID: pool.ID, StartedBefore: now.Add(-startLimit), SeenBefore: ptr(now.Add(-silenceLimit))})
	if err != nil || len(stale) == 0 {
		return err
	}
	ids := make([]int64, len(stale))
	for i, m := range stale {
		ids[i] = m.ID
	}
	client := river.ClientFromContext[pgx.Tx](ctx)
	return pgx.BeginFunc(ctx, w.e.deps.Pool, func(tx pgx.Tx) error {
		lost, err := db.New(tx).PoolMachineLose(ctx, db.PoolMachineLoseParams{IDs: ids, Reason: "it stopped calling"})
		if err != nil {
			return err
		}
		var gone doomed
		for _, m := range lost {
			gone.add(m.App, m.MachineID)
		}
		w.e.deps.Logger.Warn("pool machines stopped calling", "pool_id", pool.ID, "phase", pool.Phase, "count", len(lost))
		return gone.destroy(ctx, jobs.Tx{Tx: tx, River: client})
	})
}

// settle ends the manager's work while its pool has none: a batch's pool
// whose batch has left the phase is closed (its machines, told "done",
// have exited or will at their next request); otherwise the manager waits
// for the next wake-up (new tasks, retries).
func (w *ScaleWorker) settle(ctx context.Context, pool db.Pool) error {
	if pool.BatchID == nil {
		return nil
	}
	batch, err := w.e.deps.JobBatch(ctx, *pool.BatchID)
	if err != nil {
		return err
	}
	if batch.Status == pool.Phase {
		return nil // between generations, or waiting for retries
	}
	client := river.ClientFromContext[pgx.Tx](ctx)
	return pgx.BeginFunc(ctx, w.e.deps.Pool, func(tx pgx.Tx) error {
		closed, err := db.New(tx).PoolClose(ctx, db.PoolCloseParams{ID: &pool.ID, Reason: "its batch left the phase"})
		if err != nil {
			return err
		}
		var gone doomed
		for _, m := range closed {
			gone.add(m.App, m.MachineID)
		}
		return gone.destroy(ctx, jobs.Tx{Tx: tx, River: client})
	})
}

// launch launches n machines of the pool, LAUNCH_CONCURRENCY at a time. It
// returns how many it launched, and a failure that is no back-pressure,
// if any: the last one seen.
func (w *ScaleWorker) launch(ctx context.Context, pool db.Pool, n int) (int, error) {
	var (
		mu       sync.Mutex
		launched int
		failure  error
		wg       sync.WaitGroup
	)
	sem := make(chan struct{}, max(1, w.e.machines.LaunchConcurrency))
	for range n {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			err := w.launchOne(ctx, pool)
			mu.Lock()
			defer mu.Unlock()
			switch {
			case err == nil:
				launched++
			case !errors.Is(err, compute.ErrRateLimited):
				failure = err
			}
		}()
	}
	wg.Wait()
	return launched, failure
}

// launchOne launches one machine of the pool with a credential of its
// own. After an ambiguous failure it looks the machine up by its metadata
// (task_id "pool-<id>"): one that was created is recorded, and leases;
// otherwise its row ends, and its credential with it.
func (w *ScaleWorker) launchOne(ctx context.Context, pool db.Pool) error {
	e := w.e
	q := db.New(e.deps.Pool)
	nonce, err := tasktoken.NewNonce()
	if err != nil {
		return err
	}
	token, err := e.tokens.Seal(ctx, tasktoken.PoolMachine(pool.ID), nonce)
	if err != nil {
		return err
	}
	hash := tasktoken.Record(nonce)
	phase := phases.Name(pool.Phase)
	pcfg := e.machines.Phases[phase]
	id, err := q.PoolMachineInsert(ctx, db.PoolMachineInsertParams{PoolID: pool.ID, App: pool.App, TokenHash: hash, Guest: pcfg.Guest.Name()})
	if err != nil {
		return err
	}
	key := machine.PoolMachineKey(id)
	spec := compute.MachineSpec{
		App: pool.App, Image: pcfg.Image, Region: e.machines.Region,
		Name: fmt.Sprintf("pool-%d-m%d", pool.ID, id), TaskID: key, BatchID: deref(pool.BatchID), Attempt: 1, Phase: pool.Phase,
		Env: map[string]string{
			"POOL_LEASE_URL":        e.deps.Settings.CallbackURL + "/pools/" + strconv.FormatInt(pool.ID, 10) + "/lease",
			"POOL_TOKEN":            token,
			"POOL_IDLE_SECONDS":     strconv.Itoa(int(e.cfg.Idle / time.Second)),
			"CALLBACK_RETRY_WINDOW": strconv.FormatInt(e.machines.CallbackRetryWindow.Milliseconds(), 10),
			protocol.EnvVar:         protocol.Value(protocol.Current),
		},
		MemoryMB: pcfg.Guest.MemoryMB, CPUs: pcfg.Guest.CPUs, CPUKind: pcfg.Guest.CPUKind,
	}
	m, err := e.deps.Compute.Launch(ctx, spec)
	if err != nil && errors.Is(err, compute.ErrAmbiguous) {
		findCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 15*time.Second)
		defer cancel()
		if found, ferr := e.deps.Compute.FindByTask(findCtx, pool.App, key); ferr == nil && len(found) > 0 {
			m, err = found[0], nil
		}
	}
	if err != nil {
		if _, lerr := q.PoolMachineLose(context.WithoutCancel(ctx), db.PoolMachineLoseParams{IDs: []int64{id}, Reason: "its launch failed"}); lerr != nil {
			return errors.Join(err, lerr)
		}
		return err
	}
	ended, err := q.PoolMachineLaunched(ctx, db.PoolMachineLaunchedParams{ID: id, MachineID: &m.ID})
	if err != nil || !ended {
		return err
	}
	// Its pool closed while it was being launched (a reset, its batch
	// left the phase): nothing destroyed it, having no id yet.
	_, err = river.ClientFromContext[pgx.Tx](ctx).Insert(ctx, machine.DestroyArgs{App: pool.App, MachineIDs: []string{m.ID}}, nil)
	return err
}

// launchFailed counts a failed launch against the pool's batches
// (machine.LaunchFailure: retried with backoff; a batch whose launches
// keep failing goes to ERROR) and comes back after the backoff.
func (w *ScaleWorker) launchFailed(ctx context.Context, pool db.Pool, cause error) error {
	e := w.e
	batches, err := w.batches(ctx, pool)
	if err != nil {
		return err
	}
	client := river.ClientFromContext[pgx.Tx](ctx)
	delay := scaleEvery
	for _, id := range batches {
		var out machine.LaunchFailureOutcome
		err := pgx.BeginFunc(ctx, e.deps.Pool, func(tx pgx.Tx) error {
			var err error
			out, err = machine.LaunchFailure(ctx, jobs.Tx{Tx: tx, River: client}, e.deps, e.machines, id, pool.Phase, cause)
			return err
		})
		if err != nil {
			return err
		}
		out.Report(e.deps, pool.Phase)
		delay = max(delay, out.Delay)
	}
	e.deps.Logger.Warn("launching pool machines failed", "pool_id", pool.ID, "phase", pool.Phase, "app", pool.App, "error", cause)
	return river.JobSnooze(delay)
}

// recovered ends the launch outage of the pool's batches, if one was
// running, and their wait for a spend bound unless one still holds some
// launches back (unbounded false): a machine launched.
func (w *ScaleWorker) recovered(ctx context.Context, pool db.Pool, unbounded bool) error {
	batches, err := w.batches(ctx, pool)
	if err != nil {
		return err
	}
	for _, id := range batches {
		if err := db.New(w.e.deps.Pool).BatchPhaseRetryReset(ctx, id); err != nil {
			return err
		}
		if unbounded && w.e.fleet.Bounded() {
			if err := machine.Launched(ctx, w.e.deps, id, pool.Phase); err != nil {
				return err
			}
		}
	}
	return nil
}

// held records that a spend bound holds (some of) the pool's launches
// back, for its batches (machine.Grant.Held): its machines go on leasing
// meanwhile.
func (w *ScaleWorker) held(ctx context.Context, pool db.Pool, bounds *machine.Grant) error {
	batches, err := w.batches(ctx, pool)
	if err != nil {
		return err
	}
	for _, id := range batches {
		if err := bounds.Held(ctx, w.e.deps, id, pool.Phase); err != nil {
			return err
		}
	}
	return nil
}

// batches are the pool's batch, or, for a shared pool, the batches in its
// phase with tasks waiting.
func (w *ScaleWorker) batches(ctx context.Context, pool db.Pool) ([]string, error) {
	if pool.BatchID != nil {
		return []string{*pool.BatchID}, nil
	}
	rows, err := db.New(w.e.deps.Pool).PoolBatches(ctx, db.PoolBatchesParams{Phase: pool.Phase, Max: 1000})
	if err != nil {
		return nil, err
	}
	ids := make([]string, len(rows))
	for i, r := range rows {
		ids[i] = r.ID
	}
	return ids, nil
}

func deref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}

func ptr[T any](v T) *T { return &v }
