package jobs

import (
	"context"
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"go.opentelemetry.io/otel/attribute"

	"github.com/arke-institute/orchestrator/db"
	"github.com/arke-institute/orchestrator/fanin"
	"github.com/arke-institute/orchestrator/phases"
	"github.com/arke-institute/orchestrator/tracing"
)

// riverDriver is the driver type River's transactional helpers are
// instantiated with.
type riverDriver = riverpgxv5.Driver

// PhaseCheckWorker works fanin.PhaseCheckArgs, the fan-in of a phase:
// the check that finds no open work left moves the batch on. While much
// is open, one check waits it out (waitOut).
type PhaseCheckWorker struct {
	Defaults[fanin.PhaseCheckArgs]
	deps  Deps
	build BuildSizes
	hooks *TestHooks
}

// NextRetry retries a failed check within seconds. One check may wait out a
// whole phase, gathering the errors of every transient failure in it (a
// database failover), and River's default backoff, (errors+1)^4 s, would
// soon leave the phase's end unseen for many minutes: task ends enqueue
// nothing while the check is retryable.
func (w *PhaseCheckWorker) NextRetry(job *river.Job[fanin.PhaseCheckArgs]) time.Time {
	return time.Now().Add(min(time.Duration(len(job.Errors)+1)*time.Second, maxCheckRetryDelay))
}

// maxCheckRetryDelay bounds the wait before a failed check runs again.
const maxCheckRetryDelay = 10 * time.Second

