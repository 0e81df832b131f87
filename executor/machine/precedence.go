package machine

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/arke-institute/orchestrator/db"
	"github.com/arke-institute/orchestrator/ratelimit"
)

// Precedence between batches' launches: the machines of one app come out
// of one launch bucket (and the fleet's bounds), so a launcher of a batch
// asks, before each chunk of launches, whether a batch of higher priority
// waits for machines of the same app. If one does, it gives way: it
// launches at most one machine, its minimum share, and comes back after
// YieldWait, leaving the tokens and the headroom to the higher batch.
// Batches of equal priority take tokens as they come, in turn.

// AppPhases are the machine phases whose machines are of app, sorted:
// their launches take from one bucket.
func (c Config) AppPhases(app string) []string {
	var out []string
	for name, p := range c.Phases {
		if p.App == app {
			out = append(out, string(name))
		}
	}
	slices.Sort(out)
	return out
}

// Outranked tells whether a batch of higher priority than the batch's
// waits for machines of app (see db.BatchOutranked).
func (c Config) Outranked(ctx context.Context, q *db.Queries, batchID string, priority int16, app string) (bool, error) {
	out, err := q.BatchOutranked(ctx, db.BatchOutrankedParams{Phases: c.AppPhases(app), Priority: priority, BatchID: batchID})
	if err != nil {
		return false, fmt.Errorf("looking for batches of higher priority than %s: %w", batchID, err)
	}
	return out, nil
}

// YieldWait is how long a launcher that gave way waits before its next
// launch: long enough that its one launch is about share percent of what
// the launch rate allows meanwhile, between 1 and 30 seconds (with Fly's
// one launch a second and the default 10%, 9 s).
func YieldWait(limit ratelimit.Limit, share int) time.Duration {
	share = min(max(share, 1), 100)
	wait := time.Duration(float64(100-share) / float64(share) / limit.Rate * float64(time.Second))
	return min(max(wait, time.Second), 30*time.Second)
}
