package jobs

import (
	"context"
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river"

	"github.com/arke-institute/orchestrator/db"
	"github.com/arke-institute/orchestrator/fanin"
	"github.com/arke-institute/orchestrator/metrics"
	"github.com/arke-institute/orchestrator/phases"
	"github.com/arke-institute/orchestrator/tracing"
)

// PhaseBuildArgs writes the rest of a file generation, and its tasks, that
// a transition started (PhaseCheckWorker.transition): the batch is already
// in Phase, working on the files written so far. Unique per batch and
// generation while unfinished.
type PhaseBuildArgs struct {
	BatchID    string `json:"batch_id"`
	Phase      string `json:"phase"`      // the phase the generation's tasks belong to
	From       string `json:"from"`       // the phase whose transform makes the generation
	Generation int32  `json:"generation"` // the generation being written
}

// Kind is the River job kind.
func (PhaseBuildArgs) Kind() string { return "phase_build" }

// InsertOpts makes the job unique while unfinished. A build that fails
// buildMaxAttempts times (some four hours of River's backoff) fails its
// batch, rather than leave it waiting for ever. Builds have a queue of
// their own (BuildQueue).
func (PhaseBuildArgs) InsertOpts() river.InsertOpts {
	return river.InsertOpts{Queue: BuildQueue, MaxAttempts: buildMaxAttempts,
		UniqueOpts: river.UniqueOpts{ByArgs: true, ByState: fanin.UniqueUnfinished}}
}

const buildMaxAttempts = 10

// BuildQueue is the River queue of phase_build jobs. Each build holds two
// database connections (its long read and a chunk's transaction), so a
// process runs at most buildWorkers at once: more large transitions at
// once would otherwise take every connection of the pool.
const BuildQueue = "phase_build"

const buildWorkers = 4

// PhaseBuildWorker works PhaseBuildArgs.
type PhaseBuildWorker struct {
	Defaults[PhaseBuildArgs]
	deps  Deps
	build BuildSizes
	hooks *TestHooks
}

// Timeout is longJobTimeout: a run writes a large generation, chunk after
// chunk.
func (w *PhaseBuildWorker) Timeout(*river.Job[PhaseBuildArgs]) time.Duration { return longJobTimeout }

// errBuildMoved stops a build whose batch is no longer where the build
// left it: reset, failed, or written by another run of the job.
var errBuildMoved = errors.New("the batch moved on")

// startBuild is the end of a transition that wrote only the first stretch
// of the next generation (stored, covering the input files up to ordinal
// cursor): it moves the batch into p with the build recorded, has p's
// executor enter it with them (an Extender: the rest comes by Extend), and
// enqueues the phase_build that writes the rest. Runs in the transition's
// transaction.
func startBuild(ctx context.Context, tx Tx, d Deps, sizes BuildSizes, batchID string, from phases.Name, p phases.Phase, gen, cursor int32, stored []phases.File) error {
	q := tx.Queries()
	name := string(p.Spec().Name)
	if _, err := q.BatchSetPhaseBuilding(ctx, db.BatchSetPhaseBuildingParams{
		ID: batchID, Phase: name, Generation: gen, BuildFrom: string(from), Cursor: cursor,
	}); err != nil {
		if errors.Is(err, pgx.ErrNoRows) {
			return nil // reset meanwhile
		}
		return fmt.Errorf("moving batch %s to %s: %w", batchID, name, err)
	}
	data, err := d.Executors.executor(p).Enter(ctx, tx, PhaseAt{BatchID: batchID, Phase: p, Generation: gen}, stored)
	if err != nil {
		return fmt.Errorf("entering %s of batch %s: %w", name, batchID, err)
	}
	data = withGeneration(data, gen)
	data["generation_complete"] = false
	if err := q.EventRecord(ctx, db.Event{BatchID: batchID, Type: db.EventPhaseStarted, Phase: name, Data: data}); err != nil {
		return err
	}
	build := PhaseBuildArgs{BatchID: batchID, Phase: name, From: string(from), Generation: gen}
	opts := build.InsertOpts()
	if sizes.MaxAttempts > 0 {
		opts.MaxAttempts = sizes.MaxAttempts
	}
	if _, err := tx.River.InsertTx(ctx, tx.Tx, build, &opts); err != nil {
		return fmt.Errorf("enqueueing the build of %s %s: %w", batchID, name, err)
	}
	return nil
}

