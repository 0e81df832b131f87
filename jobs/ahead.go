package jobs

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/arke-institute/orchestrator/db"
	"github.com/arke-institute/orchestrator/fanin"
	"github.com/arke-institute/orchestrator/phases"
)

// Writing the next generation ahead.
//
// A transition that cannot hand its next generation to phase_build (the
// phase after it in the pipeline cannot take one part by part, or there is
// none) reads, transforms and writes the whole generation in its transaction:
// seconds at 100,000 files, while the batch waits and the orchestrator
// holds the generation in memory. So while the phase's tasks end, the
// check that waits the phase out (waitOut) writes ahead: it transforms the
// files at the head of the generation whose outcomes can no longer change
// (Outcomes.Final: no work, or work completed) and writes their outputs as
// the next generation, a stretch of at most BuildSizes.ChunkFiles input
// files a transaction, and records how far it got (generation_ahead). The
// transition then reads and writes only the files after that.
//
// A stretch ends before the first file whose work is still open or has
// failed (a failed task may yet complete: a late success), so what is
// written ahead is what the transition would write. A reset and a retry
// leave it: they change no completed work and the batch comes back to the
// same phase and generation. The batch's row lock orders each stretch
// with the transition (which takes it first), so that a stretch written
// after the transition began finds the batch moved on and writes nothing.
//
// An older release's transition would write the whole next generation and
// fail on the rows written ahead (a unique ordinal), until retried on a
// newer process. So nothing is written ahead while a process that does not
// know migration writeAheadSchema is heard (listeners.schema_version). See
// docs/operations.md, Upgrades.

// writeAheadSchema is the migration that brought generation_ahead.
const writeAheadSchema = 41

// aheadHeardWithin is how recently a process must have been heard for its
// release to count.
const aheadHeardWithin = 30 * time.Second

// aheadBudget bounds the time one check spends writing ahead before it
// snoozes: stretches are written while there is time and more to write.
const aheadBudget = time.Second

// chunkTarget is the phase after p if the transition out of p may write
// the next generation in parts for it (its executor is an Extender), else
// nil: the generation is then written whole, by the transition or ahead
// of it.
func (w *PhaseCheckWorker) chunkTarget(p phases.Phase) phases.Phase {
	next, _ := phases.Get(phases.Next(p.Spec().Name))
	if next == nil {
		return nil
	}
	if _, ok := w.deps.Executors.executor(next).(Extender); !ok {
		return nil // e.g. chunks group the whole generation: it is read first
	}
	return next
}

// writeAhead writes stretches of the batch's next generation ahead, as
// far as outcomes are final, within aheadBudget: where the phase's
// executor can tell final outcomes and look them up (Outcomes.Final and
// Lookup: the machine and pool executors' tasks) and the phase after it
// cannot take a generation in parts (chunkTarget).
func (w *PhaseCheckWorker) writeAhead(ctx context.Context, args fanin.PhaseCheckArgs) error {
	ex, p, ok := w.deps.Executors.Of(args.Phase)
	if !ok {
		return nil
	}
	if o := ex.Outcomes(); o.Final == "" || o.Lookup == "" || w.chunkTarget(p) != nil {
		return nil
	}
	all, err := db.New(w.deps.Pool).ListenerAllKnow(ctx, db.ListenerAllKnowParams{
		WithinSeconds: aheadHeardWithin.Seconds(), Version: writeAheadSchema})
	if err != nil || !all {
		return err
	}
	for start := time.Now(); time.Since(start) < aheadBudget; {
		if more, err := w.aheadStretch(ctx, args, ex, p); err != nil || !more {
			return err
		}
	}
	return nil
}

