package jobs

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"

	"github.com/arke-institute/orchestrator/db"
	"github.com/arke-institute/orchestrator/phases"
)

// riverDriver is the driver type River's transactional helpers are
// instantiated with.
type riverDriver = riverpgxv5.Driver

// PhaseCheckArgs is the fan-in of a phase: every task that ends enqueues one
// (unique per batch and phase while unfinished), and the one that finds no
// open task left moves the batch on.
type PhaseCheckArgs struct {
	BatchID string `json:"batch_id"`
	Phase   string `json:"phase"`
}

// Kind is the River job kind.
func (PhaseCheckArgs) Kind() string { return "phase_check" }

// InsertOpts makes the check unique while unfinished. "completed" is left
// out of ByState on purpose: once a check has finished, the next task end
// must be able to enqueue a new one, or its wake-up would be lost.
func (PhaseCheckArgs) InsertOpts() river.InsertOpts {
	return river.InsertOpts{UniqueOpts: river.UniqueOpts{ByArgs: true, ByState: uniqueUnfinished}}
}

// PhaseCheckWorker works PhaseCheckArgs.
type PhaseCheckWorker struct {
	river.WorkerDefaults[PhaseCheckArgs]
	deps Deps
}

// Timeout is short: the check holds the batch's exclusive lock, and a
// stuck check must not block the batch's callbacks for long.
func (w *PhaseCheckWorker) Timeout(*river.Job[PhaseCheckArgs]) time.Duration { return 2 * time.Minute }

// Work decides whether the phase is over and, if so, transitions it.
//
// Why no wake-up is lost: the transaction first takes the batch's EXCLUSIVE
// advisory lock, while every transaction that ends a task holds the SHARED
// one from before it updates the task until after it has enqueued its check.
// So each task end either committed before this lock was granted (and the
// count below sees it), or it waits for this transaction, which completes
// this job in the same transaction, and then finds no unfinished check and
// enqueues a new one. Without the lock, a check running concurrently with
// the last callback could count it as open while that callback's enqueue is
// swallowed by the still-running check's unique slot, and the phase would
// hang.
func (w *PhaseCheckWorker) Work(ctx context.Context, job *river.Job[PhaseCheckArgs]) error {
	args := job.Args
	return pgx.BeginFunc(ctx, w.deps.Pool, func(tx pgx.Tx) error {
		q := db.New(tx)
		if fanInGuard {
			if err := q.BatchLockExclusive(ctx, args.BatchID); err != nil {
				return fmt.Errorf("locking batch %s: %w", args.BatchID, err)
			}
		}
		done := func() error {
			_, err := river.JobCompleteTx[*riverDriver](ctx, tx, job)
			return err
		}
		batch, err := q.BatchGetByIDForUpdate(ctx, args.BatchID)
		if errors.Is(err, pgx.ErrNoRows) {
			return done()
		}
		if err != nil {
			return err
		}
		if batch.Status != args.Phase {
			return done() // already transitioned, reset or finished
		}
		hasOpen, err := q.TaskHasOpen(ctx, db.TaskHasOpenParams{BatchID: args.BatchID, Phase: args.Phase})
		if err != nil {
			return err
		}
		if afterOpenCount != nil {
			open := int64(0)
			if hasOpen {
				open = 1
			}
			afterOpenCount(args.BatchID, open)
		}
		if hasOpen {
			return done()
		}
		if err := w.transition(ctx, tx, batch); err != nil {
			return err
		}
		return done()
	})
}

// fanInGuard is the exclusive lock above. It is a variable only so that the
// fan-in test can show the race it prevents; production never changes it.
var fanInGuard = true

// afterOpenCount, when set (by tests only), runs inside the check's
// transaction right after it has looked for open tasks (open is 1 when
// there is any, else 0): the moment at which
// an unguarded check is exposed to the lost wake-up.
var afterOpenCount func(batchID string, open int64)

// transition applies the phase's transform to the batch's current file
// generation, writes the next generation, and enters the next phase with
// work, or finishes the batch. A transform that fails for one file never
// loses it: the file passes through unchanged and the problem is recorded.
func (w *PhaseCheckWorker) transition(ctx context.Context, tx pgx.Tx, batch db.Batch) error {
	q := db.New(tx)
	t0 := time.Now()
	lap := func() time.Duration { d := time.Since(t0); t0 = time.Now(); return d }
	name := phases.Name(batch.Status)
	p, ok := phases.Get(name)
	if !ok {
		return failBatch(ctx, q, batch.ID, batch.Status, fmt.Sprintf("unknown phase %q", batch.Status))
	}
	files, err := loadGeneration(ctx, tx, batch.ID, batch.Generation)
	if err != nil {
		return err
	}
	dLoad := lap()
	rows, err := q.TaskListByBatchPhase(ctx, db.TaskListByBatchPhaseParams{BatchID: batch.ID, Phase: batch.Status})
	if err != nil {
		return fmt.Errorf("listing tasks of %s: %w", batch.Status, err)
	}
	tasks := make(map[int64]phases.Task, len(rows))
	taskIDs := make(map[int64]string, len(rows))
	var completed, failed int
	for _, r := range rows {
		tasks[r.FileID] = phases.Task{FileID: r.FileID, Status: phases.TaskStatus(r.Status), Result: r.Result}
		taskIDs[r.FileID] = r.ID
		if r.Status == string(phases.TaskCompleted) {
			completed++
		} else {
			failed++
		}
	}
	dTasks := lap()
	next, problems := phases.Apply(p, files, tasks)
	dApply := lap()

	events := []db.BatchEventInsertManyParams{newEvent(batch.ID, db.EventPhaseCompleted, batch.Status, "", map[string]any{
		"tasks_completed": completed, "tasks_failed": failed, "files_in": len(files), "files_out": len(next),
	})}
	for _, perr := range problems {
		var terr *phases.TransformError
		taskID := ""
		if errors.As(perr, &terr) {
			taskID = taskIDs[terr.FileID]
		}
		events = append(events, newEvent(batch.ID, db.EventTransformFailed, batch.Status, taskID, map[string]any{"error": perr.Error()}))
	}
	if _, err := q.BatchEventInsertMany(ctx, events); err != nil {
		return fmt.Errorf("recording phase events: %w", err)
	}
	gen := batch.Generation + 1
	dEvents := lap()
	stored, err := insertGeneration(ctx, tx, batch.ID, gen, name, next)
	if err != nil {
		return err
	}
	dInsert := lap()
	err = enterNextPhase(ctx, tx, batch.ID, p.Next(), gen, stored)
	w.deps.Logger.Info("phase completed", "batch_id", batch.ID, "phase", batch.Status,
		"tasks_completed", completed, "tasks_failed", failed, "files", len(stored),
		"load_ms", dLoad.Milliseconds(), "tasks_ms", dTasks.Milliseconds(), "apply_ms", dApply.Milliseconds(),
		"events_ms", dEvents.Milliseconds(), "insert_ms", dInsert.Milliseconds(), "next_ms", lap().Milliseconds())
	return err
}