// Work reads the previous generation from where the build got to, in one
// query, and writes its transform in chunks of BuildSizes.ChunkFiles files, each
// with its tasks and its cursor in one transaction; a run that crashed
// resumes from the last chunk committed. The last chunk ends the build:
// under the batch's exclusive lock it clears the cursor and makes sure a
// fan-in check runs, since tasks that ended while the generation was being
// written were not allowed to end the phase.
func (w *PhaseBuildWorker) Work(ctx context.Context, job *river.Job[PhaseBuildArgs]) (err error) {
	args := job.Args
	ctx, span := w.deps.Tracer.StartBatchStep(ctx, args.BatchID, "phase.build", tracing.PhaseKey.String(args.Phase))
	defer func() { tracing.End(span, err) }()
	q := db.New(w.deps.Pool)
	batch, err := w.deps.JobBatch(ctx, args.BatchID)
	if err != nil {
		return err
	}
	if batch.Status != args.Phase || batch.Generation != args.Generation || batch.BuildCursor == nil {
		return nil // built, reset or failed
	}
	from, ok := phases.Get(phases.Name(args.From))
	if !ok {
		return river.JobCancel(fmt.Errorf("unknown phase %q", args.From))
	}
	p, ok := phases.Get(phases.Name(args.Phase))
	if !ok {
		return river.JobCancel(fmt.Errorf("unknown phase %q", args.Phase))
	}
	b := &builder{deps: w.deps, hooks: w.hooks, args: args, p: p, cursor: *batch.BuildCursor, readTo: *batch.BuildCursor, started: time.Now()}
	written, err := q.FileCountByBatchGeneration(ctx, db.FileCountByBatchGenerationParams{BatchID: args.BatchID, Generation: args.Generation})
	if err != nil {
		return err
	}
	b.ordinal = int32(written)

	// The input generation and the finished phase's tasks no longer change,
	// so one long read can feed every chunk's transaction.
	err = pgx.BeginTxFunc(ctx, w.deps.Pool, pgx.TxOptions{AccessMode: pgx.ReadOnly}, func(rtx pgx.Tx) error {
		rd, err := readGeneration(ctx, rtx, w.deps.Executors.executor(from), from, args.BatchID, args.Generation-1, b.cursor, math.MaxInt32, hashJoin)
		if err != nil {
			return err
		}
		defer rd.rows.Close()
		for rd.Next() {
			b.files = append(b.files, rd.outs...)
			if rd.problem != nil {
				b.problems = append(b.problems, *rd.problem)
			}
			b.readTo = rd.ordinal
			if len(b.files) >= w.build.ChunkFiles {
				if err := b.write(ctx, false); err != nil {
					return err
				}
			}
		}
		if err := rd.Err(); err != nil {
			return fmt.Errorf("reading generation %d of batch %s: %w", args.Generation-1, args.BatchID, err)
		}
		return nil
	})
	if err == nil {
		err = b.write(ctx, true)
	}
	switch {
	case errors.Is(err, errBuildMoved):
		return nil
	case err != nil && job.Attempt >= job.MaxAttempts:
		return w.giveUp(ctx, job, err)
	}
	return err
}

// giveUp fails the batch of a build that failed its last attempt, and ends
// its open tasks: without its generation the phase can never end.
func (w *PhaseBuildWorker) giveUp(ctx context.Context, job *river.Job[PhaseBuildArgs], cause error) error {
	args := job.Args
	msg := fmt.Sprintf("Failed after %d attempts: writing generation %d of %s: %v", job.Attempt, args.Generation, args.Phase, cause)
	var (
		failed *db.Batch
		ended  int
	)
	err := pgx.BeginFunc(ctx, w.deps.Pool, func(tx pgx.Tx) error {
		if err := fanin.LockBatch(ctx, tx, args.BatchID); err != nil {
			return err
		}
		var err error
		failed, ended, err = FailBatch(ctx, Tx{Tx: tx, River: river.ClientFromContext[pgx.Tx](ctx)}, w.deps, args.BatchID, args.Phase, msg)
		return err
	})
	if err != nil {
		return err
	}
	w.deps.Metrics.TasksFinished(args.Phase, metrics.TaskCancelled, ended)
	w.deps.BatchFinished(failed)
	return river.JobCancel(cause)
}

