package machine

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"

	"github.com/arke-institute/orchestrator/batchurls"
	"github.com/arke-institute/orchestrator/compute"
	"github.com/arke-institute/orchestrator/db"
	"github.com/arke-institute/orchestrator/fanin"
	"github.com/arke-institute/orchestrator/jobs"
	"github.com/arke-institute/orchestrator/metrics"
	"github.com/arke-institute/orchestrator/pause"
	"github.com/arke-institute/orchestrator/phases"
	"github.com/arke-institute/orchestrator/ratelimit"
	"github.com/arke-institute/orchestrator/tasktoken"
)

// PhaseLaunchArgs launches machines for the pending tasks of a batch's phase
// (spec 000's "alarm"). Unique per (batch, phase) while unfinished.
type PhaseLaunchArgs struct {
	BatchID string `json:"batch_id"`
	Phase   string `json:"phase"`
}

// Kind is the River job kind.
func (PhaseLaunchArgs) Kind() string { return "phase_launch" }

// InsertOpts makes the job unique per (batch, phase) while unfinished.
func (PhaseLaunchArgs) InsertOpts() river.InsertOpts {
	return river.InsertOpts{UniqueOpts: river.UniqueOpts{ByArgs: true, ByState: fanin.UniqueUnfinished}}
}

// PhaseLaunchWorker works PhaseLaunchArgs.
type PhaseLaunchWorker struct {
	jobs.Defaults[PhaseLaunchArgs]
	deps    jobs.Deps
	cfg     Config
	limiter *ratelimit.Limiter
	urls    *batchurls.Signer
	// tokens seals the tasks' callback tokens.
	tokens *tasktoken.Keyring
	// fleet bounds the launches (MAX_MACHINES,
	// MAX_MACHINE_SECONDS_PER_HOUR).
	fleet *Fleet
}

// Work retires the machines of tasks to be retried, launches up to
// BATCH_SIZE_<PHASE> machines (fewer while a spend bound holds launches
// back: the tasks wait), then snoozes for ALARM_DELAY_<PHASE> while
// tasks are pending. Launches take tokens from the bucket every
// orchestrator shares; a 429 from Fly is back-pressure (snooze and retry,
// tasks stay pending); a transient launch error (5xx, timeout, no
// capacity) backs off within LAUNCH_OUTAGE_BUDGET; a permanent one counts
// against the phase's MAX_RETRY_ATTEMPTS. Either way, once spent, the batch
// goes to ERROR.
func (w *PhaseLaunchWorker) Work(ctx context.Context, job *river.Job[PhaseLaunchArgs]) error {
	args := job.Args
	name := phases.Name(args.Phase)
	pcfg, ok := w.cfg.Phases[name]
	if !ok {
		return river.JobCancel(fmt.Errorf("unknown phase %q", args.Phase))
	}
	log := w.deps.Logger.With("batch_id", args.BatchID, "phase", args.Phase)
	q := db.New(w.deps.Pool)
	batch, err := w.deps.JobBatch(ctx, args.BatchID)
	if err != nil {
		return err
	}
	if batch.Status != args.Phase {
		return nil // moved on, reset or finished: nothing to launch
	}

	ret, err := w.retire(ctx, batch.ID, name, pcfg)
	if err != nil {
		return err
	}
	if p, err := w.deps.Pauses.Of(ctx, batch.ID, args.Phase); err != nil || p != nil {
		if p != nil {
			log.Debug("launches wait", "why", p.Why())
			return river.JobSnooze(pause.Recheck)
		}
		return err
	}
	total, err := w.round(ctx, batch, name, pcfg)
	if err != nil {
		return err
	}
	if total.launched > 0 {
		log.Info("launched machines", "count", total.launched)
		if err := q.BatchPhaseRetryReset(ctx, batch.ID); err != nil {
			return err
		}
	}
	if total.launched > 0 && total.held == nil && w.fleet.Bounded() {
		if err := Launched(ctx, w.deps, batch.ID, args.Phase); err != nil {
			return err
		}
	}
	if total.err != nil {
		return w.phaseError(ctx, job, pcfg, total.err)
	}
	pending, err := q.TaskCountPending(ctx, db.TaskCountPendingParams{BatchID: batch.ID, Phase: args.Phase})
	if err != nil {
		return err
	}
	if total.held != nil && pending > 0 {
		if err := total.held.Held(ctx, w.deps, batch.ID, args.Phase); err != nil {
			return err
		}
	}
	switch {
	case pending == 0 && batch.BuildFrom != nil:
		// More tasks are being written (phase_build), a chunk every few
		// hundred milliseconds. The batch was read before the count: had
		// the build ended then, the count would have seen all its tasks.
		return river.JobSnooze(200 * time.Millisecond)
	case pending == 0:
		return w.finish(ctx, job)
	case pending <= int64(ret.waiting) && ret.overdue != nil && total.launched == 0:
		// Only tasks whose last machine could not be destroyed, some for
		// TASK_RETIRE_LIMIT: the Machines API is out, and the outage
		// counts (LAUNCH_OUTAGE_BUDGET).
		return w.phaseError(ctx, job, pcfg, compute.Ambiguous(ret.overdue, 0))
	case pending <= int64(ret.waiting):
		// Only tasks whose last machine could not be destroyed yet:
		// try again soon, not at once.
		return river.JobSnooze(max(time.Second, min(pcfg.AlarmDelay, 5*time.Second)))
	case total.held != nil:
		// A spend bound holds the launches back: the tasks wait, and
		// nothing is charged (no attempt, no outage).
		return river.JobSnooze(boundWait)
	case total.yielded && total.launched > 0:
		// A batch of higher priority goes first (precedence.go): this
		// one had its share. (Refused a token, it comes back for the
		// next, as any launcher.)
		log.Debug("launches give way to a batch of higher priority")
		return river.JobSnooze(YieldWait(w.cfg.LaunchLimit(), w.deps.Settings.Priorities.Share))
	case total.rateLimited > 0:
		return river.JobSnooze(max(total.rateLimited, 50*time.Millisecond))
	case total.launched < pcfg.BatchSize:
		// Tokens or claims ran out before the round's quota: come back soon.
		return river.JobSnooze(50 * time.Millisecond)
	default:
		return river.JobSnooze(pcfg.AlarmDelay)
	}
}

