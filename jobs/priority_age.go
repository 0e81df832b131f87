package jobs

import (
	"context"
	"fmt"
	"time"

	"github.com/riverqueue/river"

	"github.com/arke-institute/orchestrator/db"
	"github.com/arke-institute/orchestrator/fanin"
)

// Priorities are the settings of batch priorities (see
// docs/architecture.md, Priorities).
type Priorities struct {
	// Aging is the aging rule of River jobs (PRIORITY_AGING): a job due
	// for longer than this without being worked climbs one level of
	// River's priority, and one more for every further period it waits,
	// so that jobs of low-priority batches never wait for ever behind
	// higher ones. 0: no aging.
	Aging time.Duration
	// Share is the minimum share, in percent, of launches and pool
	// leases that the work of a batch keeps while batches of higher
	// priority wait for theirs (PRIORITY_SHARE).
	Share int
}

// PriorityAgeArgs is the periodic aging of waiting jobs (every
// PRIORITY_AGING): db.RiverJobAge.
type PriorityAgeArgs struct{}

// Kind is the River job kind.
func (PriorityAgeArgs) Kind() string { return "priority_age" }

// InsertOpts keeps one run at a time.
func (PriorityAgeArgs) InsertOpts() river.InsertOpts {
	return river.InsertOpts{UniqueOpts: river.UniqueOpts{ByState: fanin.UniqueUnfinished}}
}

// PriorityAgeWorker works PriorityAgeArgs.
type PriorityAgeWorker struct {
	Defaults[PriorityAgeArgs]
	deps Deps
}

// Work raises the jobs that have waited a period by one level.
func (w *PriorityAgeWorker) Work(ctx context.Context, _ *river.Job[PriorityAgeArgs]) error {
	n, err := db.New(w.deps.Pool).RiverJobAge(ctx, w.deps.Settings.Priorities.Aging.Seconds())
	if err != nil {
		return fmt.Errorf("aging waiting jobs: %w", err)
	}
	if n > 0 {
		w.deps.Logger.Debug("waiting jobs aged", "count", n)
	}
	return nil
}