// aheadStretch writes the next stretch ahead in one transaction. more is
// false when it found an open file, the generation's end, or the batch
// moved on.
func (w *PhaseCheckWorker) aheadStretch(ctx context.Context, args fanin.PhaseCheckArgs, ex Executor, p phases.Phase) (more bool, err error) {
	err = pgx.BeginFunc(ctx, w.deps.Pool, func(tx pgx.Tx) error {
		q := db.New(tx)
		batch, err := q.BatchGetByID(ctx, args.BatchID)
		if errors.Is(err, pgx.ErrNoRows) {
			return nil
		}
		if err != nil {
			return err
		}
		if batch.Status != args.Phase || batch.BuildFrom != nil {
			return nil
		}
		prev, err := aheadOf(ctx, q, batch)
		if err != nil {
			return err
		}
		from := prev
		if from == nil {
			from = &db.GenerationAhead{BatchID: batch.ID, Phase: batch.Status, Generation: batch.Generation + 1, LastInput: -1}
		}
		// Outcomes that are final do not change: they can be read before
		// the lock is taken, which then holds only for the writing. The
		// first file is looked at alone first: while it is open, as it
		// mostly is between two stretches, that is all a look costs.
		if head, err := readFinal(ctx, tx, ex, p, batch, from.LastInput, from.LastInput+1); head.open || err != nil {
			return err
		}
		size := int32(w.build.ChunkFiles)
		s, err := readFinal(ctx, tx, ex, p, batch, from.LastInput, from.LastInput+size)
		if err != nil || s.inputs == 0 {
			return err
		}
		locked, err := q.BatchGetByIDForUpdate(ctx, batch.ID)
		if err != nil {
			return err
		}
		now, err := aheadOf(ctx, q, locked)
		if err != nil {
			return err
		}
		if locked.Status != batch.Status || locked.Generation != batch.Generation || locked.BuildFrom != nil ||
			(now == nil) != (prev == nil) || (now != nil && now.LastInput != prev.LastInput) {
			return nil // moved on, or written by another check meanwhile
		}
		if err := copyGeneration(ctx, tx, batch.ID, from.Generation, p.Spec().Name, from.Files, s.files); err != nil {
			return err
		}
		wants := append([]string{}, from.Wants...) // never NULL
		for _, n := range phases.MayHaveWork(phases.Next(p.Spec().Name), s.files) {
			if !slices.Contains(wants, string(n)) {
				wants = append(wants, string(n))
			}
		}
		if err := q.GenerationAheadSave(ctx, db.GenerationAheadSaveParams{BatchID: batch.ID, Phase: batch.Status,
			Generation: from.Generation, Files: from.Files + int32(len(s.files)), LastInput: s.last, Wants: wants}); err != nil {
			return err
		}
		if len(s.problems) > 0 {
			if _, err := q.BatchEventInsertMany(ctx, problemEvents(batch.ID, batch.Status, s.problems)); err != nil {
				return err
			}
		}
		more = !s.open && s.inputs == size
		return nil
	})
	if err != nil {
		return false, fmt.Errorf("writing the next generation of batch %s ahead: %w", args.BatchID, err)
	}
	return more, nil
}

// finalStretch is what readFinal read: the outputs of the input files up
// to the last one read, and their problems.
type finalStretch struct {
	files    []phases.File
	problems []transformProblem
	last     int32 // the ordinal of the last input file read
	inputs   int32 // input files read
	open     bool  // the read stopped at a file whose outcome may change
}

// readFinal transforms the input files of the batch's generation after
// ordinal after, up to ordinal upTo, as far as their outcomes are final.
func readFinal(ctx context.Context, tx pgx.Tx, ex Executor, p phases.Phase, batch db.Batch, after, upTo int32) (finalStretch, error) {
	s := finalStretch{last: after}
	rd, err := readGeneration(ctx, tx, ex, p, batch.ID, batch.Generation, after, upTo, lookupJoin)
	if err != nil {
		return s, err
	}
	rd.finalOnly = true
	for rd.Next() {
		s.files = append(s.files, rd.outs...)
		if rd.problem != nil {
			s.problems = append(s.problems, *rd.problem)
		}
		s.last, s.inputs = rd.ordinal, s.inputs+1
	}
	if err := rd.Err(); err != nil {
		rd.Close(ctx) // the read's error is the one to report
		return s, fmt.Errorf("reading generation %d of batch %s: %w", batch.Generation, batch.ID, err)
	}
	s.open = rd.open
	return s, rd.Close(ctx)
}

// aheadOf is the batch's next generation as written ahead, or nil if none
// was written for the batch's phase and generation.
func aheadOf(ctx context.Context, q *db.Queries, batch db.Batch) (*db.GenerationAhead, error) {
	a, err := q.GenerationAheadGet(ctx, batch.ID)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("reading the generation written ahead for batch %s: %w", batch.ID, err)
	}
	if a.Phase != batch.Status || a.Generation != batch.Generation+1 {
		return nil, nil
	}
	return &a, nil
}

// enterAfterAhead ends a transition whose next generation was written
// ahead, once the rest of it (tail) is written: the record of it goes, and
// the batch moves on. When no file written may be a later phase's work
// (phases.MayHaveWork), the batch is done without the generation being
// read back; otherwise it is read back whole for the next phase to be
// found and entered.
func (w *PhaseCheckWorker) enterAfterAhead(ctx context.Context, tx Tx, p phases.Phase, ahead *db.GenerationAhead, gen int32, tail []phases.File) (*db.Batch, error) {
	if err := tx.Queries().GenerationAheadDelete(ctx, ahead.BatchID); err != nil {
		return nil, err
	}
	from := phases.Next(p.Spec().Name)
	if len(ahead.Wants) == 0 && len(phases.MayHaveWork(from, tail)) == 0 {
		return enterPhase(ctx, tx, w.deps, ahead.BatchID, nil, gen, nil, int(ahead.Files)+len(tail))
	}
	files, err := storedGeneration(ctx, tx.Tx, ahead.BatchID, gen, ahead.Files, int(ahead.Files)+len(tail))
	if err != nil {
		return nil, err
	}
	return enterNextPhase(ctx, tx, w.deps, ahead.BatchID, from, gen, append(files, tail...))
}
