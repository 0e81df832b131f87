package ratelimit_test

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/arke-institute/orchestrator/internal/harness/dbtest"
	"github.com/arke-institute/orchestrator/ratelimit"
)

// twoProcesses returns Limiters on two pools of one database, as two
// orchestrator processes would have.
func twoProcesses(t *testing.T) []*ratelimit.Limiter {
	t.Helper()
	pool, url := dbtest.NewWithURL(t)
	other, err := pgxpool.New(context.Background(), url)
	require.NoError(t, err)
	t.Cleanup(other.Close)
	return []*ratelimit.Limiter{ratelimit.New(pool), ratelimit.New(other)}
}

func TestAdaptiveTakeN(t *testing.T) {
	t.Parallel()
	l := ratelimit.New(dbtest.New(t))
	ctx := context.Background()
	p := ratelimit.DefaultAdaptive()

	n, g, err := l.TakeAdaptiveN(ctx, "ocr", p, 3)
	require.NoError(t, err)
	require.Equal(t, 3, n, "3 of a fresh bucket's 5")
	require.True(t, g.Granted)
	require.Zero(t, g.Wait)
	n, g, err = l.TakeAdaptiveN(ctx, "ocr", p, 5)
	require.NoError(t, err)
	require.Equal(t, 2, n, "what was left")
	require.Greater(t, g.Wait, time.Duration(0))
	require.Less(t, g.Bucket.Tokens, 1.0)
	n, g, err = l.TakeAdaptiveN(ctx, "ocr", p, 1)
	require.NoError(t, err)
	require.Zero(t, n)
	require.False(t, g.Granted)
	_, _, err = l.TakeAdaptiveN(ctx, "ocr", p, 0)
	require.Error(t, err)
}

func TestAdaptiveTakeReportState(t *testing.T) {
	t.Parallel()
	l := ratelimit.New(dbtest.New(t))
	ctx := context.Background()
	p := ratelimit.DefaultAdaptive()

	_, found, err := l.State(ctx, "ocr")
	require.NoError(t, err)
	require.False(t, found, "no bucket before the first take")

	for i := range 5 {
		g, err := l.TakeAdaptive(ctx, "ocr", p)
		require.NoError(t, err)
		require.True(t, g.Granted, "take %d of a fresh bucket's 5", i)
	}
	g, err := l.TakeAdaptive(ctx, "ocr", p)
	require.NoError(t, err)
	require.False(t, g.Granted, "the burst is spent")
	require.Greater(t, g.Wait, time.Duration(0))
	require.LessOrEqual(t, g.Wait, time.Second/3+time.Millisecond, "one token at 3/s")

	b, changed, err := l.Report(ctx, "ocr", p, ratelimit.Result{Outcome: ratelimit.RateLimited, RetryAfter: 30 * time.Second, TakenAt: g.At})
	require.NoError(t, err)
	require.True(t, changed)
	require.Equal(t, []float64{3, 2}, []float64{b.MaxTokens, b.RefillRate})
	require.True(t, b.BackoffUntil.IsZero(), "the first 429 of a run slows down without backing off")

	g, err = l.TakeAdaptive(ctx, "ocr", p)
	require.NoError(t, err)
	require.False(t, g.Granted, "the slow-down emptied the bucket")
	require.LessOrEqual(t, g.Wait, time.Second/2+time.Millisecond, "one token at 2/s")

	b, changed, err = l.Report(ctx, "ocr", p, ratelimit.Result{Outcome: ratelimit.RateLimited, RetryAfter: 30 * time.Second, TakenAt: g.At})
	require.NoError(t, err)
	require.True(t, changed)
	require.Equal(t, []float64{2, 1}, []float64{b.MaxTokens, b.RefillRate})
	g, err = l.TakeAdaptive(ctx, "ocr", p)
	require.NoError(t, err)
	require.False(t, g.Granted, "backing off")
	require.Greater(t, g.Wait, 29*time.Second, "the second 429 in a row backs off until the Retry-After")

	st, found, err := l.State(ctx, "ocr")
	require.NoError(t, err)
	require.True(t, found)
	require.Equal(t, b.BackoffUntil, st.BackoffUntil)
	require.Equal(t, []float64{2, 1}, []float64{st.MaxTokens, st.RefillRate})
	require.Equal(t, 2, st.RateLimits)

	_, changed, err = l.Report(ctx, "ocr", p, ratelimit.Result{Outcome: ratelimit.Neutral})
	require.NoError(t, err)
	require.False(t, changed)

	g, err = l.TakeAdaptive(ctx, "embeddings", p)
	require.NoError(t, err)
	require.True(t, g.Granted, "buckets are per key")
}

func TestAdaptiveSharesTableWithFixed(t *testing.T) {
	t.Parallel()
	l := ratelimit.New(dbtest.New(t))
	ctx := context.Background()
	_, _, err := l.Take(ctx, "fly:app", ratelimit.Limit{Rate: 1, Burst: 3}, 1)
	require.NoError(t, err)
	_, err = l.TakeAdaptive(ctx, "fly:app", ratelimit.DefaultAdaptive())
	require.ErrorContains(t, err, "is a fixed bucket")
	_, err = l.TakeAdaptive(ctx, "ocr", ratelimit.Adaptive{})
	require.ErrorContains(t, err, "must be a positive number")
}

