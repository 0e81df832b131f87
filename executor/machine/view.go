package machine

import (
	"context"

	"github.com/arke-institute/orchestrator/jobs"
)

// Views is the batch's failed tasks of the machine phases.
func (e *Executor) Views(ctx context.Context, batchID string) ([]jobs.View, error) {
	return e.FailedView(ctx, batchID)
}