// Work decides whether the phase is over and, if so, transitions it: it
// counts the open work, transitions and completes itself in one
// transaction under the batch's exclusive fan-in lock, the exclusive side
// of the fan-in protocol (package fanin), which is why no wake-up is lost.
//
// A phase far from its end is waited out first, without the lock (waitOut).
func (w *PhaseCheckWorker) Work(ctx context.Context, job *river.Job[fanin.PhaseCheckArgs]) error {
	args := job.Args
	again, err := w.settle(ctx, args)
	if err != nil {
		return err
	}
	if d, err := w.waitOut(ctx, args); err != nil {
		return err
	} else if d > 0 {
		// Meanwhile, what the transition would write of the files whose
		// work is over can be written now. A failure only loses the head
		// start: the transition writes what was not written ahead.
		if err := w.writeAhead(ctx, args); err != nil && ctx.Err() == nil {
			w.deps.Logger.WarnContext(ctx, "writing the next generation ahead", "batch_id", args.BatchID, "phase", args.Phase, "error", err)
		}
		return river.JobSnooze(d)
	}
	var finished *db.Batch // the batch, if the transition ended it
	var ended *PhaseAt     // the phase, if the check ended it
	var settler Settler    // its executor, if it settles its work
	unsettled := false
	err = pgx.BeginFunc(ctx, w.deps.Pool, func(tx pgx.Tx) error {
		q := db.New(tx)
		if w.hooks.fanInGuard() {
			if err := fanin.LockBatch(ctx, tx, args.BatchID); err != nil {
				return err
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
		if batch.BuildFrom != nil {
			// The phase's tasks are still being written; the build's last
			// chunk makes sure a check runs after it.
			return done()
		}
		ex, p, ok := w.deps.Executors.Of(args.Phase)
		if !ok {
			_, err := failBatch(ctx, Tx{Tx: tx, River: river.ClientFromContext[pgx.Tx](ctx)}, w.deps, args.BatchID, args.Phase, fmt.Sprintf("unknown phase %q", args.Phase))
			return errors.Join(err, done())
		}
		hasOpen, err := ex.HasOpen(ctx, q, PhaseAt{BatchID: args.BatchID, Phase: p, Generation: batch.Generation})
		if err != nil {
			return fmt.Errorf("looking for open work of batch %s, phase %s: %w", args.BatchID, args.Phase, err)
		}
		if w.hooks != nil {
			open := int64(0)
			if hasOpen {
				open = 1
			}
			w.hooks.afterOpenCount(args.BatchID, open)
		}
		if hasOpen {
			return done()
		}
		at := PhaseAt{BatchID: args.BatchID, Phase: p, Generation: batch.Generation}
		if s, ok := ex.(Settler); ok {
			settler = s
		}
		if again != nil {
			if unsettled, err = again(ctx, q); err != nil || unsettled {
				// The check stays unfinished and looks again: no task end
				// will wake it.
				return err
			}
		}
		tctx, span := w.deps.Tracer.StartBatchStep(ctx, args.BatchID, "phase.transition", tracing.PhaseKey.String(args.Phase),
			attribute.Int("generation", int(batch.Generation)))
		finished, err = w.transition(tctx, tx, batch)
		tracing.End(span, err)
		if err != nil {
			return err
		}
		ended = &at
		return done()
	})
	if err != nil {
		return err
	}
	if unsettled {
		return river.JobSnooze(settleAgain)
	}
	w.deps.BatchFinished(finished)
	if ended != nil {
		w.tracePhase(ctx, args)
	}
	if settler != nil && ended != nil {
		if err := settler.Settled(ctx, *ended); err != nil {
			w.deps.Logger.Warn("cleaning up after a phase", "batch_id", args.BatchID, "phase", args.Phase, "error", err)
		}
	}
	return nil
}

// tracePhase records the phase the check ended as a span of the batch's
// trace from its start to its end, as its events have them, when tracing
// is on: one read a phase.
func (w *PhaseCheckWorker) tracePhase(ctx context.Context, args fanin.PhaseCheckArgs) {
	if w.deps.Tracer == nil {
		return
	}
	spans, err := db.New(w.deps.Pool).BatchEventPhaseSpans(ctx, db.BatchEventPhaseSpansParams{
		BatchID: args.BatchID, Started: db.EventPhaseStarted, Completed: db.EventPhaseCompleted})
	if err != nil {
		w.deps.Logger.WarnContext(ctx, "reading the phase's times for its span", "batch_id", args.BatchID, "phase", args.Phase, "error", err)
		return
	}
	for _, s := range spans {
		if s.Phase == args.Phase && s.CompletedAt != nil {
			w.deps.Tracer.RecordPhase(ctx, args.BatchID, s.Phase, s.StartedAt, *s.CompletedAt)
		}
	}
}

// settleAgain is how soon a check that found the phase's work ended but
// not settled (Settler) looks again.
const settleAgain = 100 * time.Millisecond

// ErrUnsettled is a Settler's Settle that stopped at its budget with work
// left: the check comes back at once to go on.
var ErrUnsettled = errors.New("work left to settle")

// settle has the phase's executor settle its ended work (Settler) before
// the check looks, outside any transaction, and returns its test for
// under the lock.
func (w *PhaseCheckWorker) settle(ctx context.Context, args fanin.PhaseCheckArgs) (func(context.Context, *db.Queries) (bool, error), error) {
	ex, p, ok := w.deps.Executors.Of(args.Phase)
	s, settles := ex.(Settler)
	if !ok || !settles {
		return nil, nil
	}
	again, err := s.Settle(ctx, PhaseAt{BatchID: args.BatchID, Phase: p})
	if errors.Is(err, ErrUnsettled) {
		return nil, river.JobSnooze(0)
	}
	if err != nil {
		return nil, fmt.Errorf("settling the ended work of batch %s, phase %s: %w", args.BatchID, args.Phase, err)
	}
	return again, nil
}

// Waiting out an open phase.
//
// While a phase has many tasks open, its end is far off: with n open it
// cannot come sooner than n / maxEndRate. Where the phase's executor can
// count its open work cheaply without a lock (OpenCounter), a check that
// finds more than waitOutAbove open does not complete: it
// snoozes that long (within [minWaitOut, maxWaitOut]) and looks again,
// unfinished all the while. Task ends that find it unfinished enqueue
// nothing (EnsurePhaseCheck), so during the bulk of a phase callbacks
// neither insert checks nor wait for a check's exclusive lock, which each
// check took, and held through a WAL flush, several times a second under
// load. Near the end (at most waitOutAbove open) checks run as before.
//
// No wake-up is lost: a check becomes finished only by completing under the
// exclusive lock with an exact count (Work); waiting out only keeps it
// unfinished for longer. A phase's end is found late by at most the last
// snooze (maxWaitOut) plus a fetch poll, and the writing ahead before it
// (aheadBudget and a stretch), and only when its last tasks end faster
// than maxEndRate, as when the sweep fails thousands at once; at the rates
// callbacks come in, by at most minWaitOut plus a fetch poll.
//
// While a large generation is still being written (a chunked build), a
// check waits out the tasks written so far the same way; the build's last
// chunk then finds it unfinished and enqueues none, and the check's next
// look sees the whole phase.
const (
	maxEndRate = 20000 // tasks a second: more than this machine applies
	minWaitOut = 50 * time.Millisecond
	maxWaitOut = 2 * time.Second // below River's scheduler interval: no scheduler hop
)

// waitOutAbove is how many open tasks make a check wait out its phase
// (TestHooks.WaitOutAbove changes it for a test's client).
const waitOutAbove = 1000

// waitOut returns how long the check should snooze before it looks again,
// or 0 when it should look under the lock now: the phase has at most
// waitOutAbove tasks open, or the batch is no longer simply in it.
func (w *PhaseCheckWorker) waitOut(ctx context.Context, args fanin.PhaseCheckArgs) (time.Duration, error) {
	ex, _, _ := w.deps.Executors.Of(args.Phase)
	counter, ok := ex.(OpenCounter)
	if !ok {
		return 0, nil // e.g. a few chunks, each ending once: nothing to wait out
	}
	open, err := counter.OpenCount(ctx, db.New(w.deps.Pool), fanin.PhaseRef(args))
	if err != nil {
		return 0, fmt.Errorf("counting open tasks of batch %s, phase %s: %w", args.BatchID, args.Phase, err)
	}
	w.hooks.afterWaitOutCount(args.BatchID, open)
	if open <= w.hooks.waitOutAbove() {
		return 0, nil
	}
	return min(max(time.Duration(open)*time.Second/maxEndRate, minWaitOut), maxWaitOut), nil
}

// transition applies the phase's transform to the batch's current file
// generation, writes the next generation, and enters the next phase with
// work, or finishes the batch. A transform that fails for one file never
// loses it: the file passes through unchanged and the problem is recorded.
// It returns the batch if it ended (DONE, or ERROR for an unknown phase).
//
// A large generation is written in chunks (see BuildSizes): once the
// files read so far show that the phase right after this one has work,
// this transaction writes them with their tasks, moves the batch into that
// phase and leaves the rest to a phase_build job, so that the next phase's
// machines start while the rest is written.
func (w *PhaseCheckWorker) transition(ctx context.Context, tx pgx.Tx, batch db.Batch) (*db.Batch, error) {
	q := db.New(tx)
	ptx := Tx{Tx: tx, River: river.ClientFromContext[pgx.Tx](ctx)}
	t0 := time.Now()
	lap := func() time.Duration { d := time.Since(t0); t0 = time.Now(); return d }
	name := phases.Name(batch.Status)
	ex, p, ok := w.deps.Executors.Of(batch.Status)
	if !ok {
		return failBatch(ctx, ptx, w.deps, batch.ID, batch.Status, fmt.Sprintf("unknown phase %q", batch.Status))
	}
	progress, err := ex.Progress(ctx, q, []string{batch.ID})
	if err != nil {
		return nil, fmt.Errorf("counting the work of %s: %w", batch.Status, err)
	}
	var completed, failed, infra, total int64 // every unit of the phase's work has ended
	for _, pp := range progress[batch.ID] {
		if pp.Phase == batch.Status {
			completed, failed = pp.TasksCompleted, pp.TasksTotal-pp.TasksCompleted
			infra, total = pp.TasksFailedInfrastructure, pp.TasksTotal
		}
	}
	w.deps.Metrics.InfraFailures(batch.Status, int(infra))
	if limit := w.deps.Settings.InfraFailureMax; infra > limit.Of(total) {
		return failBatch(ctx, ptx, w.deps, batch.ID, batch.Status, fmt.Sprintf(
			"%d of %d %s failed for infrastructure reasons (timeouts, dead machines, outages, a spent quota), more than INFRA_FAILURE_MAX (%s); "+
				"POST /admin/retry/%s?mode=infrastructure runs them again", infra, total, unitOf(progress[batch.ID], batch.Status), limit, batch.ID))
	}
	dTasks := lap()
	// The phase right after this one: the generation can be written in
	// chunks once it is known to be the next phase, which the first of its
	// files to need work shows, and if its executor can take a generation
	// part by part (Extender). (A later phase is next only if no file of
	// the whole generation needs this one; the generation is then read to
	// its end first, as a small one is.) A generation written ahead (see
	// writeAhead) is read and written from where that got to.
	candidate := w.chunkTarget(p)
	ahead, err := aheadOf(ctx, q, batch)
	if err != nil {
		return nil, err
	}
	after := int32(-1) // the last input ordinal written ahead
	if ahead != nil {
		candidate, after = nil, ahead.LastInput
	}
	n, err := q.FileCountByBatchGeneration(ctx, db.FileCountByBatchGenerationParams{BatchID: batch.ID, Generation: batch.Generation})
	if err != nil {
		return nil, fmt.Errorf("counting generation %d of batch %s: %w", batch.Generation, batch.ID, err)
	}
	n -= int64(after + 1)
	rest := n                    // input files to read
	upTo := int32(math.MaxInt32) // the last ordinal to read first
	if candidate != nil && w.build.FirstFiles > 0 && n > int64(w.build.FirstFiles) {
		upTo, n = int32(w.build.FirstFiles-1), int64(w.build.FirstFiles)
	}
	// Room for every input and one output in eight more (a converted TIFF
	// adds its JPEG), so that the usual next generation never has to be
	// copied into a bigger array while the old one is still alive.
	gen := nextGeneration{from: p, outcomes: ex, batchID: batch.ID, next: make([]phases.File, 0, n+n/8), join: joinFor(ex.Outcomes(), n)}
	if err := gen.read(ctx, tx, batch.Generation, after, upTo, candidate); err != nil {
		return nil, err
	}
	complete := upTo == math.MaxInt32
	if !complete && !gen.decided { // read the rest too
		gen.join = joinFor(ex.Outcomes(), rest-n)
		if err := gen.read(ctx, tx, batch.Generation, upTo, math.MaxInt32, nil); err != nil {
			return nil, err
		}
		complete = true
	}
	dApply := lap() // reading the generation and its outcomes, and transforming it

	first := int32(0) // the ordinal of gen.next[0] in the next generation
	if ahead != nil {
		first = ahead.Files
		gen.filesIn += int(ahead.LastInput) + 1
	}
	data := map[string]any{"tasks_completed": completed, "tasks_failed": failed}
	if complete {
		data["files_in"], data["files_out"] = gen.filesIn, int(first)+len(gen.next)
	}
	if ahead != nil {
		data["files_written_ahead"] = ahead.Files
	}
	events := append([]db.BatchEventInsertManyParams{NewEvent(batch.ID, db.EventPhaseCompleted, batch.Status, "", data)},
		problemEvents(batch.ID, batch.Status, gen.problems)...)
	if _, err := q.BatchEventInsertMany(ctx, events); err != nil {
		return nil, fmt.Errorf("recording phase events: %w", err)
	}
	next := batch.Generation + 1
	dEvents := lap()
	stored, err := insertGeneration(ctx, tx, batch.ID, next, name, first, gen.next)
	if err != nil {
		return nil, err
	}
	dInsert := lap()
	var finished *db.Batch
	switch {
	case ahead != nil:
		finished, err = w.enterAfterAhead(ctx, ptx, p, ahead, next, stored)
	case complete:
		finished, err = enterNextPhase(ctx, ptx, w.deps, batch.ID, phases.Next(p.Spec().Name), next, stored)
	default:
		err = startBuild(ctx, ptx, w.deps, w.build, batch.ID, name, candidate, next, gen.cursor, stored)
	}
	w.deps.Logger.InfoContext(ctx, "phase completed", "batch_id", batch.ID, "phase", batch.Status,
		"tasks_completed", completed, "tasks_failed", failed, "files", int(first)+len(stored), "files_written_ahead", first,
		"generation_complete", complete,
		"tasks_ms", dTasks.Milliseconds(), "apply_ms", dApply.Milliseconds(),
		"events_ms", dEvents.Milliseconds(), "insert_ms", dInsert.Milliseconds(), "next_ms", lap().Milliseconds())
	return finished, err
}

// nextGeneration is the next generation as a transform makes it: its
// files read so far, and the problems met.
type nextGeneration struct {
	from     phases.Phase // the phase whose transform applies
	outcomes Executor     // from's executor, which finds its work's outcomes
	join     joinBy
	batchID  string
	next     []phases.File
	problems []transformProblem
	filesIn  int
	cursor   int32 // ordinal of the last input file read
	decided  bool  // an output needs a task of the candidate phase
}

// read transforms the files of generation gen with ordinals in (after,
// upTo], appending to a.next. With a candidate phase, it records whether
// any output needs a task of it (decided).
func (a *nextGeneration) read(ctx context.Context, tx pgx.Tx, gen, after, upTo int32, candidate phases.Phase) error {
	rd, err := readGeneration(ctx, tx, a.outcomes, a.from, a.batchID, gen, after, upTo, a.join)
	if err != nil {
		return err
	}
	for rd.Next() {
		a.filesIn++
		a.cursor = rd.ordinal
		a.next = append(a.next, rd.outs...)
		if rd.problem != nil {
			a.problems = append(a.problems, *rd.problem)
		}
		if candidate != nil && !a.decided && len(phases.Work(candidate, rd.outs)) > 0 {
			a.decided = true
		}
	}
	if err := rd.Err(); err != nil {
		rd.Close(ctx) // the read's error is the one to report
		return fmt.Errorf("reading generation %d of batch %s: %w", gen, a.batchID, err)
	}
	return rd.Close(ctx)
}

// problemEvents are the transform_failed events of a batch's problems in
// phase.
func problemEvents(batchID, phase string, problems []transformProblem) []db.BatchEventInsertManyParams {
	events := make([]db.BatchEventInsertManyParams, 0, len(problems))
	for _, pr := range problems {
		events = append(events, NewEvent(batchID, db.EventTransformFailed, phase, pr.taskID, map[string]any{"error": pr.err.Error()}))
	}
	return events
}

// unitOf is what phase's work counts ("tasks", "refs"), "units" if unknown.
func unitOf(ps []PhaseProgress, phase string) string {
	for _, p := range ps {
		if p.Phase == phase && p.Unit != "" {
			return p.Unit
		}
	}
	return "units"
}