// finish completes a launcher that found nothing pending, under the
// batch's shared fan-in lock and after counting again. A retry or a reset
// requeues tasks and enqueues the launcher under the exclusive lock, and
// while this launcher runs its enqueue is skipped as a duplicate: so either
// the retry committed first and the count sees its tasks, or it waits for
// this job to complete and then enqueues a launcher of its own. Without
// the lock the retried tasks would wait for the sweep's backstop.
func (w *PhaseLaunchWorker) finish(ctx context.Context, job *river.Job[PhaseLaunchArgs]) error {
	pending := int64(0)
	err := pgx.BeginFunc(ctx, w.deps.Pool, func(tx pgx.Tx) error {
		if err := fanin.LockShared(ctx, tx, job.Args.BatchID); err != nil {
			return err
		}
		var err error
		pending, err = db.New(tx).TaskCountPending(ctx, db.TaskCountPendingParams{BatchID: job.Args.BatchID, Phase: job.Args.Phase})
		if err != nil || pending > 0 {
			return err
		}
		_, err = river.JobCompleteTx[*riverpgxv5.Driver](ctx, tx, job)
		return err
	})
	if err == nil && pending > 0 {
		return river.JobSnooze(50 * time.Millisecond)
	}
	return err
}

// phaseError counts a phase-level launch failure (LaunchFailure); when
// it ends the batch, the launcher's job ends with it.
func (w *PhaseLaunchWorker) phaseError(ctx context.Context, job *river.Job[PhaseLaunchArgs], pcfg Phase, cause error) error {
	args := job.Args
	var out LaunchFailureOutcome
	err := pgx.BeginFunc(ctx, w.deps.Pool, func(tx pgx.Tx) error {
		var err error
		ptx := jobs.Tx{Tx: tx, River: river.ClientFromContext[pgx.Tx](ctx)}
		if out, err = LaunchFailure(ctx, ptx, w.deps, w.cfg, args.BatchID, args.Phase, cause); err != nil {
			return err
		}
		if out.Failed != nil {
			_, err = river.JobCompleteTx[*riverpgxv5.Driver](ctx, tx, job)
		}
		return err
	})
	if err != nil {
		return err
	}
	w.deps.Logger.Warn("launch failed", "batch_id", args.BatchID, "phase", args.Phase, "error", cause, "app", pcfg.App, "transient", transientLaunchError(cause))
	out.Report(w.deps, args.Phase)
	if out.Failed != nil {
		return nil
	}
	return river.JobSnooze(out.Delay)
}

