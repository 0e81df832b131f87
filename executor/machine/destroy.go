package machine

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/arke-institute/orchestrator/jobs"
	"github.com/riverqueue/river"
)

// DestroyArgs destroys machines that are no longer wanted: those of
// timed-out tasks, of a reset batch, or launched for a task that ended
// meanwhile. Best effort, retried a few times; a machine already gone is
// fine. (No batch_id field: an admin reset cancels its batch's jobs by that
// key, and must not cancel the cleanup it queues.)
type DestroyArgs struct {
	App        string   `json:"app"`
	MachineIDs []string `json:"machine_ids"`
}

// Kind is the River job kind.
func (DestroyArgs) Kind() string { return "machine_destroy" }

// InsertOpts limits retries: machines auto-destroy when their program
// exits, so this is cleanup of hung ones, not correctness.
func (DestroyArgs) InsertOpts() river.InsertOpts { return river.InsertOpts{MaxAttempts: 5} }

// DestroyWorker works DestroyArgs.
type DestroyWorker struct {
	jobs.Defaults[DestroyArgs]
	deps jobs.Deps
}

// Work destroys the machines, a few at a time.
func (w *DestroyWorker) Work(ctx context.Context, job *river.Job[DestroyArgs]) error {
	var (
		mu   sync.Mutex
		errs []error
		wg   sync.WaitGroup
		sem  = make(chan struct{}, 8)
	)
	for _, id := range job.Args.MachineIDs {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer func() { <-sem; wg.Done() }()
			if err := w.deps.Compute.Destroy(ctx, job.Args.App, id); err != nil {
				mu.Lock()
				errs = append(errs, fmt.Errorf("destroying machine %s of %s: %w", id, job.Args.App, err))
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	return errors.Join(errs...)
}