// TestAdaptiveConcurrentTakers has 8 takers in two processes share one
// bucket for about 2 s, each waiting as told when refused (as a snoozed job
// would): together they get no more than the burst plus what the rate
// refilled, and not much less.
func TestAdaptiveConcurrentTakers(t *testing.T) {
	t.Parallel()
	limiters := twoProcesses(t)
	ctx := context.Background()
	// A fixed shape, so that no report is needed to keep it.
	p := ratelimit.Adaptive{InitialMaxTokens: 5, MaxMaxTokens: 5, MinMaxTokens: 5, InitialRefillRate: 20, MaxRefillRate: 20, MinRefillRate: 20}

	var granted atomic.Int64
	start := time.Now()
	stop := start.Add(2 * time.Second)
	var wg sync.WaitGroup
	for i := range 8 {
		wg.Go(func() {
			l := limiters[i%len(limiters)]
			for time.Now().Before(stop) {
				g, err := l.TakeAdaptive(ctx, "shared", p)
				if err != nil {
					t.Error(err)
					return
				}
				if g.Granted {
					granted.Add(1)
				} else {
					// A refused taker waits as long as it is told, as a
					// snoozed job would: part of what is measured.
					time.Sleep(min(g.Wait, time.Until(stop)))
				}
			}
		})
	}
	wg.Wait()
	elapsed := time.Since(start).Seconds()
	ceiling := p.InitialMaxTokens + p.InitialRefillRate*elapsed
	t.Logf("granted %d in %.2fs, ceiling %.1f", granted.Load(), elapsed, ceiling)
	require.LessOrEqual(t, float64(granted.Load()), ceiling, "granted %d in %.2fs", granted.Load(), elapsed)
	require.GreaterOrEqual(t, float64(granted.Load()), 0.5*p.InitialRefillRate*2, "granted %d in %.2fs", granted.Load(), elapsed)
}

// TestAdaptiveConcurrentReports has 8 reporters in two processes report at
// once: every outcome is applied exactly once (the run lengths add up), a
// storm of 429s takes the limits to their floors and successes to their
// caps, and each change is announced once.
func TestAdaptiveConcurrentReports(t *testing.T) {
	t.Parallel()
	limiters := twoProcesses(t)
	ctx := context.Background()
	p := spec004()
	const reporters = 8

	report := func(r ratelimit.Result, each int) (changes int) {
		var n atomic.Int64
		var wg sync.WaitGroup
		for i := range reporters {
			wg.Go(func() {
				for range each {
					_, changed, err := limiters[i%len(limiters)].Report(ctx, "ocr", p, r)
					if err != nil {
						t.Error(err)
						return
					}
					if changed {
						n.Add(1)
					}
				}
			})
		}
		wg.Wait()
		return int(n.Load())
	}

	changes := report(ratelimit.Result{Outcome: ratelimit.RateLimited}, 10)
	b, _, err := limiters[0].State(ctx, "ocr")
	require.NoError(t, err)
	require.Equal(t, 80, b.RateLimits, "every 429 counted once")
	require.Equal(t, []float64{2, 1}, []float64{b.MaxTokens, b.RefillRate})
	require.Equal(t, 2, changes, "5 -> 3 -> 2 tokens: two changes")

	// The storm began at 3/s, the bucket's ceiling: the three steps from
	// 2.5/s to 4/s take 300 successes (the cautious pace), the 15 others
	// 10, 1,050 in all; each reporter sends 132.
	changes = report(ratelimit.Result{Outcome: ratelimit.Success}, 132)
	b, _, err = limiters[1].State(ctx, "ocr")
	require.NoError(t, err)
	require.Equal(t, 8*132-1050, b.Successes, "every success counted once")
	require.Zero(t, b.RateLimits)
	require.Equal(t, []float64{15, 10}, []float64{b.MaxTokens, b.RefillRate})
	require.Equal(t, 18, changes, "1/s to 10/s in steps of 0.5")
}

// TestAdaptiveExchange: one transaction applies the outcomes, in order,
// then takes tokens from the bucket as they left it.
func TestAdaptiveExchange(t *testing.T) {
	t.Parallel()
	l := ratelimit.New(dbtest.New(t))
	ctx := context.Background()
	p := ratelimit.DefaultAdaptive()

	x, err := l.Exchange(ctx, "ocr", p, nil, 3)
	require.NoError(t, err)
	require.Equal(t, 3, x.Granted)
	require.True(t, x.Grant.Granted)
	require.False(t, x.Changed)

	ok := ratelimit.Result{Outcome: ratelimit.Success, TakenAt: x.At}
	x, err = l.Exchange(ctx, "ocr", p, []ratelimit.Result{ok, ok, {Outcome: ratelimit.RateLimited, TakenAt: x.At}}, 2)
	require.NoError(t, err)
	require.True(t, x.Changed)
	require.True(t, x.Slowed)
	require.Zero(t, x.Granted, "the 429 emptied the bucket before the take")
	require.False(t, x.Grant.Granted)
	require.Greater(t, x.Wait, time.Duration(0))
	require.Equal(t, []float64{3, 2}, []float64{x.Bucket.MaxTokens, x.Bucket.RefillRate})

	x, err = l.Exchange(ctx, "ocr", p, []ratelimit.Result{{Outcome: ratelimit.Neutral}}, 0)
	require.NoError(t, err)
	require.False(t, x.Changed)
	require.False(t, x.Slowed)
	_, err = l.Exchange(ctx, "ocr", p, nil, -1)
	require.ErrorContains(t, err, "must not be negative")
}

// BenchmarkAdaptiveTake measures takes from one contended bucket: the cost
// every provider request pays, and the ceiling of one key's throughput.
func BenchmarkAdaptiveTake(b *testing.B) {
	l := ratelimit.New(dbtest.New(b))
	ctx := context.Background()
	p := ratelimit.Adaptive{InitialMaxTokens: 1e9, MaxMaxTokens: 1e9, MinMaxTokens: 1e9, InitialRefillRate: 1e9, MaxRefillRate: 1e9, MinRefillRate: 1e9}
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if _, err := l.TakeAdaptive(ctx, "bench", p); err != nil {
				b.Error(err)
				return
			}
		}
	})
}
