package jobs

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgerrcode"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/riverqueue/river"

	"github.com/arke-institute/orchestrator/compute"
	"github.com/arke-institute/orchestrator/config"
	"github.com/arke-institute/orchestrator/db"
	"github.com/arke-institute/orchestrator/metrics"
	"github.com/arke-institute/orchestrator/phases"
	"github.com/arke-institute/orchestrator/ratelimit"
)

// launchChunk is how many tasks one launch round claims at most: enough to
// keep LaunchConcurrency requests busy, small enough that a crash mid-round
// strands few claimed tasks (the sweep looks their machines up at the
// deadline, and relaunches those that have none).
const launchChunk = 256

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
	river.WorkerDefaults[PhaseLaunchArgs]
	deps    Deps
	limiter *ratelimit.Limiter
}

// launchOutcome is what one round of launches came to.
type launchOutcome struct {
	launched    int
	rateLimited time.Duration // > 0: Fly answered 429; wait this long
	err         error         // a phase-level launch error (last seen)
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

// launchResult is how the launch of one claimed task went.
type launchResult struct {
	row       db.TaskClaimPendingRow
	machineID string
	err       error
}

// errNotLaunched marks a claimed task that the round stopped before
// launching: it goes back to pending, like a task refused with a 429.
var errNotLaunched = errors.New("launch round stopped before this task")

// round launches machines for up to BatchSize pending tasks as one
// pipeline, so that launch requests never wait for the database:
//
//   - the claimer (this goroutine) takes tokens from the shared bucket and
//     claims up to launchChunk tasks at a time, keeping at most about two
//     chunks claimed ahead of the launchers;
//   - LaunchConcurrency launchers send the launch requests;
//   - the recorder records each launchChunk results in one transaction
//     (machine ids, events, releases) while launches go on.
//
// A 429 or a phase-level launch error stops the round: tasks claimed but
// not yet launched go back to pending. Every claimed task is recorded
// before round returns, also when ctx is cancelled; so a crash strands at
// most the few chunks in the pipe, which the sweep settles at their
// deadline.
func (w *PhaseLaunchWorker) round(ctx context.Context, batchID string, name phases.Name, pcfg config.Phase) (launchOutcome, error) {
	conc := max(1, w.deps.Config.LaunchConcurrency)
	todo := make(chan db.TaskClaimPendingRow, launchChunk)
	results := make(chan launchResult, conc)
	var stopped atomic.Bool // a launch was refused (429) or failed for the phase

	var launchers sync.WaitGroup
	for range conc {
		launchers.Add(1)
		go func() {
			defer launchers.Done()
			for row := range todo {
				if stopped.Load() {
					results <- launchResult{row: row, err: errNotLaunched}
					continue
				}
				id, err := w.launchOne(ctx, batchID, name, pcfg, row)
				if err != nil {
					// A 429 or any failure ends the round (requests in
					// flight finish): more requests now would likely meet
					// the same answer, and the retry policy decides what next.
					stopped.Store(true)
				}
				results <- launchResult{row: row, machineID: id, err: err}
			}
		}()
	}

	// The recorder: batches of results, recorded one transaction at a time.
	batches := make(chan []launchResult, 4)
	recorded := make(chan struct {
		out launchOutcome
		err error
	}, 1)
	go func() {
		var total launchOutcome
		var firstErr error
		for b := range batches {
			if firstErr != nil {
				continue // keep draining; the round reports the first error
			}
			out, err := w.record(ctx, batchID, name, pcfg, b)
			if err != nil {
				firstErr = err
				continue
			}
			total.launched += out.launched
			total.rateLimited = max(total.rateLimited, out.rateLimited)
			if out.err != nil {
				total.err = out.err
			}
		}
		recorded <- struct {
			out launchOutcome
			err error
		}{total, firstErr}
	}()
	collected := make(chan struct{})
	go func() {
		defer close(collected)
		var pending []launchResult
		for r := range results {
			pending = append(pending, r)
			if len(pending) >= launchChunk {
				batches <- pending
				pending = nil
			}
		}
		if len(pending) > 0 {
			batches <- pending
		}
		close(batches)
	}()

	// The claimer.
	limit := ratelimit.Limit{Rate: w.deps.Config.FlyLaunchRate, Burst: w.deps.Config.FlyLaunchBurst}
	var claimErr error
	var rateLimited time.Duration
	for claimed := 0; claimed < pcfg.BatchSize && !stopped.Load() && ctx.Err() == nil; {
		want := min(pcfg.BatchSize-claimed, launchChunk)
		granted, wait, err := w.limiter.Take(ctx, "fly-launch:"+pcfg.FlyAppName, limit, want)
		if err != nil {
			claimErr = err
			break
		}
		if granted == 0 {
			rateLimited = wait
			break
		}
		rows, err := db.New(w.deps.Pool).TaskClaimPending(ctx, db.TaskClaimPendingParams{
			BatchID: batchID, Phase: string(name), Max: int32(granted), TimeoutSeconds: pcfg.TaskTimeout.Seconds(),
		})
		if err != nil {
			claimErr = fmt.Errorf("claiming pending tasks: %w", err)
			break
		}
		claimed += len(rows)
		for _, row := range rows {
			todo <- row // blocks while a chunk is still waiting: the claimer stays about two chunks ahead
		}
		if len(rows) < granted {
			break // no more pending tasks
		}
	}
	close(todo)
	launchers.Wait()
	close(results)
	<-collected
	rec := <-recorded
	if claimErr != nil {
		return rec.out, claimErr
	}
	if rec.err != nil {
		return rec.out, rec.err
	}
	out := rec.out
	out.rateLimited = max(out.rateLimited, rateLimited)
	return out, nil
}

// record writes down what happened to a batch of launches: machine ids for
// launched tasks; pending again for tasks whose launch surely made no
// machine (429, 4xx, not attempted, or an ambiguous failure after which no
// machine with the task's id exists).
func (w *PhaseLaunchWorker) record(ctx context.Context, batchID string, name phases.Name, pcfg config.Phase, results []launchResult) (launchOutcome, error) {
	// Rows are updated in task id order, the order every other multi-task
	// update (the callbacks' group commit) locks them in: no deadlock.
	slices.SortFunc(results, func(a, b launchResult) int { return strings.Compare(a.row.ID, b.row.ID) })
	var out launchOutcome
	var launchedIDs, machineIDs, release []string
	var attempts []int32
	var unresolved *unresolvedLaunch
	failed := map[string]error{} // launch errors of tasks to release
	for _, r := range results {
		switch {
		case r.err == nil:
			launchedIDs = append(launchedIDs, r.row.ID)
			attempts = append(attempts, r.row.Attempt)
			machineIDs = append(machineIDs, r.machineID)
		case errors.As(r.err, &unresolved):
			// Its machine may exist, holding the task's token: keep the task
			// processing as it is. A callback will end it; if none comes,
			// the sweep looks the machine up again at the deadline.
			out.err = r.err
		case errors.Is(r.err, errNotLaunched):
			release = append(release, r.row.ID)
		case errors.Is(r.err, compute.ErrRateLimited):
			release = append(release, r.row.ID)
			out.rateLimited = max(out.rateLimited, compute.RetryAfter(r.err), time.Second)
		default:
			release = append(release, r.row.ID)
			failed[r.row.ID] = r.err
		}
	}
	out.launched = len(launchedIDs)
	// The bookkeeping must happen even when the job's context was cancelled
	// mid-round (an admin reset cancels the launcher, a job can time out):
	// machines created in this round are recorded, or destroyed if their
	// task ended meanwhile, never forgotten.
	recCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
	defer cancel()
	// The rows are updated in id order, as callback groups update them, but
	// a plan may still lock them in another order: a deadlock is retried.
	var released []string
	err := retryDeadlock(func() error {
		return pgx.BeginFunc(recCtx, w.deps.Pool, func(tx pgx.Tx) error {
			var err error
			released, err = w.recordTx(recCtx, tx, batchID, name, pcfg, launched{launchedIDs, attempts, machineIDs}, release)
			return err
		})
	})
	// A failed launch is a phase-level error only if its task was still
	// waiting for a machine: one whose (ambiguous) launch did create a
	// machine that has already called back is done.
	for _, id := range released {
		if e, ok := failed[id]; ok {
			out.err = e
		}
	}
	return out, err
}

// launched lists the tasks of a round whose machines were created.
type launched struct {
	ids        []string
	attempts   []int32
	machineIDs []string
}

// recordTx is record's transaction: it records the machines and their
// events, and releases the tasks in release that still wait for a machine,
// which it returns.
func (w *PhaseLaunchWorker) recordTx(ctx context.Context, tx pgx.Tx, batchID string, name phases.Name, pcfg config.Phase,
	l launched, release []string) ([]string, error) {
	q := db.New(tx)
	var orphans []string // machines whose task ended while they were launched
	if len(l.ids) > 0 {
		kept, err := q.TaskSetMachines(ctx, db.TaskSetMachinesParams{IDs: l.ids, Attempts: l.attempts, MachineIDs: l.machineIDs})
		if err != nil {
			return nil, fmt.Errorf("recording launched machines: %w", err)
		}
		// A machine is wanted if its task is in this launch attempt and
		// was not reset or timed out meanwhile.
		wanted := make(map[string]bool, len(kept))
		for _, k := range kept {
			wanted[k.ID] = k.EndedBy == nil || *k.EndedBy == "callback"
		}
		events := make([]db.BatchEventInsertManyParams, 0, len(kept))
		for i, id := range l.ids {
			if !wanted[id] {
				orphans = append(orphans, l.machineIDs[i])
				continue
			}
			events = append(events, newEvent(batchID, db.EventTaskLaunched, string(name), id, map[string]any{
				"machine_id": l.machineIDs[i], "attempt": l.attempts[i],
			}))
		}
		if _, err := q.BatchEventInsertMany(ctx, events); err != nil {
			return nil, fmt.Errorf("recording launch events: %w", err)
		}
	}
	var released []string
	if len(release) > 0 {
		var err error
		if released, err = q.TaskRelease(ctx, release); err != nil {
			return nil, fmt.Errorf("releasing tasks not launched: %w", err)
		}
	}
	if len(orphans) > 0 {
		if _, err := river.ClientFromContext[pgx.Tx](ctx).InsertTx(ctx, tx, MachineDestroyArgs{App: pcfg.FlyAppName, MachineIDs: orphans}, nil); err != nil {
			return nil, err
		}
	}
	return released, nil
}

// retryDeadlock runs f again, up to three times in all, while Postgres
// aborts it to break a deadlock.
func retryDeadlock(f func() error) error {
	var err error
	for range 3 {
		var pgErr *pgconn.PgError
		if err = f(); !errors.As(err, &pgErr) || pgErr.Code != pgerrcode.DeadlockDetected {
			return err
		}
	}
	return err
}

// launchOne launches the machine of one task. After an ambiguous failure it
// looks the task's machine up by metadata before giving up, so a launch that
// did create a machine is recorded instead of repeated: no task gets two.
func (w *PhaseLaunchWorker) launchOne(ctx context.Context, batchID string, name phases.Name, pcfg config.Phase, row db.TaskClaimPendingRow) (string, error) {
	spec := w.machineSpec(batchID, name, pcfg, row)
	m, err := w.deps.Compute.Launch(ctx, spec)
	if err == nil {
		w.deps.Metrics.MachineLaunched(string(name))
		return m.ID, nil
	}
	if ctx.Err() == nil || !errors.Is(err, ctx.Err()) {
		// A launch the job itself gave up on (cancelled by a reset, say)
		// is no failure of the provider's.
		w.deps.Metrics.LaunchFailed(string(name), launchFailureReason(err))
	}
	if !errors.Is(err, compute.ErrAmbiguous) {
		return "", err
	}
	// Look even if the job was cancelled meanwhile: a machine created by
	// this launch must be known so that it can be recorded or destroyed.
	findCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 15*time.Second)
	defer cancel()
	found, ferr := w.deps.Compute.FindByTask(findCtx, pcfg.FlyAppName, row.ID)
	if ferr != nil {
		return "", &unresolvedLaunch{fmt.Errorf("%w (and looking for its machine failed: %v)", err, ferr)}
	}
	if len(found) == 0 {
		return "", err
	}
	// Keep one; any extra (a retried POST that created two) is destroyed.
	for _, extra := range found[1:] {
		if derr := w.deps.Compute.Destroy(ctx, pcfg.FlyAppName, extra.ID); derr != nil {
			w.deps.Logger.Warn("destroying duplicate machine", "batch_id", batchID, "task_id", row.ID, "phase", string(name),
				"machine_id", extra.ID, "error", derr)
		}
	}
	w.deps.Metrics.MachineLaunched(string(name))
	return found[0].ID, nil
}

