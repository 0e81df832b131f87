package jobs

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river"

	"github.com/arke-institute/orchestrator/compute"
	"github.com/arke-institute/orchestrator/db"
	"github.com/arke-institute/orchestrator/metrics"
	"github.com/arke-institute/orchestrator/phases"
)

// sweepGroupsPerRun bounds the work of one sweep; the next run continues.
const sweepGroupsPerRun = 100

// TaskSweepArgs is the periodic sweep (every SWEEP_INTERVAL): it fails tasks
// still processing past their deadline, and it is the backstop that nudges
// any running batch whose wake-up was lost.
type TaskSweepArgs struct{}

// Kind is the River job kind.
func (TaskSweepArgs) Kind() string { return "task_sweep" }

// InsertOpts keeps one sweep at a time.
func (TaskSweepArgs) InsertOpts() river.InsertOpts {
	return river.InsertOpts{UniqueOpts: river.UniqueOpts{ByState: uniqueUnfinished}}
}

// TaskSweepWorker works TaskSweepArgs.
type TaskSweepWorker struct {
	jobDefaults[TaskSweepArgs]
	deps Deps
}

// processStarted is when this process started, for SWEEP_RESTART_GRACE.
var processStarted = time.Now()

// Work fails expired tasks phase by phase, then nudges stalled batches.
// Within SWEEP_RESTART_GRACE of a start of Postgres or of this process, it
// times out nothing: callbacks that waited out the outage are on their way,
// and a late success of a current attempt is accepted.
func (w *TaskSweepWorker) Work(ctx context.Context, job *river.Job[TaskSweepArgs]) error {
	q := db.New(w.deps.Pool)
	if recent, err := w.restartedWithin(ctx, w.deps.Config.SweepRestartGrace); err != nil {
		return err
	} else if recent {
		return w.afterExpiry(ctx)
	}
	groups, err := q.TaskExpiredGroups(ctx, sweepGroupsPerRun)
	if err != nil {
		return fmt.Errorf("finding expired tasks: %w", err)
	}
	for _, g := range groups {
		if err := w.settleUnlaunched(ctx, g.BatchID, g.Phase); err != nil {
			return err
		}
		if err := w.expire(ctx, g.BatchID, g.Phase); err != nil {
			return err
		}
	}
	return w.afterExpiry(ctx)
}

// restartedWithin reports whether this process or Postgres started less
// than grace ago (never, when grace is 0: no query then).
func (w *TaskSweepWorker) restartedWithin(ctx context.Context, grace time.Duration) (bool, error) {
	if grace <= 0 {
		return false, nil
	}
	if time.Since(processStarted) < grace {
		return true, nil
	}
	var upMillis int64
	if err := w.deps.Pool.QueryRow(ctx, "SELECT (extract(epoch FROM clock_timestamp() - pg_postmaster_start_time()) * 1000)::bigint").Scan(&upMillis); err != nil {
		return false, fmt.Errorf("reading Postgres's uptime: %w", err)
	}
	return time.Duration(upMillis)*time.Millisecond < grace, nil
}