// builder is one run of PhaseBuildWorker: the files read and not written
// yet, and where the writing got to.
type builder struct {
	deps     Deps
	hooks    *TestHooks
	args     PhaseBuildArgs
	p        phases.Phase
	files    []phases.File // outputs read, not written yet
	problems []transformProblem
	cursor   int32 // the build's cursor as committed
	readTo   int32 // ordinal of the last input file whose outputs are in files
	ordinal  int32 // ordinal of files[0] in the new generation
	tasks    int   // tasks written by this run
	chunks   int
	started  time.Time
}

// write commits the files read so far, their tasks and their problems,
// and moves the cursor on; the last write ends the build.
func (b *builder) write(ctx context.Context, last bool) error {
	args := b.args
	if err := b.hooks.beforeBuildWrite(ctx, args.BatchID, last); err != nil {
		return err
	}
	var finished bool
	err := pgx.BeginFunc(ctx, b.deps.Pool, func(tx pgx.Tx) error {
		q := db.New(tx)
		if last {
			// Exclusive, as the fan-in check takes it: a check either ran
			// before this (and saw the build going on) or runs after it
			// commits, when the ensured check below exists.
			if err := fanin.LockBatch(ctx, tx, args.BatchID); err != nil {
				return err
			}
		}
		batch, err := q.BatchGetByIDForUpdate(ctx, args.BatchID)
		if err != nil {
			return err
		}
		if batch.Status != args.Phase || batch.Generation != args.Generation || batch.BuildCursor == nil || *batch.BuildCursor != b.cursor {
			return errBuildMoved
		}
		stored, err := insertGeneration(ctx, tx, args.BatchID, args.Generation, phases.Name(args.From), b.ordinal, b.files)
		if err != nil {
			return err
		}
		ptx := Tx{Tx: tx, River: river.ClientFromContext[pgx.Tx](ctx)}
		at := PhaseAt{BatchID: args.BatchID, Phase: b.p, Generation: args.Generation}
		ext, ok := b.deps.Executors.executor(b.p).(Extender)
		if !ok {
			return fmt.Errorf("the executor of %s cannot take a generation part by part", args.Phase)
		}
		n, err := ext.Extend(ctx, ptx, at, stored)
		if err != nil {
			return err
		}
		b.tasks += n
		events := problemEvents(args.BatchID, args.From, b.problems)
		if !last {
			if len(events) > 0 {
				if _, err := q.BatchEventInsertMany(ctx, events); err != nil {
					return err
				}
			}
			return q.BatchBuildAdvance(ctx, db.BatchBuildAdvanceParams{ID: args.BatchID, Cursor: &b.readTo})
		}
		if err := q.BatchBuildAdvance(ctx, db.BatchBuildAdvanceParams{ID: args.BatchID}); err != nil {
			return err
		}
		filesIn, err := q.FileCountByBatchGeneration(ctx, db.FileCountByBatchGenerationParams{BatchID: args.BatchID, Generation: args.Generation - 1})
		if err != nil {
			return err
		}
		progress, err := b.deps.Executors.executor(b.p).Progress(ctx, q, []string{args.BatchID})
		if err != nil {
			return err
		}
		var phaseTasks int64
		for _, pp := range progress[args.BatchID] {
			if pp.Phase == args.Phase {
				phaseTasks = pp.TasksTotal
			}
		}
		events = append(events, NewEvent(args.BatchID, db.EventGenerationBuilt, args.Phase, "", map[string]any{
			"from": args.From, "generation": args.Generation, "files_in": filesIn,
			"files_out": int(b.ordinal) + len(b.files), "tasks": phaseTasks,
		}))
		if _, err := q.BatchEventInsertMany(ctx, events); err != nil {
			return err
		}
		finished = true
		return fanin.EnsurePhaseCheck(ctx, tx, ptx.River, at.Ref())
	})
	if err != nil {
		return err
	}
	b.chunks++
	b.ordinal += int32(len(b.files))
	b.cursor = b.readTo
	b.files, b.problems = b.files[:0], nil
	if finished {
		b.deps.Logger.Info("generation built", "batch_id", args.BatchID, "phase", args.Phase, "from", args.From,
			"generation", args.Generation, "files", b.ordinal, "chunks", b.chunks, "tasks_written", b.tasks,
			"duration_ms", time.Since(b.started).Milliseconds())
	}
	return nil
}
