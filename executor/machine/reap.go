package machine

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/riverqueue/river"

	"github.com/arke-institute/orchestrator/compute"
	"github.com/arke-institute/orchestrator/db"
	"github.com/arke-institute/orchestrator/fanin"
	"github.com/arke-institute/orchestrator/jobs"
)

// ReapArgs is the orphan reaper (machine_reap), every ORPHAN_REAP_INTERVAL,
// one at a time across the fleet.
type ReapArgs struct{}

// Kind is the River job kind.
func (ReapArgs) Kind() string { return "machine_reap" }

// InsertOpts keeps one reaper at a time.
func (ReapArgs) InsertOpts() river.InsertOpts {
	return river.InsertOpts{UniqueOpts: river.UniqueOpts{ByState: fanin.UniqueUnfinished}}
}

// ReapWorker works ReapArgs.
type ReapWorker struct {
	jobs.Defaults[ReapArgs]
	e *Executor
}

// Work reaps the orphans (Executor.Reap).
func (w *ReapWorker) Work(ctx context.Context, _ *river.Job[ReapArgs]) error {
	_, err := w.e.Reap(ctx)
	return err
}

// poolMachinePrefix starts the task_id metadata of a pool's machines,
// followed by their pool_machines id: a task id never has it (a task id
// is its phase's prefix, "_" and a ULID).
const poolMachinePrefix = "pool-"

// PoolMachineKey is the task_id metadata of the pool machine id.
func PoolMachineKey(id int64) string { return poolMachinePrefix + strconv.FormatInt(id, 10) }

// poolMachineOf is the pool machine id of a task_id metadata, if it names
// one.
func poolMachineOf(key string) (int64, bool) {
	s, ok := strings.CutPrefix(key, poolMachinePrefix)
	if !ok {
		return 0, false
	}
	id, err := strconv.ParseInt(s, 10, 64)
	return id, err == nil
}

// reapPerRun bounds the machines one run destroys; the next run goes on.
const reapPerRun = 200

// reapConcurrency bounds the destroy requests in flight.
const reapConcurrency = 8

// Orphan is a machine of ours that nothing wants.
type Orphan struct {
	compute.Machine
	// Phase is its task's, when the task is still there.
	Phase string
	// Reason says why nothing wants it.
	Reason string
}

// Reaped is what a run of the reaper came to.
type Reaped struct {
	// Found are the orphans it found, and Destroyed those it destroyed.
	Found, Destroyed []Orphan
}

// Reap lists the machines carrying our metadata in every app the phases
// and the pools use (one list per app), and destroys those past
// ORPHAN_GRACE that no live task or pool machine wants (orphanReason):
// a machine of a task that is gone (a batch reset, pruned or deleted) or
// ended, of an earlier attempt, a duplicate of a launch, or of a pool
// machine that ended. Each destruction is logged, counted and, while its
// batch exists, a machine.orphan_destroyed event. An app whose list fails
// is logged and left to the next run.
func (e *Executor) Reap(ctx context.Context) (Reaped, error) {
	apps, err := e.apps(ctx)
	if err != nil {
		return Reaped{}, err
	}
	var out Reaped
	cutoff := time.Now().Add(-e.cfg.OrphanGrace)
	for _, app := range apps {
		listed, err := e.deps.Compute.ListOwned(ctx, app)
		if err != nil {
			e.deps.Logger.Warn("listing machines for orphans", "app", app, "error", err)
			continue
		}
		var old []compute.Machine
		for _, m := range listed {
			// A machine of unknown age is never judged; one being
			// destroyed is on its way.
			if !m.CreatedAt.IsZero() && !m.CreatedAt.After(cutoff) && m.State != "destroying" && m.State != "destroyed" {
				old = append(old, m)
			}
		}
		orphans, err := e.orphans(ctx, old)
		if err != nil {
			return out, err
		}
		e.deps.Metrics.OrphansFound(app, len(orphans))
		out.Found = append(out.Found, orphans...)
	}
	if len(out.Found) > reapPerRun {
		e.deps.Logger.Warn("more orphan machines than a run destroys: the next run goes on", "found", len(out.Found), "per_run", reapPerRun)
	}
	out.Destroyed = e.destroyOrphans(ctx, out.Found[:min(len(out.Found), reapPerRun)])
	return out, e.recordOrphans(ctx, out.Destroyed)
}

// apps are the apps of the machine phases and of the pools, sorted.
func (e *Executor) apps(ctx context.Context) ([]string, error) {
	set := map[string]bool{}
	for _, p := range e.cfg.Phases {
		set[p.App] = true
	}
	pools, err := db.New(e.deps.Pool).MachinePoolApps(ctx)
	if err != nil {
		return nil, fmt.Errorf("reading the pools' apps: %w", err)
	}
	for _, app := range pools {
		set[app] = true
	}
	delete(set, "")
	return slices.Sorted(maps.Keys(set)), nil
}

