package jobs

import (
	"context"
	"fmt"
	"slices"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"

	"github.com/arke-institute/orchestrator/db"
)

// The fan-in protocol: the last task of a phase to end must lead to the
// phase's transition, however many end at once, and no wake-up may be lost.
// This file owns it; no other code takes the batch locks or enqueues
// phase_check by hand, but for the sweep's backstop, which enqueues a
// check for a phase that has no open task left (a check is correct
// whenever it runs; only a missing one could hang a phase).
//
//   - A transaction that ends tasks of a batch (a callback group, the
//     sweep) holds the batch's SHARED advisory lock from before it updates
//     them until it commits, and makes sure a phase_check of their phase is
//     pending (EndTasks; the callback path takes the same steps in its
//     pipeline, with BatchLockSharedMany and InsertPhaseChecks).
//   - phase_check counts the phase's open tasks, transitions and completes
//     itself in one transaction that holds the EXCLUSIVE lock (LockBatch).
//     So does any transaction that changes what the check reads: a reset, a
//     retry, the end of a chunked build.
//
// Why no wake-up is lost: each task end either committed before the check's
// exclusive lock was granted, and the check counts it, or it waits for the
// check's transaction, which completes the check, and then finds no
// unfinished check and enqueues one. Without the lock, a check running
// concurrently with the last task end could count that task as open while
// the end's enqueue is swallowed by the running check's unique slot, and the
// phase would hang (TestLastCallbackDuringCheck shows it).
//
// The key of the lock is batch_lock_key (migration 00007), used by every
// BatchLock* query.

// PhaseRef names a phase of a batch: what a phase_check is unique by.
type PhaseRef struct {
	BatchID string
	Phase   string
}

// EndTasks runs end in a new transaction that holds the batch's SHARED
// fan-in lock; when end reports that it ended tasks of ref's phase,
// EndTasks makes sure a phase_check of it is pending before committing.
// end may do anything else the task ends need (events, follow-up jobs) in
// the transaction.
func EndTasks(ctx context.Context, pool *pgxpool.Pool, client *river.Client[pgx.Tx], ref PhaseRef, end func(tx pgx.Tx) (ended bool, err error)) error {
	return pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		if err := db.New(tx).BatchLockShared(ctx, ref.BatchID); err != nil {
			return fmt.Errorf("locking batch %s (shared): %w", ref.BatchID, err)
		}
		ended, err := end(tx)
		if err != nil || !ended {
			return err
		}
		return EnsurePhaseCheck(ctx, tx, client, ref)
	})
}

// LockBatch takes the batch's EXCLUSIVE fan-in lock in tx, until tx ends:
// every transaction that was ending tasks of the batch has finished, and
// none starts until then. Transactions that change what a phase_check
// reads, or that must not run while tasks end, take it.
func LockBatch(ctx context.Context, tx pgx.Tx, batchID string) error {
	if err := db.New(tx).BatchLockExclusive(ctx, batchID); err != nil {
		return fmt.Errorf("locking batch %s: %w", batchID, err)
	}
	return nil
}

// EnsurePhaseCheck makes sure a phase_check of ref will run after the
// caller's transaction commits. The caller must hold the batch's fan-in
// lock, shared (EndTasks) or exclusive (LockBatch). Under it, any
// unfinished check has not yet made the count it can finish on: a check
// finishes only by completing itself in a transaction that holds the
// exclusive lock and counted there (a check that waits out an open phase
// counts without the lock, but then snoozes, unfinished). So an unfinished
// check will see the caller's change, and another is needed only when
// there is none.
//
// Skipping the insert matters: River's unique insert updates (and so
// row-locks) the existing job's row until commit, which made every callback
// of a batch queue on that one row.
func EnsurePhaseCheck(ctx context.Context, tx pgx.Tx, client *river.Client[pgx.Tx], ref PhaseRef) error {
	pending, err := db.New(tx).PhaseCheckPending(ctx, db.PhaseCheckPendingParams{BatchID: ref.BatchID, Phase: ref.Phase})
	if err != nil {
		return fmt.Errorf("looking for a pending phase_check: %w", err)
	}
	if pending {
		return nil
	}
	return InsertPhaseChecks(ctx, tx, client, []PhaseRef{ref})
}

// InsertPhaseChecks enqueues a phase_check of each phase in refs in the
// caller's transaction (each once). It is EnsurePhaseCheck for a caller
// that has already looked, under the lock, for the pending checks
// (PhaseCheckPendingByTasks) and found none for these phases.
func InsertPhaseChecks(ctx context.Context, tx pgx.Tx, client *river.Client[pgx.Tx], refs []PhaseRef) error {
	params := make([]river.InsertManyParams, 0, len(refs))
	for i, r := range refs {
		if slices.Contains(refs[:i], r) {
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
