package batches

import (
	"context"
	"fmt"
	"time"

	"github.com/arke-institute/orchestrator/db"
)

// RecordIntakeSignature records the signature of an intake request, made
// at signed, and tells whether it is fresh: false means it was recorded
// before, so the request is a replay. Signatures made more than twice the
// window ago (by the database's clock) are forgotten on the way: their
// timestamps are refused before they get here, by any replica whose clock
// is within a window of the database's.
func (c *Commands) RecordIntakeSignature(ctx context.Context, sig []byte, signed time.Time, window time.Duration) (bool, error) {
	q := db.New(c.pool)
	if err := q.IntakeSignaturePrune(ctx, (2 * window).Seconds()); err != nil {
		return false, fmt.Errorf("pruning intake signatures: %w", err)
	}
	n, err := q.IntakeSignatureRecord(ctx, db.IntakeSignatureRecordParams{Signature: sig, SignedAt: signed})
	if err != nil {
		return false, fmt.Errorf("recording an intake signature: %w", err)
	}
	return n == 1, nil
}
