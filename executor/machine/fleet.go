package machine

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/arke-institute/orchestrator/db"
	"github.com/arke-institute/orchestrator/jobs"
	"github.com/arke-institute/orchestrator/metrics"
)

// fleetReadEvery is how long a process reuses its reading of the fleet's
// machines (MachineFleetUsage) before it reads again.
const fleetReadEvery = time.Second

// boundWait is how long a launcher whose launches wait for a spend bound
// waits before it looks again.
const boundWait = time.Second

// Fleet hands out launches under the spend bounds, MAX_MACHINES and
// MAX_MACHINE_SECONDS_PER_HOUR, for every launcher of the process: the
// machine executor's and the pools'. It reads the fleet's machines in one
// query, at most every fleetReadEvery, and counts the machines it granted
// since as running until a reading includes them; so within a process the
// bound is never passed, and across processes by at most what the others
// granted in the last fleetReadEvery.
type Fleet struct {
	pool       *pgxpool.Pool
	metrics    *metrics.Metrics
	max        int
	maxSeconds float64

	mu sync.Mutex
	// read is when the last reading's query began; usage what it read.
	read  time.Time
	usage db.MachineFleetUsageRow
	// grants are the launches granted that the reading may not include.
	grants map[*Grant]struct{}
}

// NewFleet is the fleet of pool's database under cfg's bounds.
func NewFleet(pool *pgxpool.Pool, cfg Config, m *metrics.Metrics) *Fleet {
	return &Fleet{pool: pool, metrics: m, max: cfg.MaxMachines, maxSeconds: float64(cfg.MaxMachineSecondsPerHour), grants: map[*Grant]struct{}{}}
}

// Grant is a launcher's share of the bounds: N machines it may launch, or
// none and the Bound that holds it back.
type Grant struct {
	// N is how many machines may be launched.
	N int
	// Bound is the bound that holds (some of) the launches back
	// (metrics.BoundMaxMachines, metrics.BoundMachineSeconds), if one
	// does.
	Bound string
	// Usage is the fleet as last read, and Limit the bound's value.
	Usage db.MachineFleetUsageRow
	Limit float64

	fleet   *Fleet
	settled time.Time // when the launcher's rows were written; zero before
}

// Bounded reports whether any bound is set.
func (f *Fleet) Bounded() bool { return f != nil && (f.max > 0 || f.maxSeconds > 0) }

