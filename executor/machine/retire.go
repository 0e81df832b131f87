package machine

import (
	"context"
	"fmt"
	"sync"

	"github.com/jackc/pgx/v5"

	"github.com/arke-institute/orchestrator/db"
	"github.com/arke-institute/orchestrator/jobs"
	"github.com/arke-institute/orchestrator/phases"
)

// retireConcurrency bounds the destroy requests one launcher run sends.
const retireConcurrency = 8

// retirement is what one retirement pass came to.
type retirement struct {
	released int // tasks launchable again
	waiting  int // tasks whose machine could not be destroyed yet
}

// retire destroys the machines of the phase's tasks waiting to be retried
// (a timed-out attempt, a transient error) and makes those tasks
// launchable again: a task is claimed only once its last machine is gone,
// so that no task has two machines alive at once. A destruction that fails
// is tried again on the launcher's next run, until TASK_RETIRE_LIMIT has
// passed: then the launcher gives up on it (the provider keeps refusing)
// and launches the task again, as a machine that could not be destroyed
// for that long is most likely gone, and the task must not wait for ever.
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
		gaveUp   []string
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
			switch {
			case err == nil:
			case r.Overdue:
				gaveUp = append(gaveUp, r.ID)
				w.deps.Logger.Warn("gave up destroying a retried task's machine", "batch_id", batchID, "task_id", r.ID, "phase", string(name),
					"machine_id", r.MachineID, "error", err)
			default:
				out.waiting++
				if firstErr == nil {
					firstErr = err
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
	err = pgx.BeginFunc(ctx, w.deps.Pool, func(tx pgx.Tx) error {
		q := db.New(tx)
		ids, err := q.TaskReleaseRetired(ctx, db.TaskReleaseRetiredParams{IDs: release.ids, Attempts: release.attempts})
		if err != nil {
			return fmt.Errorf("releasing retried tasks: %w", err)
		}
		out.released = len(ids)
		if len(gaveUp) == 0 {
			return nil
		}
		events := make([]db.BatchEventInsertManyParams, 0, len(gaveUp))
		for _, id := range gaveUp {
			events = append(events, jobs.NewEvent(batchID, db.EventTaskRetrying, string(name), id, map[string]any{
				"reason": fmt.Sprintf("its last machine could not be destroyed within %s; launching anyway", w.deps.Settings.TaskRetireLimit),
			}))
		}
		_, err = q.BatchEventInsertMany(ctx, events)
		return err
	})
	return out, err
}
