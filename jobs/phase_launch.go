package jobs

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river"

	"github.com/arke-institute/orchestrator/config"
	"github.com/arke-institute/orchestrator/db"
	"github.com/arke-institute/orchestrator/metrics"
	"github.com/arke-institute/orchestrator/phases"
	"github.com/arke-institute/orchestrator/ratelimit"
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
	return river.InsertOpts{UniqueOpts: river.UniqueOpts{ByArgs: true, ByState: uniqueUnfinished}}
}

// PhaseLaunchWorker works PhaseLaunchArgs.
type PhaseLaunchWorker struct {
	jobDefaults[PhaseLaunchArgs]
	deps    Deps
	limiter *ratelimit.Limiter
}

// Work launches up to BATCH_SIZE_<PHASE> machines, then snoozes for
// ALARM_DELAY_<PHASE> while tasks are pending. Launches take tokens from the
// bucket every orchestrator shares; a 429 from Fly is back-pressure (snooze
// and retry, tasks stay pending); any other launch error counts against the
// phase's MAX_RETRY_ATTEMPTS with exponential backoff, after which the batch
// goes to ERROR.
func (w *PhaseLaunchWorker) Work(ctx context.Context, job *river.Job[PhaseLaunchArgs]) error {
	args := job.Args
	name := phases.Name(args.Phase)
	pcfg, ok := w.deps.Config.Phases[name]
	if !ok {
		return river.JobCancel(fmt.Errorf("unknown phase %q", args.Phase))
	}
	log := w.deps.Logger.With("batch_id", args.BatchID, "phase", args.Phase)
	q := db.New(w.deps.Pool)
	batch, err := w.deps.jobBatch(ctx, args.BatchID)
	if err != nil {
		return err
	}
	if batch.Status != args.Phase {
		return nil // moved on, reset or finished: nothing to launch
	}

	total, err := w.round(ctx, batch.ID, name, pcfg)
	if err != nil {
		return err
	}
	if total.launched > 0 {
		log.Info("launched machines", "count", total.launched)
		if err := q.BatchPhaseRetryReset(ctx, batch.ID); err != nil {
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
	switch {
	case pending == 0 && batch.BuildFrom != nil:
		// More tasks are being written (phase_build), a chunk every few
		// hundred milliseconds. The batch was read before the count: had
		// the build ended then, the count would have seen all its tasks.
		return river.JobSnooze(200 * time.Millisecond)
	case pending == 0:
		return nil
	case total.rateLimited > 0:
		return river.JobSnooze(max(total.rateLimited, 50*time.Millisecond))
	case total.launched < pcfg.BatchSize:
		// Tokens or claims ran out before the round's quota: come back soon.
		return river.JobSnooze(50 * time.Millisecond)
	default:
		return river.JobSnooze(pcfg.AlarmDelay)
	}
}

// phaseError counts a phase-level launch failure: retried with exponential
// backoff (2, 4, 8, 16 s ... capped at ALARM_DELAY_ERROR_RETRY, with jitter)
// until MAX_RETRY_ATTEMPTS, then the batch goes to ERROR.
func (w *PhaseLaunchWorker) phaseError(ctx context.Context, job *river.Job[PhaseLaunchArgs], pcfg config.Phase, cause error) error {
	args := job.Args
	var (
		retryErr error
		failed   *db.Batch // the batch, if it went to ERROR
		ended    int       // its open tasks ended with it
	)
	err := pgx.BeginFunc(ctx, w.deps.Pool, func(tx pgx.Tx) error {
		q := db.New(tx)
		count, err := q.BatchPhaseRetry(ctx, args.BatchID)
		if err != nil {
			return err
		}
		if int(count) >= w.deps.Config.MaxRetryAttempts {
			msg := fmt.Sprintf("Failed after %d retries: launching %s machines: %v", count, args.Phase, cause)
			if failed, err = failBatch(ctx, q, args.BatchID, args.Phase, msg); err != nil {
				return err
			}
			// Nothing may keep running for a batch in ERROR.
			appOf := func(phase string) string { return w.deps.Config.Phases[phases.Name(phase)].FlyAppName }
			client := river.ClientFromContext[pgx.Tx](ctx)
			if ended, _, err = StopBatchWork(ctx, tx, client, appOf, args.BatchID, "Batch failed: "+msg); err != nil {
				return err
			}
			_, err := river.JobCompleteTx[*riverDriver](ctx, tx, job)
			return err
		}
		delay := backoff(int(count), w.deps.Config.AlarmDelayErrorRetry)
		if err := q.EventRecord(ctx, db.Event{BatchID: args.BatchID, Type: db.EventPhaseRetry, Phase: args.Phase, Data: map[string]any{
			"retry": count, "max_retries": w.deps.Config.MaxRetryAttempts, "delay_ms": delay.Milliseconds(), "error": cause.Error(),
		}}); err != nil {
			return err
		}
		retryErr = river.JobSnooze(delay)
		return nil
	})
	if err != nil {
		return err
	}
	w.deps.Logger.Warn("launch failed", "batch_id", args.BatchID, "phase", args.Phase, "error", cause, "app", pcfg.FlyAppName)
	if retryErr != nil {
		w.deps.Metrics.PhaseRetried(args.Phase)
	}
	w.deps.Metrics.TasksFinished(args.Phase, metrics.TaskCancelled, ended)
	w.deps.batchFinished(failed)
	return retryErr
}
