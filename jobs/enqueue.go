package jobs

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river"
)

// unfinishedStates is the SQL list of River job states in which a job has
// not finished: the states uniqueUnfinished names.
const unfinishedStates = `('available', 'pending', 'retryable', 'running', 'scheduled')`

// phaseCheckPendingSQL asks whether an unfinished phase_check exists for a
// (batch, phase). It reads River's table directly because the answer must
// come without taking any lock (see EnqueuePhaseCheck).
const phaseCheckPendingSQL = `SELECT EXISTS (
	SELECT 1 FROM river_job
	WHERE kind = 'phase_check' AND args @> $1::jsonb
	  AND state IN ` + unfinishedStates + `)`

// PendingPhaseChecksSQL is phaseCheckPendingSQL for the phases of a group of
// tasks: for the tasks whose ids are $1 (text[]), it returns each distinct
// (batch_id, phase, pending), pending telling whether an unfinished
// phase_check exists for it. The callback path sends it in one round trip
// with its other reads. It carries the same condition as EnqueuePhaseCheck:
// it must run in a statement of its own AFTER the statement that took the
// batches' shared locks, so that its snapshot is taken under them.
//
// It looks once per (batch, phase), not once per task, and by state first:
// finished checks (River keeps them for a day) pile up by the thousand
// during a large phase, while unfinished ones are a handful.
const PendingPhaseChecksSQL = `SELECT p.batch_id, p.phase, EXISTS (
	SELECT 1 FROM river_job j
	WHERE j.state IN ` + unfinishedStates + `
	  AND j.kind = 'phase_check' AND j.args @> jsonb_build_object('batch_id', p.batch_id, 'phase', p.phase))
FROM (SELECT DISTINCT batch_id, phase FROM tasks WHERE id = ANY($1::text[])) p`

// EnqueuePhaseCheck makes sure a phase_check will run for the phase after
// the caller's transaction commits. The caller must hold the batch's SHARED
// lock (BatchLockShared). Under it, any unfinished check has not yet made
// the count it can finish on: a check finishes only by completing itself in
// a transaction that holds the EXCLUSIVE lock and counted there (a check
// that waits out an open phase counts without the lock, but then snoozes,
// unfinished). So an unfinished check will see the caller's change, and
// inserting another is only needed when there is none.
//
// Skipping the insert matters: River's unique insert updates (and so
// row-locks) the existing job's row until commit, which made every callback
// of a batch queue on that one row.
func EnqueuePhaseCheck(ctx context.Context, tx pgx.Tx, client *river.Client[pgx.Tx], batchID, phase string) error {
	key, err := json.Marshal(PhaseCheckArgs{BatchID: batchID, Phase: phase})
	if err != nil {
		return err
	}
	var pending bool
	if err := tx.QueryRow(ctx, phaseCheckPendingSQL, key).Scan(&pending); err != nil {
		return fmt.Errorf("looking for a pending phase_check: %w", err)
	}
	if pending {
		return nil
	}
	return InsertPhaseCheck(ctx, tx, client, batchID, phase)
}

// InsertPhaseCheck enqueues a phase_check for the phase in the caller's
// transaction. Callers that hold the batch's shared lock and have found no
// unfinished check (PendingPhaseChecksSQL) use it; others use
// EnqueuePhaseCheck.
func InsertPhaseCheck(ctx context.Context, tx pgx.Tx, client *river.Client[pgx.Tx], batchID, phase string) error {
	if _, err := client.InsertTx(ctx, tx, PhaseCheckArgs{BatchID: batchID, Phase: phase}, nil); err != nil {
		return fmt.Errorf("enqueueing phase_check: %w", err)
	}
	return nil
}
