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
	var finished *db.Batch // the batch, if the transition ended it
	err := pgx.BeginFunc(ctx, w.deps.Pool, func(tx pgx.Tx) error {
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
		if finished, err = w.transition(ctx, tx, batch); err != nil {
			return err
		}
		return done()
	})
	if err == nil {
		w.deps.batchFinished(finished)
	}
	return err
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
// It returns the batch if it ended (DONE, or ERROR for an unknown phase).
func (w *PhaseCheckWorker) transition(ctx context.Context, tx pgx.Tx, batch db.Batch) (*db.Batch, error) {
	q := db.New(tx)
	t0 := time.Now()
	lap := func() time.Duration { d := time.Since(t0); t0 = time.Now(); return d }
	name := phases.Name(batch.Status)
	p, ok := phases.Get(name)
	if !ok {
		return failBatch(ctx, q, batch.ID, batch.Status, fmt.Sprintf("unknown phase %q", batch.Status))
	}
	counts, err := q.TaskCountByBatch(ctx, batch.ID)
	if err != nil {
		return nil, fmt.Errorf("counting tasks of %s: %w", batch.Status, err)
	}
	var completed, failed int64 // every task of the phase has ended
	for _, c := range counts {
		switch {
		case c.Phase != batch.Status:
		case c.Status == string(phases.TaskCompleted):
			completed += c.Count
		default:
			failed += c.Count
		}
	}
	dTasks := lap()
	filesIn, next, problems, err := applyGeneration(ctx, tx, p, batch)
	if err != nil {
		return nil, err
	}
	dApply := lap() // reading the generation and its tasks, and transforming it

	events := []db.BatchEventInsertManyParams{newEvent(batch.ID, db.EventPhaseCompleted, batch.Status, "", map[string]any{
		"tasks_completed": completed, "tasks_failed": failed, "files_in": filesIn, "files_out": len(next),
	})}
	for _, pr := range problems {
		events = append(events, newEvent(batch.ID, db.EventTransformFailed, batch.Status, pr.taskID, map[string]any{"error": pr.err.Error()}))
	}
	if _, err := q.BatchEventInsertMany(ctx, events); err != nil {
		return nil, fmt.Errorf("recording phase events: %w", err)
	}
	gen := batch.Generation + 1
	dEvents := lap()
	stored, err := insertGeneration(ctx, tx, batch.ID, gen, name, next)
	if err != nil {
		return nil, err
	}
	dInsert := lap()
	finished, err := enterNextPhase(ctx, tx, batch.ID, p.Next(), gen, stored)
	w.deps.Logger.Info("phase completed", "batch_id", batch.ID, "phase", batch.Status,
		"tasks_completed", completed, "tasks_failed", failed, "files", len(stored),
		"tasks_ms", dTasks.Milliseconds(), "apply_ms", dApply.Milliseconds(),
		"events_ms", dEvents.Milliseconds(), "insert_ms", dInsert.Milliseconds(), "next_ms", lap().Milliseconds())
	return finished, err
}

// generationTasksSQL reads a file generation in list order (without the
// columns nobody reads) and, beside each file, the task of the phase that
// processed it (NULLs when it had none). Joining in the database lets the
// transform stream: neither the input generation nor the tasks' results are
// ever all in memory, only the next generation. (It is not a sqlc query
// because sqlc's :many collects every row before returning.) Were a file
// to have two tasks, ordering by task id makes the choice of the first
// stable.
const generationTasksSQL = `SELECT f.id, f.parent_id, f.directory_path, f.r2_key, f.logical_path, f.file_name, f.file_size,
	f.content_type, f.cid, f.processing_config, f.preprocessor_tags, t.id, t.status, t.result
FROM files f
LEFT JOIN tasks t ON t.file_id = f.id AND t.batch_id = $1 AND t.phase = $3
WHERE f.batch_id = $1 AND f.generation = $2
ORDER BY f.ordinal, t.id`

// transformProblem is a file whose transform failed, with the task it
// failed on ("" if none), for the transform_failed event.
type transformProblem struct {
	taskID string
	err    error
}

// applyGeneration streams the batch's current generation with its tasks
// through p's transform, file by file in list order (phases.ApplyOne), and
// returns how many files went in and the next generation.
func applyGeneration(ctx context.Context, tx pgx.Tx, p phases.Phase, batch db.Batch) (filesIn int, next []phases.File, problems []transformProblem, err error) {
	n, err := db.New(tx).FileCountByBatchGeneration(ctx, db.FileCountByBatchGenerationParams{BatchID: batch.ID, Generation: batch.Generation})
	if err != nil {
		return 0, nil, nil, fmt.Errorf("counting generation %d of batch %s: %w", batch.Generation, batch.ID, err)
	}
	// Room for every input and one output in eight more (a converted TIFF
	// adds its JPEG), so that the usual next generation never has to be
	// copied into a bigger array while the old one is still alive.
	next = make([]phases.File, 0, n+n/8)
	// tasks has no index on file_id, and right after a phase its statistics
	// are stale: the planner then likes a nested loop that scans the tasks
	// once per file, quadratic in the batch (11 s at 10,000 files). A hash
	// join reads each table once; this transaction only needs the setting
	// for this query.
	if _, err := tx.Exec(ctx, "SET LOCAL enable_nestloop = off"); err != nil {
		return 0, nil, nil, err
	}
	defer func() {
		if _, rerr := tx.Exec(ctx, "RESET enable_nestloop"); rerr != nil && err == nil {
			err = rerr
		}
	}()
	rows, err := tx.Query(ctx, generationTasksSQL, batch.ID, batch.Generation, batch.Status)
	if err != nil {
		return 0, nil, nil, fmt.Errorf("reading generation %d of batch %s: %w", batch.Generation, batch.ID, err)
	}
	defer rows.Close()
	configs := map[string]phases.ProcessingConfig{}
	var (
		r              db.File
		taskID, status *string
		result         []byte
		lastID         int64 = -1
	)
	for rows.Next() {
		r, taskID, status, result = db.File{}, nil, nil, nil
		if err := rows.Scan(&r.ID, &r.ParentID, &r.DirectoryPath, &r.R2Key, &r.LogicalPath, &r.FileName, &r.FileSize,
			&r.ContentType, &r.CID, &r.ProcessingConfig, &r.PreprocessorTags, &taskID, &status, &result); err != nil {
			return 0, nil, nil, fmt.Errorf("reading generation %d of batch %s: %w", batch.Generation, batch.ID, err)
		}
		if r.ID == lastID {
			continue // a second task for the same file: the first one decides
		}
		lastID = r.ID
		f, err := fileFromRow(r, configs)
		if err != nil {
			return 0, nil, nil, err
		}
		filesIn++
		var task *phases.Task
		if taskID != nil {
			task = &phases.Task{FileID: f.ID, Status: phases.TaskStatus(*status), Result: result}
		}
		outs, perr := phases.ApplyOne(p, f, task)
		if perr != nil {
			id := ""
			if taskID != nil {
				id = *taskID
			}
			problems = append(problems, transformProblem{taskID: id, err: perr})
		}
		next = append(next, outs...)
	}
	if err := rows.Err(); err != nil {
		return 0, nil, nil, fmt.Errorf("reading generation %d of batch %s: %w", batch.Generation, batch.ID, err)
	}
	return filesIn, next, problems, nil
}