// LaunchFailureOutcome is what LaunchFailure made of a failed launch.
type LaunchFailureOutcome struct {
	// Failed is the batch, if the failure put it in ERROR, and Ended its
	// open tasks that ended with it.
	Failed *db.Batch
	Ended  int
	// Delay is how long to wait before launching again, if it did not.
	Delay time.Duration
}

// Report counts the outcome in the metrics.
func (o LaunchFailureOutcome) Report(deps jobs.Deps, phase string) {
	if o.Failed == nil {
		deps.Metrics.PhaseRetried(phase)
	}
	deps.Metrics.TasksFinished(phase, metrics.TaskCancelled, o.Ended)
	deps.BatchFinished(o.Failed)
}

// LaunchFailure counts a failure to launch a batch's machines of a phase,
// in tx: it is retried with exponential backoff (2, 4, 8, 16 s ... capped
// at ALARM_DELAY_ERROR_RETRY, with jitter). A permanent failure (the
// provider rejected the request) counts toward MAX_RETRY_ATTEMPTS; a
// transient one (an outage: 5xx, timeouts, no capacity) does not, and
// only the outage's length counts: the batch goes to ERROR once it has
// lasted LAUNCH_OUTAGE_BUDGET. Running tasks go on meanwhile. The
// phase.retry event says which.
func LaunchFailure(ctx context.Context, tx jobs.Tx, deps jobs.Deps, cfg Config, batchID, phase string, cause error) (LaunchFailureOutcome, error) {
	q := db.New(tx)
	transient := transientLaunchError(cause)
	var (
		count  int32
		lasted time.Duration
		msg    string // the batch's error, if this failure ends it
	)
	if transient {
		ms, err := q.BatchLaunchOutage(ctx, batchID)
		if err != nil {
			return LaunchFailureOutcome{}, err
		}
		// The backoff's count: how many of the cap's doublings the outage
		// has lasted, so that it stays capped.
		lasted = time.Duration(ms) * time.Millisecond
		count = int32(min(20, 1+lasted/time.Second))
		if lasted >= cfg.OutageBudget {
			msg = fmt.Sprintf("Launching %s machines failed transiently for %s (LAUNCH_OUTAGE_BUDGET %s): %v",
				phase, lasted.Round(time.Second), cfg.OutageBudget, cause)
		}
	} else {
		var err error
		if count, err = q.BatchPhaseRetry(ctx, batchID); err != nil {
			return LaunchFailureOutcome{}, err
		}
		if int(count) >= cfg.MaxRetryAttempts {
			msg = fmt.Sprintf("Failed after %d retries: launching %s machines: %v", count, phase, cause)
		}
	}
	if msg != "" {
		failed, ended, err := jobs.FailBatch(ctx, tx, deps, batchID, phase, msg)
		return LaunchFailureOutcome{Failed: failed, Ended: ended}, err
	}
	delay := jobs.Backoff(int(count), cfg.ErrorRetryCap)
	data := map[string]any{"delay_ms": delay.Milliseconds(), "error": cause.Error(), "transient": transient}
	if transient {
		data["outage_ms"] = lasted.Milliseconds()
		data["outage_budget_ms"] = cfg.OutageBudget.Milliseconds()
	} else {
		data["retry"] = count
		data["max_retries"] = cfg.MaxRetryAttempts
	}
	if err := q.EventRecord(ctx, db.Event{BatchID: batchID, Type: db.EventPhaseRetry, Phase: phase, Data: data}); err != nil {
		return LaunchFailureOutcome{}, err
	}
	return LaunchFailureOutcome{Delay: delay}, nil
}

// transientLaunchError tells an outage (the provider answered 5xx, 408 or
// 409, had no capacity, or did not answer) from a rejection that repeating
// the request cannot fix (another 4xx: a bad image, an unknown app, a bad
// token). Only the backend can tell them apart (compute.ErrAmbiguous,
// compute.ErrPermanent); anything unclassified is taken as permanent.
func transientLaunchError(err error) bool {
	return errors.Is(err, compute.ErrAmbiguous) || errors.Is(err, compute.ErrRateLimited)
}