// afterExpiry is the sweep's work besides timeouts: the backstop, and
// documents whose job River gave up on.
func (w *TaskSweepWorker) afterExpiry(ctx context.Context) error {
	if err := w.backstop(ctx); err != nil {
		return err
	}
	return w.failAbandonedDocuments(ctx)
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
func (w *TaskSweepWorker) settleUnlaunched(ctx context.Context, batchID, phase string) error {
	q := db.New(w.deps.Pool)
	rows, err := q.TaskListExpiredUnlaunched(ctx, db.TaskListExpiredUnlaunchedParams{BatchID: batchID, Phase: phase})
	if err != nil || len(rows) == 0 {
		return err
	}
	app := w.deps.Config.Phases[phases.Name(phase)].FlyAppName
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
		found, err := w.deps.Compute.FindByTask(ctx, app, r.ID)
		if err != nil {
			w.deps.Logger.Warn("looking up an unrecorded machine", "batch_id", batchID, "task_id", r.ID, "phase", phase, "error", err)
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
	client := river.ClientFromContext[pgx.Tx](ctx)
	if len(unwanted) > 0 {
		if _, err := client.Insert(ctx, MachineDestroyArgs{App: app, MachineIDs: unwanted}, nil); err != nil {
			return fmt.Errorf("queueing the destruction of unwanted machines: %w", err)
		}
	}
	if len(settle.IDs) == 0 {
		return nil
	}
	gaveUp, relaunched := 0, 0 // tasks failed for want of a machine, and sent back for another
	err = EndTasks(ctx, w.deps.Pool, client, PhaseRef{BatchID: batchID, Phase: phase}, func(tx pgx.Tx) (bool, error) {
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
				events = append(events, newEvent(batchID, db.EventTaskRetrying, phase, t.ID, map[string]any{
					"reason": "no machine was found for its launch (not counted as an attempt)",
				}))
			case settleFail:
				gaveUp++
				events = append(events, newEvent(batchID, db.EventTaskFailed, phase, t.ID, map[string]any{"error": msg}))
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
		w.deps.Metrics.TasksRetried(phase, metrics.RetryNoMachine, relaunched)
	}
	if err == nil && gaveUp > 0 {
		w.deps.Metrics.TasksFinished(phase, metrics.TaskFailed, gaveUp)
		w.deps.Logger.Warn("tasks failed: no machine could be launched", "batch_id", batchID, "phase", phase, "count", gaveUp)
	}
	return err
}

// expire ends the expired tasks of one (batch, phase) with "Task timed out
// after Ns": a task with attempts left (TASK_MAX_ATTEMPTS) goes back to
// pending and its launcher retires its machine before launching it again
// (retire); the others fail, their machines are queued for destruction and
// the phase's check is made sure to run, as any other task end does
// (EndTasks).
func (w *TaskSweepWorker) expire(ctx context.Context, batchID, phase string) error {
	app := w.deps.Config.Phases[phases.Name(phase)].FlyAppName
	expired, retried := 0, 0
	client := river.ClientFromContext[pgx.Tx](ctx)
	err := EndTasks(ctx, w.deps.Pool, client, PhaseRef{BatchID: batchID, Phase: phase}, func(tx pgx.Tx) (bool, error) {
		q := db.New(tx)
		rows, err := q.TaskFailExpired(ctx, db.TaskFailExpiredParams{
			BatchID: batchID, Phase: phase, MaxAttempts: int32(w.deps.Config.TaskMaxAttempts), RetireSeconds: w.deps.Config.TaskRetireLimit.Seconds(),
		})
		if err != nil {
			return false, fmt.Errorf("failing expired tasks of %s %s: %w", batchID, phase, err)
		}
		if len(rows) == 0 {
			return false, nil
		}
		events := make([]db.BatchEventInsertManyParams, 0, len(rows))
		var machines []string
		for _, r := range rows {
			data := map[string]any{"error": deref(r.Error), "failed_attempts": r.Failures}
			if r.MachineID != nil {
				data["machine_id"] = *r.MachineID
			}
			events = append(events, newEvent(batchID, db.EventTaskTimedOut, phase, r.ID, data))
			if r.Retry {
				retried++
				events = append(events, newEvent(batchID, db.EventTaskRetrying, phase, r.ID, map[string]any{
					"reason": "timed out", "error": deref(r.Error), "failed_attempts": r.Failures,
				}))
				continue // its launcher destroys the machine first
			}
			expired++
			if r.MachineID != nil {
				machines = append(machines, *r.MachineID)
			}
		}
		if _, err := q.BatchEventInsertMany(ctx, events); err != nil {
			return false, err
		}
		if len(machines) > 0 {
			if _, err := client.InsertTx(ctx, tx, MachineDestroyArgs{App: app, MachineIDs: machines}, nil); err != nil {
				return false, err
			}
		}
		if retried > 0 {
			if _, err := client.InsertTx(ctx, tx, PhaseLaunchArgs{BatchID: batchID, Phase: phase}, nil); err != nil {
				return false, err
			}
		}
		return expired > 0, nil
	})
	if err == nil && expired > 0 {
		w.deps.Metrics.TasksFinished(phase, metrics.TaskTimedOut, expired)
		w.deps.Logger.Warn("tasks timed out", "batch_id", batchID, "phase", phase, "count", expired)
	}
	if err == nil && retried > 0 {
		w.deps.Metrics.TasksRetried(phase, metrics.RetryTimeout, retried)
		w.deps.Logger.Warn("timed-out tasks to be retried", "batch_id", batchID, "phase", phase, "count", retried)
	}
	return err
}

// backstop re-enqueues the check of a running batch whose phase has no open
// task left, and the launcher of one with pending tasks. Both are unique
// jobs, so when nothing was lost this inserts nothing.
func (w *TaskSweepWorker) backstop(ctx context.Context) error {
	q := db.New(w.deps.Pool)
	stalled, err := q.BatchListStalled(ctx, db.BatchListStalledParams{
		Before: time.Now().Add(-2 * w.deps.Config.SweepInterval), Max: sweepGroupsPerRun,
	})
	if err != nil {
		return fmt.Errorf("finding stalled batches: %w", err)
	}
	pending, err := q.BatchListStalledPending(ctx, db.BatchListStalledPendingParams{
		Before: time.Now().Add(-2 * w.deps.Config.SweepInterval), Max: sweepGroupsPerRun,
	})
	if err != nil {
		return fmt.Errorf("finding stalled pending batches: %w", err)
	}
	client := river.ClientFromContext[pgx.Tx](ctx)
	var params []river.InsertManyParams
	ids := make([]string, 0, len(stalled)+len(pending))
	for _, id := range pending {
		// A start job that gave up without failing the batch (a crash
		// between its attempts' end and the batch's) is started again.
		ids = append(ids, id)
		params = append(params, river.InsertManyParams{Args: BatchStartArgs{BatchID: id}})
	}
	for _, b := range stalled {
		ids = append(ids, b.ID)
		switch {
		case chunked(b.Phase):
			// No tasks: the chunks' jobs (unique: kept when they exist)
			// and a check, which finds the phase over when they all are.
			if err := pgx.BeginFunc(ctx, w.deps.Pool, func(tx pgx.Tx) error {
				n, err := EnsureChunkJobs(ctx, tx, client, w.deps.chunkMaxAttempts(), b.ID, phases.Name(b.Phase))
				if n > 0 {
					w.deps.Logger.Warn("backstop re-enqueued lost chunk jobs", "batch_id", b.ID, "phase", b.Phase, "chunks", n)
				}
				return err
			}); err != nil {
				return err
			}
			if open, err := phaseHasOpen(ctx, q, b.ID, b.Phase, b.Generation); err != nil {
				return err
			} else if !open {
				params = append(params, river.InsertManyParams{Args: PhaseCheckArgs{BatchID: b.ID, Phase: b.Phase}})
			}
		case executorOf(b.Phase) == phases.Documents:
			// No tasks: the documents' step jobs (unique: kept when they
			// exist) and a check once they have all ended. A document
			// whose job River gave up on fails first: no run would end it.
			if err := w.failAbandoned(ctx, client, b.ID, b.Generation); err != nil {
				return err
			}
			if err := pgx.BeginFunc(ctx, w.deps.Pool, func(tx pgx.Tx) error {
				n, err := EnsureDocumentJobs(ctx, tx, client, b.ID, b.Generation)
				if n > 0 {
					w.deps.Logger.Warn("backstop re-enqueued lost document jobs", "batch_id", b.ID, "phase", b.Phase, "documents", n)
				}
				return err
			}); err != nil {
				return err
			}
			if open, err := phaseHasOpen(ctx, q, b.ID, b.Phase, b.Generation); err != nil {
				return err
			} else if !open {
				params = append(params, river.InsertManyParams{Args: PhaseCheckArgs{BatchID: b.ID, Phase: b.Phase}})
			}
		case b.BuildFrom != nil:
			params = append(params, river.InsertManyParams{Args: PhaseBuildArgs{BatchID: b.ID, Phase: b.Phase, From: *b.BuildFrom, Generation: b.Generation}})
		case !b.HasOpen:
			params = append(params, river.InsertManyParams{Args: PhaseCheckArgs{BatchID: b.ID, Phase: b.Phase}})
		case b.HasPending:
			params = append(params, river.InsertManyParams{Args: PhaseLaunchArgs{BatchID: b.ID, Phase: b.Phase}})
		}
	}
	if len(ids) > 0 {
		if err := q.BatchTouch(ctx, ids); err != nil {
			return err
		}
	}
	if len(params) == 0 {
		return nil
	}
	res, err := client.InsertMany(ctx, params)
	if err != nil {
		return fmt.Errorf("nudging stalled batches: %w", err)
	}
	for _, r := range res {
		if !r.UniqueSkippedAsDuplicate {
			w.deps.Logger.Warn("backstop re-enqueued a lost wake-up", jobAttrs(r.Job)...)
		}
	}
	return nil
}

// failAbandoned fails the running documents of a batch's documents phase
// (generation) whose step job River discarded (its attempts spent, a dead
// process's last one included) or cancelled, with the reason in their
// errors; their ends make sure of the phase's check.
func (w *TaskSweepWorker) failAbandoned(ctx context.Context, client *river.Client[pgx.Tx], batchID string, generation int32) error {
	rows, err := db.New(w.deps.Pool).DocumentBatchListAbandoned(ctx, db.DocumentBatchListAbandonedParams{BatchID: &batchID, Generation: generation})
	if err != nil {
		return fmt.Errorf("finding abandoned documents of %s: %w", batchID, err)
	}
	for _, r := range rows {
		if _, err := failDocument(ctx, w.deps, client, r.ID, r.Resumes, abandonedReason(r.JobID, r.JobState)); err != nil {
			return fmt.Errorf("failing abandoned document %d of %s: %w", r.ID, batchID, err)
		}
	}
	return nil
}

// failAbandonedDocuments fails the running documents posted through the
// API whose step job River discarded or cancelled, as failAbandoned does
// for a batch's.
func (w *TaskSweepWorker) failAbandonedDocuments(ctx context.Context) error {
	rows, err := db.New(w.deps.Pool).DocumentListAbandoned(ctx, sweepGroupsPerRun)
	if err != nil {
		return fmt.Errorf("finding abandoned documents: %w", err)
	}
	client := river.ClientFromContext[pgx.Tx](ctx)
	for _, r := range rows {
		if _, err := failDocument(ctx, w.deps, client, r.ID, r.Resumes, abandonedReason(r.JobID, r.JobState)); err != nil {
			return fmt.Errorf("failing abandoned document %d: %w", r.ID, err)
		}
	}
	return nil
}

// abandonedReason is the error recorded for a document whose step job
// River gave up on.
func abandonedReason(jobID int64, state string) string {
	return fmt.Sprintf("step job %d was %s by River; the document cannot go on", jobID, state)
}

func deref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}
