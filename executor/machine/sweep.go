package machine

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river"

	"github.com/arke-institute/orchestrator/compute"
	"github.com/arke-institute/orchestrator/db"
	"github.com/arke-institute/orchestrator/executor/tasks"
	"github.com/arke-institute/orchestrator/fanin"
	"github.com/arke-institute/orchestrator/jobs"
	"github.com/arke-institute/orchestrator/metrics"
	"github.com/arke-institute/orchestrator/phases"
)

// Sweep checks the running tasks' machines (checkMachines), then times
// out the tasks past their deadline, a few (batch, phase) groups a run
// (jobs.SweepGroupsPerRun): within the restart grace it does nothing.
func (e *Executor) Sweep(ctx context.Context, client *river.Client[pgx.Tx], grace bool) error {
	if grace {
		return nil
	}
	if err := e.checkMachines(ctx); err != nil {
		return err
	}
	groups, err := e.ExpiredGroups(ctx)
	if err != nil {
		return err
	}
	for _, g := range groups {
		if err := e.settleUnlaunched(ctx, client, g.BatchID, g.Phase); err != nil {
			return err
		}
		if err := e.expire(ctx, client, g.BatchID, g.Phase); err != nil {
			return err
		}
	}
	return nil
}

// What the sweep does with an expired task whose machine was never
// recorded (TaskSettleUnlaunched's actions).
const (
	settleFound   = "found"   // record the machine its lookup found
	settleRelease = "release" // launch it again
	settleFail    = "fail"    // out of launches: fail it
)

// maxUnlaunched bounds a task's launches that made no machine. They are not
// failed attempts, so TASK_MAX_ATTEMPTS does not bound them; this does, so
// that a task whose launches never make a machine (while other launches of
// its phase do, keeping LAUNCH_OUTAGE_BUDGET unspent) ends. An outage or a
// killed launcher accounts for one each.
const maxUnlaunched = 10

// settleUnlaunched deals with expired tasks that have no recorded machine
// (the launcher died or could not tell whether its launch made one, between
// claiming and recording). It looks each machine up by the task's id and
// launch attempt (compute.Fence): a live one of this attempt is recorded,
// and then times out like any other; a task with none goes back to pending
// to be launched again. That costs the task none of its TASK_MAX_ATTEMPTS:
// no worker ran, so an outage of Fly (answers 503 to both the launch and
// the lookup) or a killed launcher is not the task's failure. The
// maxUnlaunched-th such launch fails the task. A failed lookup is tried
// again on the next sweep. Machines of earlier attempts, and duplicates of
// this one, are destroyed.
func (e *Executor) settleUnlaunched(ctx context.Context, client *river.Client[pgx.Tx], batchID, phase string) error {
	q := db.New(e.deps.Pool)
	rows, err := q.TaskListExpiredUnlaunched(ctx, db.TaskListExpiredUnlaunchedParams{BatchID: batchID, Phase: phase})
	if err != nil || len(rows) == 0 {
		return err
	}
	app := e.cfg.Phases[phases.Name(phase)].App
	msg := fmt.Sprintf("no machine could be launched in %d tries", maxUnlaunched)
	settle := db.TaskSettleUnlaunchedParams{Error: msg}
	decide := func(id string, attempt int32, action, machineID string) {
		settle.IDs = append(settle.IDs, id)
		settle.Attempts = append(settle.Attempts, attempt)
		settle.Actions = append(settle.Actions, action)
		settle.MachineIDs = append(settle.MachineIDs, machineID)
	}
	var unwanted []string // machines of earlier attempts, and duplicates
	for _, r := range rows {
		found, err := e.deps.Compute.FindByTask(ctx, app, r.ID)
		if err != nil {
			e.deps.Logger.Warn("looking up an unrecorded machine", "batch_id", batchID, "task_id", r.ID, "phase", phase, "error", err)
			continue
		}
		f := compute.Fence(found, int(r.Attempt))
		for _, m := range f.Stale {
			unwanted = append(unwanted, m.ID)
		}
		switch {
		case len(f.Current) > 0:
			for _, m := range f.Current[1:] {
				unwanted = append(unwanted, m.ID)
			}
			decide(r.ID, r.Attempt, settleFound, f.Current[0].ID)
		case r.Unlaunched+1 < maxUnlaunched:
			decide(r.ID, r.Attempt, settleRelease, "")
		default:
			decide(r.ID, r.Attempt, settleFail, "")
		}
	}
	if len(unwanted) > 0 {
		if _, err := client.Insert(ctx, DestroyArgs{App: app, MachineIDs: unwanted}, nil); err != nil {
			return fmt.Errorf("queueing the destruction of unwanted machines: %w", err)
		}
	}
	if len(settle.IDs) == 0 {
		return nil
	}
	gaveUp, relaunched := 0, 0 // tasks failed for want of a machine, and sent back for another
	err = fanin.EndTasks(ctx, e.deps.Pool, client, fanin.PhaseRef{BatchID: batchID, Phase: phase}, func(tx pgx.Tx) (bool, error) {
		q := db.New(tx)
		settled, err := q.TaskSettleUnlaunched(ctx, settle)
		if err != nil {
			return false, err
		}
		var events []db.BatchEventInsertManyParams
		for _, t := range settled {
			switch t.Action {
			case settleRelease:
				relaunched++
				events = append(events, jobs.NewEvent(batchID, db.EventTaskRetrying, phase, t.ID, map[string]any{
					"reason": "no machine was found for its launch (not counted as an attempt)",
				}))
			case settleFail:
				gaveUp++
				events = append(events, jobs.NewEvent(batchID, db.EventTaskFailed, phase, t.ID, map[string]any{"error": msg}))
			}
		}
		if relaunched > 0 {
			if _, err := client.InsertTx(ctx, tx, PhaseLaunchArgs{BatchID: batchID, Phase: phase}, nil); err != nil {
				return false, err
			}
		}
		if _, err := q.BatchEventInsertMany(ctx, events); err != nil {
			return false, err
		}
		return gaveUp > 0, nil
	})
	if err == nil {
		e.deps.Metrics.TasksRetried(phase, metrics.RetryNoMachine, relaunched)
	}
	if err == nil && gaveUp > 0 {
		e.deps.Metrics.TasksFinished(phase, metrics.TaskFailed, gaveUp)
		e.deps.Logger.Warn("tasks failed: no machine could be launched", "batch_id", batchID, "phase", phase, "count", gaveUp)
	}
	return err
}

// expire ends the expired tasks of one (batch, phase) (tasks.Expire): a
// task to be retried waits for its launcher to retire its machine before
// it is launched again (retire); the machines of the others are queued
// for destruction.
func (e *Executor) expire(ctx context.Context, client *river.Client[pgx.Tx], batchID, phase string) error {
	return e.Expire(ctx, client, batchID, phase, tasks.Expiry{Then: func(tx jobs.Tx, rows []db.TaskFailExpiredRow) error {
		var machines []string
		retried := false
		for _, r := range rows {
			switch {
			case r.Retry:
				retried = true // its launcher destroys the machine first
			case r.MachineID != nil:
				machines = append(machines, *r.MachineID)
			}
		}
		if len(machines) > 0 {
			if _, err := tx.River.InsertTx(ctx, tx.Tx, DestroyArgs{App: e.cfg.Phases[phases.Name(phase)].App, MachineIDs: machines}, nil); err != nil {
				return err
			}
		}
		if retried {
			if _, err := tx.River.InsertTx(ctx, tx.Tx, PhaseLaunchArgs{BatchID: batchID, Phase: phase}, nil); err != nil {
				return err
			}
		}
		return nil
	}})
}
