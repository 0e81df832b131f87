// Package fanin owns the fan-in protocol: the last piece of a phase's work
// to end must lead to the phase's transition, however many end at once,
// and no wake-up may be lost. No other code takes the batch locks or
// enqueues phase_check by hand.
//
//   - A transaction that ends work of a batch (a callback group, the sweep,
//     a chunk, a document) holds the batch's SHARED advisory lock from
//     before it updates the work until it commits, and makes sure a
//     phase_check of its phase is pending (EndTasks; the group committer
//     sends the same statements, pipelined, for its many batches).
//   - phase_check counts the phase's open work, transitions and completes
//     itself in one transaction that holds the EXCLUSIVE lock (LockBatch).
//     So does any transaction that changes what the check reads: a reset, a
//     retry, the end of a chunked build.
//
// Why no wake-up is lost: each end either committed before the check's
// exclusive lock was granted, and the check counts it, or it waits for the
// check's transaction, which completes the check, and then finds no
// unfinished check and enqueues one. Without the lock, a check running
// concurrently with the last end could count that work as open while the
// end's enqueue is swallowed by the running check's unique slot, and the
// phase would hang (TestLastCallbackDuringCheck shows it).
//
// The key of the lock is batch_lock_key (migration 00007), used by every
// BatchLock* query.
package fanin

import (
	"context"
	"fmt"
	"slices"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/rivertype"

	"github.com/arke-institute/orchestrator/db"
)

// PhaseRef names a phase of a batch: what a phase_check is unique by.
type PhaseRef struct {
	BatchID string
	Phase   string
}

// PhaseCheckArgs is the fan-in of a phase: every end of its work makes sure
// one is unfinished (it is unique per batch and phase while unfinished),
// and the one that finds no open work left moves the batch on (package
// jobs works it).
type PhaseCheckArgs struct {
	BatchID string `json:"batch_id"`
	Phase   string `json:"phase"`
}

// Kind is the River job kind.
func (PhaseCheckArgs) Kind() string { return "phase_check" }

// InsertOpts makes the check unique while unfinished.
func (PhaseCheckArgs) InsertOpts() river.InsertOpts {
	return river.InsertOpts{UniqueOpts: river.UniqueOpts{ByArgs: true, ByState: UniqueUnfinished}}
}

// UniqueUnfinished is the ByState of our unique jobs: every state in which
// the job has yet to finish. completed is left out on purpose: a unique job
// that has finished must not block a new one, or the end that wants a new
// check would be swallowed (design.md, fan-in). PhaseCheckPendingMany
// looks for these states.
var UniqueUnfinished = []rivertype.JobState{
	rivertype.JobStateAvailable,
	rivertype.JobStatePending,
	rivertype.JobStateRetryable,
	rivertype.JobStateRunning,
	rivertype.JobStateScheduled,
}

// EndTasks runs end in a new transaction that holds the batch's SHARED
// fan-in lock; when end reports that it ended work of ref's phase,
// EndTasks makes sure a phase_check of it is pending before committing.
// end may do anything else the ends need (events, follow-up jobs) in the
// transaction.
func EndTasks(ctx context.Context, pool *pgxpool.Pool, client *river.Client[pgx.Tx], ref PhaseRef, end func(tx pgx.Tx) (ended bool, err error)) error {
	return pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		if err := LockShared(ctx, tx, ref.BatchID); err != nil {
			return err
		}
		ended, err := end(tx)
		if err != nil || !ended {
			return err
		}
		return EnsurePhaseCheck(ctx, tx, client, ref)
	})
}

// LockShared takes the SHARED fan-in lock of each batch in tx, until tx
// ends, in id order (duplicates allowed). A transaction that ends work
// takes it before it changes the work (EndTasks does).
func LockShared(ctx context.Context, tx pgx.Tx, batchIDs ...string) error {
	if err := db.New(tx).BatchLockSharedMany(ctx, batchIDs); err != nil {
		return fmt.Errorf("locking batches %v (shared): %w", batchIDs, err)
	}
	return nil
}

// LockBatch takes the batch's EXCLUSIVE fan-in lock in tx, until tx ends:
// every transaction that was ending work of the batch has finished, and
// none starts until then. Transactions that change what a phase_check
// reads, or that must not run while work ends, take it.
func LockBatch(ctx context.Context, tx pgx.Tx, batchID string) error {
	if err := db.New(tx).BatchLockExclusive(ctx, batchID); err != nil {
		return fmt.Errorf("locking batch %s: %w", batchID, err)
	}
	return nil
}

