package machine

import (
	"context"
	"errors"
	"fmt"
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
	"github.com/arke-institute/orchestrator/db"
	"github.com/arke-institute/orchestrator/jobs"
	"github.com/arke-institute/orchestrator/phases"
)

// launchChunk is how many tasks one launch round claims at most: enough to
// keep LaunchConcurrency requests busy, small enough that a crash mid-round
// strands few claimed tasks (the sweep looks their machines up at the
// deadline, and relaunches those that have none).
const launchChunk = 256

// roundTally is what one round of launches came to: machines launched, a
// 429's wait, or the last phase-level error.
type roundTally struct {
	launched    int
	rateLimited time.Duration // > 0: Fly answered 429; wait this long
	err         error         // a phase-level launch error (last seen)
	held        *Grant        // a spend bound held launches back
	// yielded: a batch of higher priority waits for machines of the
	// phase's app, and the round gave way (precedence.go).
	yielded bool
}

// taskLaunch is how the launch of one claimed task went.
type taskLaunch struct {
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
// launchRoundBudget bounds the claiming of one round, well within a run's
// timeout (ShortTimeout): a round of many machines stops claiming after
// it, and the launcher comes straight back for the rest.
const launchRoundBudget = 20 * time.Second

func (w *PhaseLaunchWorker) round(ctx context.Context, batch db.Batch, name phases.Name, pcfg Phase) (roundTally, error) {
	batchID := batch.ID
	conc := max(1, w.cfg.LaunchConcurrency)
	todo := make(chan db.TaskClaimPendingRow, launchChunk)
	results := make(chan taskLaunch, conc)
	var stopped atomic.Bool // a launch was refused (429) or failed for the phase

	var launchers sync.WaitGroup
	for range conc {
		launchers.Add(1)
		go func() {
			defer launchers.Done()
			for row := range todo {
				if stopped.Load() {
					results <- taskLaunch{row: row, err: errNotLaunched}
					continue
				}
				id, err := w.launchOne(ctx, batchID, name, pcfg, row)
				if err != nil {
					// A 429 or any failure ends the round (requests in
					// flight finish): more requests now would likely meet
					// the same answer, and the retry policy decides what next.
					stopped.Store(true)
				}
				results <- taskLaunch{row: row, machineID: id, err: err}
			}
		}()
	}

	// The recorder: batches of results, recorded one transaction at a time.
	batches := make(chan []taskLaunch, 4)
	recorded := make(chan struct {
		out roundTally
		err error
	}, 1)
	go func() {
		var total roundTally
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
			out roundTally
			err error
		}{total, firstErr}
	}()
	collected := make(chan struct{})
	go func() {
		defer close(collected)
		var pending []taskLaunch
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
	limit := w.cfg.LaunchLimit()
	var claimErr error
	var rateLimited time.Duration
	var held *Grant
	started := time.Now()
	quota := pcfg.BatchSize
	yielded := false
	for claimed := 0; claimed < quota && !stopped.Load() && ctx.Err() == nil && time.Since(started) < launchRoundBudget; {
		// A batch of higher priority waiting for machines of the app
		// goes first: this one launches at most one, its minimum share.
		outranked, err := w.cfg.Outranked(ctx, db.New(w.deps.Pool), batchID, batch.Priority, pcfg.App)
		if err != nil {
			claimErr = err
			break
		}
		if outranked {
			yielded = true
			if claimed > 0 {
				break
			}
			quota = 1
		}
		// The spend bounds first, so that a held launch takes no token.
		bounds, err := w.fleet.Take(ctx, min(quota-claimed, launchChunk))
		if err != nil {
			claimErr = err
			break
		}
		if bounds.N == 0 {
			held = bounds
			break
		}
		granted, wait, err := w.limiter.Take(ctx, LaunchKey(pcfg.App), limit, bounds.N)
		if err != nil {
			bounds.Settle(0)
			claimErr = err
			break
		}
		if granted == 0 {
			bounds.Settle(0)
			rateLimited = wait
			break
		}
		rows, err := db.New(w.deps.Pool).TaskClaimPending(ctx, db.TaskClaimPendingParams{
			BatchID: batchID, Phase: string(name), Max: int32(granted),
			TimeoutSeconds: pcfg.TaskTimeout.Seconds(), SecondsPerGb: pcfg.TaskTimeoutPerGB.Seconds(), Guest: pcfg.Guest.Name(),
		})
		// Claimed tasks are processing: a reading from now on counts them.
		bounds.Settle(len(rows))
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
	out.held = held
	out.yielded = yielded
	return out, nil
}

// record writes down what happened to a batch of launches: machine ids for
// launched tasks; pending again for tasks whose launch surely made no
// machine (429, 4xx, not attempted, or an ambiguous failure after which no
// machine with the task's id exists).
func (w *PhaseLaunchWorker) record(ctx context.Context, batchID string, name phases.Name, pcfg Phase, results []taskLaunch) (roundTally, error) {
	// Rows are updated in task id order, the order every other multi-task
	// update (the callbacks' group commit) locks them in: no deadlock.
	slices.SortFunc(results, func(a, b taskLaunch) int { return strings.Compare(a.row.ID, b.row.ID) })
	var out roundTally
	var launchedIDs, machineIDs []string
	var attempts []int32
	var release taskAttempts
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
			release.add(r.row)
		case errors.Is(r.err, compute.ErrRateLimited):
			release.add(r.row)
			out.rateLimited = max(out.rateLimited, compute.RetryAfter(r.err), time.Second)
		default:
			release.add(r.row)
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
			released, err = w.recordTx(recCtx, tx, batchID, name, pcfg, machineCreations{launchedIDs, attempts, machineIDs}, release)
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

// machineCreations lists the tasks of a round whose machines were created.
type machineCreations struct {
	ids        []string
	attempts   []int32
	machineIDs []string
}

// taskAttempts lists claimed tasks with their launch attempts.
type taskAttempts struct {
	ids      []string
	attempts []int32
}

func (t *taskAttempts) add(row db.TaskClaimPendingRow) {
	t.ids = append(t.ids, row.ID)
	t.attempts = append(t.attempts, row.Attempt)
}

// recordTx is record's transaction: it records the machines and their
// events, and releases the tasks in release that still wait for a machine
// in the same launch attempt, which it returns.
func (w *PhaseLaunchWorker) recordTx(ctx context.Context, tx pgx.Tx, batchID string, name phases.Name, pcfg Phase,
	l machineCreations, release taskAttempts) ([]string, error) {
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
			events = append(events, jobs.NewEvent(batchID, db.EventTaskLaunched, string(name), id, map[string]any{
				"machine_id": l.machineIDs[i], "attempt": l.attempts[i],
			}))
		}
		if _, err := q.BatchEventInsertMany(ctx, events); err != nil {
			return nil, fmt.Errorf("recording launch events: %w", err)
		}
	}
	var released []string
	if len(release.ids) > 0 {
		var err error
		if released, err = q.TaskRelease(ctx, db.TaskReleaseParams{IDs: release.ids, Attempts: release.attempts}); err != nil {
			return nil, fmt.Errorf("releasing tasks not launched: %w", err)
		}
	}
	if len(orphans) > 0 {
		if _, err := river.ClientFromContext[pgx.Tx](ctx).InsertTx(ctx, tx, DestroyArgs{App: pcfg.App, MachineIDs: orphans}, nil); err != nil {
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
