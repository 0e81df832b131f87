package jobs

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river"
)

// phaseCheckPendingSQL asks whether an unfinished phase_check exists for a
// (batch, phase). It reads River's table directly because the answer must
// come without taking any lock (see EnqueuePhaseCheck).
const phaseCheckPendingSQL = `SELECT EXISTS (
	SELECT 1 FROM river_job
	WHERE kind = 'phase_check' AND args @> $1::jsonb
	  AND state IN ('available', 'pending', 'retryable', 'running', 'scheduled'))`

// EnqueuePhaseCheck makes sure a phase_check will run for the phase after
// the caller's transaction commits. The caller must hold the batch's SHARED
// lock (BatchLockShared). Under it, any unfinished check has not counted yet:
// counting needs the EXCLUSIVE lock, and a check completes itself in the
// transaction that holds it. So an unfinished check will see the caller's
// change, and inserting another is only needed when there is none.
//
// Skipping the insert matters: River's unique insert updates (and so
// row-locks) the existing job's row until commit, which made every callback
// of a batch queue on that one row.
func EnqueuePhaseCheck(ctx context.Context, tx pgx.Tx, client *river.Client[pgx.Tx], batchID, phase string) error {
	args := PhaseCheckArgs{BatchID: batchID, Phase: phase}
	key, err := json.Marshal(args)
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
	if _, err := client.InsertTx(ctx, tx, args, nil); err != nil {
		return fmt.Errorf("enqueueing phase_check: %w", err)
	}
	return nil
}