// launchFailureReason sorts a failed launch for the launch failure metric
// by what the provider answered: 429, another 4xx, 5xx, or nothing at all.
func launchFailureReason(err error) string {
	var ce *compute.Error
	switch {
	case errors.Is(err, compute.ErrRateLimited):
		return metrics.LaunchRateLimited
	case !errors.As(err, &ce):
		return metrics.LaunchOther
	case ce.StatusCode >= 500:
		return metrics.Launch5xx
	case ce.StatusCode >= 400:
		return metrics.Launch4xx
	case errors.Is(err, compute.ErrAmbiguous):
		return metrics.LaunchNetwork
	default:
		return metrics.LaunchOther
	}
}

// unresolvedLaunch is an ambiguous launch whose machine could not be looked
// up: it may or may not exist.
type unresolvedLaunch struct{ err error }

func (e *unresolvedLaunch) Error() string { return e.err.Error() }
func (e *unresolvedLaunch) Unwrap() error { return e.err }

// machineSpec is the machine of spec 000 §4.3 for one task.
func (w *PhaseLaunchWorker) machineSpec(batchID string, name phases.Name, pcfg config.Phase, row db.TaskClaimPendingRow) compute.MachineSpec {
	c := w.deps.Config
	env := map[string]string{
		"TASK_ID":              row.ID,
		"BATCH_ID":             batchID,
		"INPUT_R2_KEY":         row.R2Key,
		"INPUT_FILE_NAME":      row.FileName,
		"INPUT_CONTENT_TYPE":   row.ContentType,
		"R2_ACCOUNT_ID":        c.R2AccountID,
		"R2_ACCESS_KEY_ID":     c.R2AccessKeyID,
		"R2_SECRET_ACCESS_KEY": c.R2SecretAccessKey,
		"R2_BUCKET":            c.R2Bucket,
		"CALLBACK_URL":         c.OrchestratorURL + "/callback/" + batchID + "/" + row.ID,
		"CALLBACK_TOKEN":       row.Token,
	}
	if c.R2Endpoint != "" {
		env["R2_ENDPOINT"] = c.R2Endpoint
	}
	if row.CID != nil {
		env["INPUT_CID"] = *row.CID
	}
	maps.Copy(env, pcfg.Env)
	if p, ok := phases.Get(name); ok {
		for _, k := range p.Spec().SharedEnv {
			env[k], _ = c.Shared(k)
		}
	}
	return compute.MachineSpec{
		App: pcfg.FlyAppName, Image: pcfg.WorkerImage, Region: c.FlyRegion,
		Name:   strings.ReplaceAll(row.ID, "_", "-"),
		TaskID: row.ID, BatchID: batchID, Phase: string(name), Env: env,
		MemoryMB: pcfg.MemoryMB, CPUs: pcfg.CPUs, CPUKind: pcfg.CPUKind,
	}
}
