package machine

import (
	"context"
	"fmt"
	"sync"

	"github.com/arke-institute/orchestrator/db"
	"github.com/arke-institute/orchestrator/phases"
)

// retireConcurrency bounds the destroy requests one launcher run sends.
const retireConcurrency = 8

// retirement is what one retirement pass came to.
type retirement struct {
	released int // tasks launchable again
	waiting  int // tasks whose machine could not be destroyed yet
	// overdue is the last destruction error of a task that has waited
	// TASK_RETIRE_LIMIT or more: the Machines API is taken to be out.
	overdue error
}

// retire destroys the machines of the phase's tasks waiting to be retried
// (a timed-out attempt, a transient error) and makes those tasks
// launchable again: a task is claimed only once its last machine is gone
// (destroyed, or unknown to the provider), so that no task has two
// machines alive at once. A destruction that fails is tried again on the
// launcher's next run; one that has kept failing for TASK_RETIRE_LIMIT is
// reported (overdue), and the launcher counts it as an outage of the
// Machines API (LAUNCH_OUTAGE_BUDGET bounds it), never launching the task
// again meanwhile.
func (w *PhaseLaunchWorker) retire(ctx context.Context, batchID string, name phases.Name, pcfg Phase) (retirement, error) {
	rows, err := db.New(w.deps.Pool).TaskListRetiring(ctx, db.TaskListRetiringParams{BatchID: batchID, Phase: string(name), Max: launchChunk})
	if err != nil || len(rows) == 0 {
		return retirement{}, err
	}
	var (
		mu       sync.Mutex
		wg       sync.WaitGroup
		sem      = make(chan struct{}, retireConcurrency)
		release  taskAttempts
		out      retirement
		firstErr error
	)
	for _, r := range rows {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer func() { <-sem; wg.Done() }()
			err := w.deps.Compute.Destroy(ctx, pcfg.App, r.MachineID)
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				out.waiting++
				if firstErr == nil {
					firstErr = err
				}
				if r.Overdue {
					out.overdue = fmt.Errorf("destroying machine %s of retried task %s for %s or more: %w", r.MachineID, r.ID, w.deps.Settings.TaskRetireLimit, err)
				}
				return
			}
			release.ids = append(release.ids, r.ID)
			release.attempts = append(release.attempts, r.Attempt)
		}()
	}
	wg.Wait()
	if firstErr != nil {
		w.deps.Logger.Warn("destroying retried tasks' machines", "batch_id", batchID, "phase", string(name), "waiting", out.waiting, "error", firstErr)
	}
	if len(release.ids) == 0 {
		return out, nil
	}
	ids, err := db.New(w.deps.Pool).TaskReleaseRetired(ctx, db.TaskReleaseRetiredParams{IDs: release.ids, Attempts: release.attempts})
	if err != nil {
		return out, fmt.Errorf("releasing retried tasks: %w", err)
	}
	out.released = len(ids)
	return out, nil
}