// EnsurePhaseCheck makes sure a phase_check of ref will run after the
// caller's transaction commits (EnsurePhaseChecks).
func EnsurePhaseCheck(ctx context.Context, tx pgx.Tx, client *river.Client[pgx.Tx], ref PhaseRef) error {
	return EnsurePhaseChecks(ctx, tx, client, []PhaseRef{ref})
}

// EnsurePhaseChecks makes sure a phase_check of each phase in refs will run
// after the caller's transaction commits. The caller must hold the
// batches' fan-in locks, shared (LockShared) or exclusive (LockBatch).
// Under them, any unfinished check has not yet made the count it can
// finish on: a check finishes only by completing itself in a transaction
// that holds the exclusive lock and counted there (a check that waits out
// an open phase counts without the lock, but then snoozes, unfinished). So
// an unfinished check will see the caller's change, and another is needed
// only when there is none.
//
// Skipping the insert matters: River's unique insert updates (and so
// row-locks) the existing job's row until commit, which made every end of
// a batch's work queue on that one row.
func EnsurePhaseChecks(ctx context.Context, tx pgx.Tx, client *river.Client[pgx.Tx], refs []PhaseRef) error {
	pending, err := pendingChecks(ctx, db.New(tx), refs)
	if err != nil {
		return err
	}
	return insertMissing(ctx, tx, client, refs, pending)
}

// pendingChecks tells, for each phase in refs, whether an unfinished
// phase_check of it exists (PhaseCheckPendingMany, which the group
// committer sends in its pipeline too).
func pendingChecks(ctx context.Context, q *db.Queries, refs []PhaseRef) (map[PhaseRef]bool, error) {
	batches, phaseNames := make([]string, len(refs)), make([]string, len(refs))
	for i, r := range refs {
		batches[i], phaseNames[i] = r.BatchID, r.Phase
	}
	rows, err := q.PhaseCheckPendingMany(ctx, db.PhaseCheckPendingManyParams{BatchIDs: batches, Phases: phaseNames})
	if err != nil {
		return nil, fmt.Errorf("looking for pending phase_checks: %w", err)
	}
	out := make(map[PhaseRef]bool, len(rows))
	for _, r := range rows {
		out[PhaseRef{BatchID: r.BatchID, Phase: r.Phase}] = r.Pending
	}
	return out, nil
}

// insertMissing enqueues, in the caller's transaction, a phase_check of
// each phase of ended (each once) that pending says has none.
func insertMissing(ctx context.Context, tx pgx.Tx, client *river.Client[pgx.Tx], ended []PhaseRef, pending map[PhaseRef]bool) error {
	params := make([]river.InsertManyParams, 0, len(ended))
	for i, r := range ended {
		if pending[r] || slices.Contains(ended[:i], r) {
			continue // one insert may not touch a unique job twice
		}
		params = append(params, river.InsertManyParams{Args: PhaseCheckArgs(r)})
	}
	if len(params) == 0 {
		return nil
	}
	if _, err := client.InsertManyTx(ctx, tx, params); err != nil {
		return fmt.Errorf("enqueueing phase_check: %w", err)
	}
	return nil
}

// RequestChecks enqueues a phase_check of each phase in refs, without a
// transaction or a lock: the sweep's backstop, for phases it found with no
// open work. A check is correct whenever it runs (it counts under the
// exclusive lock); only a missing one could hang a phase, and the unique
// insert keeps one that exists. It returns the checks it enqueued.
func RequestChecks(ctx context.Context, client *river.Client[pgx.Tx], refs []PhaseRef) ([]*rivertype.JobRow, error) {
	if len(refs) == 0 {
		return nil, nil
	}
	params := make([]river.InsertManyParams, len(refs))
	for i, r := range refs {
		params[i] = river.InsertManyParams{Args: PhaseCheckArgs(r)}
	}
	res, err := client.InsertMany(ctx, params)
	if err != nil {
		return nil, fmt.Errorf("enqueueing phase_check: %w", err)
	}
	var out []*rivertype.JobRow
	for _, r := range res {
		if !r.UniqueSkippedAsDuplicate {
			out = append(out, r.Job)
		}
	}
	return out, nil
}
