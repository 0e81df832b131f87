package machine

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/arke-institute/orchestrator/compute"
	"github.com/arke-institute/orchestrator/db"
	"github.com/arke-institute/orchestrator/fanin"
	"github.com/arke-institute/orchestrator/phases"
)

// checkTimes are when each (batch, phase)'s machines were last checked, in
// this process (a sweep runs in one process at a time; another process's
// sweep may check again sooner, which is harmless), and how long the
// group waits between checks.
type checkTimes struct {
	mu   sync.Mutex
	last map[fanin.PhaseRef]time.Time
	wait map[fanin.PhaseRef]time.Duration
}

func newCheckTimes() *checkTimes {
	return &checkTimes{last: map[fanin.PhaseRef]time.Time{}, wait: map[fanin.PhaseRef]time.Duration{}}
}

// checkShare bounds the time spent checking a group's machines to about
// 1/checkShare of the time: a group whose check took d waits at least
// checkShare*d for its next one. Listing a batch's 100,000 machines takes
// a second or two of the API's and ours; every MACHINE_CHECK_INTERVAL it
// took a core of the 2-core machine make bench runs on.
const checkShare = 20

// due lists the groups not checked for MACHINE_CHECK_INTERVAL (or the
// longer wait their last check's length set: took), marking them checked
// now, and forgets the groups no longer running.
func (c *checkTimes) due(groups []fanin.PhaseRef, every time.Duration, now time.Time) []fanin.PhaseRef {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []fanin.PhaseRef
	for _, g := range groups {
		if now.Sub(c.last[g]) >= max(every, c.wait[g]) {
			c.last[g] = now
			out = append(out, g)
		}
	}
	for g := range c.last {
		if !slices.Contains(groups, g) {
			delete(c.last, g)
			delete(c.wait, g)
		}
	}
	return out
}

// took records how long g's check took: its next waits checkShare times
// that, or MACHINE_CHECK_INTERVAL if longer.
func (c *checkTimes) took(g fanin.PhaseRef, d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.wait[g] = checkShare * d
}

// checkMachines checks the machines of the running tasks of each
// (batch, phase) against the Machines API, at most every
// MACHINE_CHECK_INTERVAL: one list of the batch's machines per app, not a
// call per task. A machine that stopped, failed or is no longer listed
// (its worker exited without calling back: a crash, an eviction, a host
// lost) has its task's deadline brought within MACHINE_GONE_GRACE, for a
// callback still in flight; the sweep then retries the task with that
// reason instead of waiting out the task's timeout. A machine launched
// less than the grace ago is not judged yet (the list may lag its
// creation). A failed list is tried again at the next check.
func (e *Executor) checkMachines(ctx context.Context) error {
	running, err := e.Running(ctx)
	if err != nil || len(running) == 0 {
		return err
	}
	refs := make([]fanin.PhaseRef, len(running))
	for i, r := range running {
		refs[i] = fanin.PhaseRef{BatchID: r.BatchID, Phase: r.Phase}
	}
	for _, g := range e.checked.due(refs, e.cfg.CheckInterval, time.Now()) {
		start := time.Now()
		if err := e.checkGroup(ctx, g); err != nil {
			return err
		}
		e.checked.took(g, time.Since(start))
	}
	return nil
}

// checkGroup checks the machines of one (batch, phase)'s running tasks.
func (e *Executor) checkGroup(ctx context.Context, g fanin.PhaseRef) error {
	app := e.cfg.Phases[phases.Name(g.Phase)].App
	rows, err := db.New(e.deps.Pool).TaskListMachinesRunning(ctx, db.TaskListMachinesRunningParams{
		BatchID: g.BatchID, Phase: g.Phase, LaunchedBefore: time.Now().Add(-e.cfg.GoneGrace),
	})
	if err != nil || len(rows) == 0 {
		return err
	}
	// A task that ends, or is launched again, after it was read as
	// running is left alone by the mark, which wants it processing on the
	// machine read.
	listed, err := e.deps.Compute.ListByBatch(ctx, app, g.BatchID)
	if err != nil {
		e.deps.Logger.Warn("checking running machines", "batch_id", g.BatchID, "phase", g.Phase, "app", app, "error", err)
		return nil
	}
	byID := make(map[string]compute.Machine, len(listed))
	for _, m := range listed {
		byID[m.ID] = m
	}
	var mark db.TaskMarkMachinesGoneParams
	for _, r := range rows {
		m, ok := byID[r.MachineID]
		var why string
		switch {
		case !ok:
			why = fmt.Sprintf("Machine %s vanished without calling back", r.MachineID)
		case m.Ended():
			why = fmt.Sprintf("Machine %s %s without calling back", r.MachineID, endedAs(m.State))
		default:
			continue
		}
		mark.IDs = append(mark.IDs, r.ID)
		mark.MachineIDs = append(mark.MachineIDs, r.MachineID)
		mark.Whys = append(mark.Whys, why)
	}
	if len(mark.IDs) == 0 {
		return nil
	}
	mark.GraceSeconds = e.cfg.GoneGrace.Seconds()
	marked, err := db.New(e.deps.Pool).TaskMarkMachinesGone(ctx, mark)
	if err != nil {
		return fmt.Errorf("marking gone machines of %s %s: %w", g.BatchID, g.Phase, err)
	}
	if len(marked) > 0 {
		e.deps.Logger.Warn("machines ended without calling back: their tasks will be retried", "batch_id", g.BatchID, "phase", g.Phase,
			"count", len(marked), "grace", e.cfg.GoneGrace.String())
	}
	return nil
}

// endedAs says how a machine in an ended state (compute.Machine.Ended)
// ended.
func endedAs(state string) string {
	switch state {
	case "failed":
		return "failed"
	case "destroying", "destroyed":
		return "was destroyed"
	case "suspending", "suspended":
		return "was suspended"
	}
	return "stopped"
}