// Take grants up to want launches under the bounds (all of them when
// there are none, without a query). The caller settles the grant once the
// rows of what it launched (claimed tasks, pool machines) are committed.
func (f *Fleet) Take(ctx context.Context, want int) (*Grant, error) {
	if !f.Bounded() || want <= 0 {
		return &Grant{N: want}, nil
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if time.Since(f.read) >= fleetReadEvery {
		began := time.Now()
		usage, err := db.New(f.pool).MachineFleetUsage(ctx)
		if err != nil {
			return nil, fmt.Errorf("reading the fleet's machines: %w", err)
		}
		f.read, f.usage = began, usage
		for g := range f.grants {
			// A reading that began after a grant's rows were written
			// counts them.
			if !g.settled.IsZero() && g.settled.Before(began) {
				delete(f.grants, g)
			}
		}
	}
	running := f.usage.Running
	for g := range f.grants {
		running += int64(g.N)
	}
	g := &Grant{Usage: f.usage, fleet: f}
	g.Usage.Running = running
	secondsReached := f.maxSeconds > 0 && f.usage.Seconds >= f.maxSeconds
	machinesReached := f.max > 0 && running >= int64(f.max)
	switch {
	case secondsReached:
		g.Bound, g.Limit = metrics.BoundMachineSeconds, f.maxSeconds
	case machinesReached:
		g.Bound, g.Limit = metrics.BoundMaxMachines, float64(f.max)
	case f.max > 0:
		g.N = min(want, f.max-int(running))
		if g.N < want {
			g.Bound, g.Limit = metrics.BoundMaxMachines, float64(f.max) // it holds the rest back
		}
	default:
		g.N = want
	}
	if g.N > 0 {
		f.grants[g] = struct{}{}
		// No bound holds launches back (Held says when one does).
		if f.maxSeconds > 0 {
			f.metrics.BoundReached(metrics.BoundMachineSeconds, false)
		}
		if f.max > 0 {
			f.metrics.BoundReached(metrics.BoundMaxMachines, false)
		}
	}
	return g, nil
}

// Settle says that used of the grant's machines have their rows written
// (the rest were not launched): a reading that begins from now on counts
// them.
func (g *Grant) Settle(used int) {
	f := g.fleet
	if f == nil || g.N == 0 {
		return
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	g.N = max(0, min(g.N, used))
	g.settled = time.Now()
	if g.N == 0 {
		delete(f.grants, g)
	}
}

// Held records that a (batch, phase)'s launches, with tasks pending, wait
// for g's bound (and so does the gauge, until a launch is granted): the
// first time the phase waits (or for another bound than last time) it
// writes a phase.launch_bounded event and logs it.
func (g *Grant) Held(ctx context.Context, deps jobs.Deps, batchID, phase string) error {
	deps.Metrics.BoundReached(g.Bound, true)
	q := db.New(deps.Pool)
	first, err := q.LaunchBoundSet(ctx, db.LaunchBoundSetParams{BatchID: batchID, Phase: phase, Bound: g.Bound})
	if err != nil || !first {
		return err
	}
	data := map[string]any{"bound": g.Bound, "limit": g.Limit, "running": g.Usage.Running, "machine_seconds": int64(g.Usage.Seconds)}
	if err := q.EventRecord(ctx, db.Event{BatchID: batchID, Type: db.EventLaunchBounded, Phase: phase, Data: data}); err != nil {
		return err
	}
	deps.Logger.Warn("launches wait for a spend bound", "batch_id", batchID, "phase", phase, "bound", g.Bound, "limit", g.Limit,
		"running", g.Usage.Running, "machine_seconds", int64(g.Usage.Seconds))
	return nil
}

// Launched ends a (batch, phase)'s wait for a bound, if it had one: it
// launched. A later wait writes no event.
func Launched(ctx context.Context, deps jobs.Deps, batchID, phase string) error {
	return db.New(deps.Pool).LaunchBoundClear(ctx, db.LaunchBoundClearParams{BatchID: batchID, Phase: phase})
}

// BoundsInto adds to progress, the machine phases' of batches, the spend
// bound each phase's launches wait for now: Detail's
// launch_bounded_<bound> (launch_bounded_max_machines,
// launch_bounded_machine_seconds_per_hour) is how many seconds they have
// waited, while tasks are pending.
func BoundsInto(ctx context.Context, q *db.Queries, progress map[string][]jobs.PhaseProgress) error {
	if len(progress) == 0 {
		return nil
	}
	ids := make([]string, 0, len(progress))
	for id := range progress {
		ids = append(ids, id)
	}
	bounds, err := q.LaunchBoundList(ctx, ids)
	if err != nil {
		return fmt.Errorf("reading the batches' launch bounds: %w", err)
	}
	for _, b := range bounds {
		ps := progress[b.BatchID]
		for i := range ps {
			if ps[i].Phase != b.Phase || ps[i].TasksPending == 0 {
				continue
			}
			if ps[i].Detail == nil {
				ps[i].Detail = map[string]int64{}
			}
			ps[i].Detail["launch_bounded_"+b.Bound] = int64(time.Since(b.HeldSince).Seconds())
		}
	}
	return nil
}

// TableLaunchBounds is the table Prune removes a batch's launch bounds
// from.
const TableLaunchBounds = "launch_bounds"

// Prune removes the batch's tasks of the machine phases and their
// counters (tasks.Table), then its launch bounds, the pool phases' too.
func (e *Executor) Prune(ctx context.Context, q *db.Queries, batchID string, rows int32) (jobs.Removal, error) {
	out, err := e.Table.Prune(ctx, q, batchID, rows)
	if err != nil {
		return out, err
	}
	n, err := q.LaunchBoundDeleteByBatch(ctx, batchID)
	if out.Rows == nil {
		out.Rows = map[string]int64{}
	}
	out.Rows[TableLaunchBounds] = n
	out.Statements++
	return out, err
}