// orphans are the machines among ms that nothing wants, with why.
func (e *Executor) orphans(ctx context.Context, ms []compute.Machine) ([]Orphan, error) {
	if len(ms) == 0 {
		return nil, nil
	}
	var taskIDs []string
	var poolIDs []int64
	for _, m := range ms {
		if id, ok := poolMachineOf(m.TaskID); ok {
			poolIDs = append(poolIDs, id)
		} else {
			taskIDs = append(taskIDs, m.TaskID)
		}
	}
	q := db.New(e.deps.Pool)
	tasks, err := q.MachineTaskOwners(ctx, taskIDs)
	if err != nil {
		return nil, fmt.Errorf("reading the tasks of listed machines: %w", err)
	}
	pools, err := q.MachinePoolOwners(ctx, poolIDs)
	if err != nil {
		return nil, fmt.Errorf("reading the pool machines of listed machines: %w", err)
	}
	taskOf := make(map[string]db.MachineTaskOwnersRow, len(tasks))
	for _, t := range tasks {
		taskOf[t.ID] = t
	}
	poolOf := make(map[int64]db.MachinePoolOwnersRow, len(pools))
	for _, p := range pools {
		poolOf[p.ID] = p
	}
	var out []Orphan
	for _, m := range ms {
		var why, phase string
		if id, ok := poolMachineOf(m.TaskID); ok {
			p, found := poolOf[id]
			why = poolOrphanReason(m, p, found)
		} else {
			t, found := taskOf[m.TaskID]
			why, phase = taskOrphanReason(m, t, found), t.Phase
		}
		if why != "" {
			out = append(out, Orphan{Machine: m, Phase: phase, Reason: why})
		}
	}
	return out, nil
}

// taskOrphanReason says why no task wants m, whose task is t (found: it
// exists), or "" when its task does: the task is processing in m's
// attempt, on m or on a machine not recorded yet (the sweep looks it up
// at the deadline).
func taskOrphanReason(m compute.Machine, t db.MachineTaskOwnersRow, found bool) string {
	switch {
	case !found:
		return "its task is gone"
	case t.Status != "processing":
		return fmt.Sprintf("its task is %s", t.Status)
	case int(t.Attempt) != m.Attempt:
		return fmt.Sprintf("its task is in attempt %d, the machine was launched for attempt %d", t.Attempt, m.Attempt)
	case t.MachineID != nil && *t.MachineID != m.ID:
		return fmt.Sprintf("its task's attempt runs on machine %s", *t.MachineID)
	}
	return ""
}

// poolOrphanReason says why no pool machine wants m, whose pool machine
// row is p (found: it exists), or "" when it does: the row has not ended
// and is m's (or its launch is not recorded yet).
func poolOrphanReason(m compute.Machine, p db.MachinePoolOwnersRow, found bool) string {
	switch {
	case !found:
		return "its pool machine is gone"
	case !p.Live:
		return "its pool machine ended"
	case p.MachineID != nil && *p.MachineID != m.ID:
		return fmt.Sprintf("its pool machine is machine %s", *p.MachineID)
	}
	return ""
}

// destroyOrphans destroys the orphans, a few at a time, and returns those
// it destroyed; a failure is logged and left to the next run.
func (e *Executor) destroyOrphans(ctx context.Context, orphans []Orphan) []Orphan {
	var (
		mu        sync.Mutex
		destroyed []Orphan
		wg        sync.WaitGroup
		sem       = make(chan struct{}, reapConcurrency)
	)
	for _, o := range orphans {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer func() { <-sem; wg.Done() }()
			attrs := []any{"app", o.App, "machine_id", o.ID, "machine_task_id", o.TaskID, "batch_id", o.BatchID, "reason", o.Reason}
			if err := e.deps.Compute.Destroy(ctx, o.App, o.ID); err != nil {
				e.deps.Logger.Warn("destroying an orphan machine", append(attrs, "error", err)...)
				return
			}
			e.deps.Logger.Warn("destroyed an orphan machine", append(attrs, "created_at", o.CreatedAt)...)
			e.deps.Metrics.OrphanDestroyed(o.App)
			mu.Lock()
			destroyed = append(destroyed, o)
			mu.Unlock()
		}()
	}
	wg.Wait()
	slices.SortFunc(destroyed, func(a, b Orphan) int { return strings.Compare(a.ID, b.ID) })
	return destroyed
}

// recordOrphans writes a machine.orphan_destroyed event for each
// destroyed orphan whose batch exists.
func (e *Executor) recordOrphans(ctx context.Context, destroyed []Orphan) error {
	var batchIDs []string
	for _, o := range destroyed {
		if o.BatchID != "" {
			batchIDs = append(batchIDs, o.BatchID)
		}
	}
	if len(batchIDs) == 0 {
		return nil
	}
	q := db.New(e.deps.Pool)
	existing, err := q.MachineBatchesExisting(ctx, batchIDs)
	if err != nil {
		return fmt.Errorf("reading the orphans' batches: %w", err)
	}
	var events []db.BatchEventInsertManyParams
	for _, o := range destroyed {
		if !slices.Contains(existing, o.BatchID) {
			continue
		}
		taskID := o.TaskID
		if _, pool := poolMachineOf(taskID); pool {
			taskID = ""
		}
		events = append(events, jobs.NewEvent(o.BatchID, db.EventOrphanDestroyed, o.Phase, taskID, map[string]any{
			"machine_id": o.ID, "app": o.App, "reason": o.Reason, "machine_task_id": o.TaskID,
		}))
	}
	if len(events) == 0 {
		return nil
	}
	if _, err := q.BatchEventInsertMany(ctx, events); err != nil {
		return fmt.Errorf("recording destroyed orphans: %w", err)
	}
	return nil
}
