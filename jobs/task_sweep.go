package jobs

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/rivertype"

	"github.com/arke-institute/orchestrator/db"
	"github.com/arke-institute/orchestrator/fanin"
)

// TaskSweepArgs is the periodic sweep (every SWEEP_INTERVAL): the
// executors' own sweeps (Sweeper: e.g. timing out tasks past their
// deadline), and the backstop that nudges any running batch whose wake-up
// was lost.
type TaskSweepArgs struct{}

// Kind is the River job kind.
func (TaskSweepArgs) Kind() string { return "task_sweep" }

// InsertOpts keeps one sweep at a time.
func (TaskSweepArgs) InsertOpts() river.InsertOpts {
	return river.InsertOpts{UniqueOpts: river.UniqueOpts{ByState: fanin.UniqueUnfinished}}
}

// TaskSweepWorker works TaskSweepArgs.
type TaskSweepWorker struct {
	Defaults[TaskSweepArgs]
	deps     Deps
	listener *Listener
}

// processStarted is when this process started, for SWEEP_RESTART_GRACE.
var processStarted = time.Now()

// Work runs each executor's sweep, then nudges stalled batches. It first
// beats as this process's listener, which makes up for a silence of the
// fleet (Listener) before anything is timed out. Within
// SWEEP_RESTART_GRACE of a start of Postgres or of this process the
// executors' sweeps are told to time nothing out: callbacks that waited
// out the outage are on their way, and a late success of a current
// attempt is accepted.
func (w *TaskSweepWorker) Work(ctx context.Context, job *river.Job[TaskSweepArgs]) error {
	if w.listener != nil {
		if _, err := w.listener.Beat(ctx); err != nil {
			return err
		}
	}
	grace, err := w.restartedWithin(ctx, w.deps.Settings.SweepRestartGrace)
	if err != nil {
		return err
	}
	client := river.ClientFromContext[pgx.Tx](ctx)
	for _, e := range w.deps.Executors.All() {
		if s, ok := e.(Sweeper); ok {
			if err := s.Sweep(ctx, client, grace); err != nil {
				return fmt.Errorf("the %s sweep: %w", e.Kind(), err)
			}
		}
	}
	return w.backstop(ctx)
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

// SweepGroupsPerRun bounds the work of one sweep, per kind of work; the
// next run continues.
const SweepGroupsPerRun = 100

// backstop makes sure every running batch that has not moved for two
// sweep intervals has the jobs it needs: a batch still PENDING its start,
// a batch whose generation is still being written its phase_build, and
// any other its phase's executor's jobs (Executor.Backstop) and, once
// nothing of its phase is open, its fan-in check. Every one of these jobs
// is unique, so when nothing was lost this inserts nothing.
func (w *TaskSweepWorker) backstop(ctx context.Context) error {
	q := db.New(w.deps.Pool)
	before := time.Now().Add(-2 * w.deps.Settings.SweepInterval)
	stalled, err := q.BatchListStalled(ctx, db.BatchListStalledParams{Before: before, Max: SweepGroupsPerRun})
	if err != nil {
		return fmt.Errorf("finding stalled batches: %w", err)
	}
	pending, err := q.BatchListStalledPending(ctx, db.BatchListStalledPendingParams{Before: before, Max: SweepGroupsPerRun})
	if err != nil {
		return fmt.Errorf("finding stalled pending batches: %w", err)
	}
	client := river.ClientFromContext[pgx.Tx](ctx)
	var (
		params []river.InsertManyParams
		checks []fanin.PhaseRef
	)
	ids := make([]string, 0, len(stalled)+len(pending))
	for _, id := range pending {
		// A start job that gave up without failing the batch (a crash
		// between its attempts' end and the batch's) is started again.
		ids = append(ids, id)
		params = append(params, river.InsertManyParams{Args: BatchStartArgs{BatchID: id}})
	}
	for _, b := range stalled {
		ids = append(ids, b.ID)
		if b.BuildFrom != nil {
			params = append(params, river.InsertManyParams{Args: PhaseBuildArgs{BatchID: b.ID, Phase: b.Phase, From: *b.BuildFrom, Generation: b.Generation}})
			continue
		}
		ex, p, ok := w.deps.Executors.Of(b.Phase)
		if !ok {
			continue // its check fails it
		}
		at := PhaseAt{BatchID: b.ID, Phase: p, Generation: b.Generation}
		if err := ex.Backstop(ctx, at); err != nil {
			return fmt.Errorf("backstop of batch %s, phase %s: %w", b.ID, b.Phase, err)
		}
		if open, err := ex.HasOpen(ctx, q, at); err != nil {
			return err
		} else if !open {
			checks = append(checks, at.Ref())
		}
	}
	if len(ids) > 0 {
		if err := q.BatchTouch(ctx, ids); err != nil {
			return err
		}
	}
	checked, err := fanin.RequestChecks(ctx, client, checks)
	if err != nil {
		return err
	}
	var enqueued []*rivertype.JobRow
	if len(params) > 0 {
		res, err := client.InsertMany(ctx, params)
		if err != nil {
			return fmt.Errorf("nudging stalled batches: %w", err)
		}
		for _, r := range res {
			if !r.UniqueSkippedAsDuplicate {
				enqueued = append(enqueued, r.Job)
			}
		}
	}
	for _, j := range append(enqueued, checked...) {
		w.deps.Logger.Warn("backstop re-enqueued a lost wake-up", jobAttrs(j)...)
	}
	return nil
}
