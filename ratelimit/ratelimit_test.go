package ratelimit_test

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/arke-institute/orchestrator/internal/harness/dbtest"
	"github.com/arke-institute/orchestrator/ratelimit"
)

func TestBurstThenWait(t *testing.T) {
	t.Parallel()
	l := ratelimit.New(dbtest.New(t))
	ctx := context.Background()
	limit := ratelimit.Limit{Rate: 1, Burst: 3}

	got, wait, err := l.Take(ctx, "fly:app", limit, 10)
	require.NoError(t, err)
	require.Equal(t, 3, got, "a fresh bucket holds a full burst")
	require.Greater(t, wait, 500*time.Millisecond)
	require.LessOrEqual(t, wait, time.Second)

	got, _, err = l.Take(ctx, "fly:app", limit, 1)
	require.NoError(t, err)
	require.Zero(t, got, "the burst is spent")

	got, _, err = l.Take(ctx, "fly:other-app", limit, 2)
	require.NoError(t, err)
	require.Equal(t, 2, got, "buckets are per key")
}

func TestRejectsUselessLimits(t *testing.T) {
	t.Parallel()
	l := ratelimit.New(dbtest.New(t))
	_, _, err := l.Take(context.Background(), "k", ratelimit.Limit{Rate: 0, Burst: 3}, 1)
	require.ErrorContains(t, err, "rate must be a positive number")
	_, _, err = l.Take(context.Background(), "k", ratelimit.Limit{Rate: 1, Burst: 0}, 1)
	require.ErrorContains(t, err, "burst must be at least 1")
}

// TestConcurrentTakersShareOneLimit has many takers (as many orchestrator
// processes would) hammer one bucket; together they never get more than the
// burst plus what the rate refilled in the time they ran.
func TestConcurrentTakersShareOneLimit(t *testing.T) {
	t.Parallel()
	pool := dbtest.New(t)
	ctx := context.Background()
	limit := ratelimit.Limit{Rate: 40, Burst: 5}
	// Separate Limiters, as separate processes would have.
	limiters := []*ratelimit.Limiter{ratelimit.New(pool), ratelimit.New(pool), ratelimit.New(pool)}

	var granted atomic.Int64
	start := time.Now()
	stop := start.Add(600 * time.Millisecond)
	var wg sync.WaitGroup
	for i := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			l := limiters[i%len(limiters)]
			for time.Now().Before(stop) {
				got, _, err := l.Take(ctx, "shared", limit, 2)
				if err != nil {
					t.Error(err)
					return
				}
				granted.Add(int64(got))
			}
		}()
	}
	wg.Wait()
	elapsed := time.Since(start).Seconds()
	ceiling := float64(limit.Burst) + limit.Rate*elapsed
	require.LessOrEqual(t, float64(granted.Load()), ceiling, "granted %d in %.2fs", granted.Load(), elapsed)
	// And the limit is not starved either: most of the refill was handed out.
	require.GreaterOrEqual(t, float64(granted.Load()), 0.5*limit.Rate*0.6, "granted %d in %.2fs", granted.Load(), elapsed)
}
