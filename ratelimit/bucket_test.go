package ratelimit_test

import (
	"errors"
	"fmt"
	"math"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/arke-institute/orchestrator/provider"
	"github.com/arke-institute/orchestrator/ratelimit"
)

var t0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

func TestAdaptiveValidate(t *testing.T) {
	t.Parallel()
	require.NoError(t, ratelimit.DefaultAdaptive().Validate())
	for name, tc := range map[string]struct {
		change func(*ratelimit.Adaptive)
		msg    string
	}{
		"ZeroRate":           {func(p *ratelimit.Adaptive) { p.MinRefillRate = 0 }, "min refill rate must be a positive number"},
		"NegativeTokens":     {func(p *ratelimit.Adaptive) { p.MaxMaxTokens = -1 }, "max max tokens must be a positive number"},
		"TokenFloorBelowOne": {func(p *ratelimit.Adaptive) { p.MinMaxTokens = 0.5 }, "min max tokens must be at least 1"},
		"InitialAboveMax":    {func(p *ratelimit.Adaptive) { p.InitialMaxTokens = 2000 }, "min <= initial <= max"},
		"RateMinAboveInit":   {func(p *ratelimit.Adaptive) { p.MinRefillRate = 4 }, "min <= initial <= max"},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			p := ratelimit.DefaultAdaptive()
			tc.change(&p)
			require.ErrorContains(t, p.Validate(), tc.msg)
		})
	}
}

func TestBucketTake(t *testing.T) {
	t.Parallel()
	p := ratelimit.DefaultAdaptive()
	full := ratelimit.NewBucket(p, t0)
	for name, tc := range map[string]struct {
		b       ratelimit.Bucket
		now     time.Time
		granted bool
		wait    time.Duration
		tokens  float64
	}{
		"FullBucket":         {b: full, now: t0, granted: true, tokens: 4},
		"RefillsForElapsed":  {b: with(full, func(b *ratelimit.Bucket) { b.Tokens = 0 }), now: t0.Add(500 * time.Millisecond), granted: true, tokens: 0.5},
		"RefillCapsAtMax":    {b: with(full, func(b *ratelimit.Bucket) { b.Tokens = 1 }), now: t0.Add(time.Hour), granted: true, tokens: 4},
		"WaitsForNextToken":  {b: with(full, func(b *ratelimit.Bucket) { b.Tokens = 0.25 }), now: t0, wait: 250 * time.Millisecond, tokens: 0.25},
		"ClockBehindRefill":  {b: with(full, func(b *ratelimit.Bucket) { b.Tokens = 0 }), now: t0.Add(-time.Second), wait: time.Second / 3, tokens: 0},
		"BackoffWaitsForEnd": {b: with(full, func(b *ratelimit.Bucket) { b.BackoffUntil = t0.Add(2 * time.Second) }), now: t0, wait: 2 * time.Second, tokens: 5},
		"BackoffOver":        {b: with(full, func(b *ratelimit.Bucket) { b.BackoffUntil = t0 }), now: t0, granted: true, tokens: 4},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			next, granted, wait := tc.b.Take(tc.now)
			require.Equal(t, tc.granted, granted)
			require.InDelta(t, tc.wait, wait, float64(time.Millisecond))
			require.InDelta(t, tc.tokens, next.Tokens, 1e-9)
			require.False(t, next.LastRefill.Before(tc.b.LastRefill), "the last refill never goes back")
		})
	}
}

// spec004 is spec 004's bucket, capped at 15 tokens and 10/s, for the
// tables of additive steps.
func spec004() ratelimit.Adaptive {
	p := ratelimit.DefaultAdaptive()
	p.MaxMaxTokens, p.MaxRefillRate = 15, 10
	return p
}

func TestBucketApply(t *testing.T) {
	t.Parallel()
	p := spec004()
	// start has seen a 429 (its ceiling is far above): spec 004's steps.
	start := with(ratelimit.NewBucket(p, t0), func(b *ratelimit.Bucket) { b.Ceiling = 100 })
	type want struct {
		maxTokens, rate   float64
		successes, streak int
		backoff           time.Duration // BackoffUntil - t0; 0 for none
		changed           bool
	}
	for name, tc := range map[string]struct {
		b   ratelimit.Bucket
		r   ratelimit.Result
		out want
	}{
		"SuccessCounts": {b: start, r: success(), out: want{maxTokens: 5, rate: 3, successes: 1}},
		"TenthSuccessSpeedsUp": {b: with(start, func(b *ratelimit.Bucket) { b.Successes = 9 }), r: success(),
			out: want{maxTokens: 6, rate: 3.5, changed: true}},
		"SpeedUpCapped": {b: with(start, func(b *ratelimit.Bucket) { b.Successes, b.MaxTokens, b.RefillRate = 9, 15, 9.8 }), r: success(),
			out: want{maxTokens: 15, rate: 10, changed: true}},
		"AtCapsNoChange": {b: with(start, func(b *ratelimit.Bucket) { b.Successes, b.MaxTokens, b.RefillRate = 9, 15, 10 }), r: success(),
			out: want{maxTokens: 15, rate: 10}},
		"SuccessEndsRateLimitRun": {b: with(start, func(b *ratelimit.Bucket) { b.RateLimits = 3 }), r: success(),
			out: want{maxTokens: 5, rate: 3, successes: 1}},
		"FirstRateLimitSlowsDownWithoutBackoff": {b: with(start, func(b *ratelimit.Bucket) { b.Successes = 7 }), r: limited(time.Second),
			out: want{maxTokens: 3, rate: 2, streak: 1, changed: true}},
		"OverloadSlowsDownAsA429": {b: start, r: ratelimit.Result{Outcome: ratelimit.Overloaded},
			out: want{maxTokens: 3, rate: 2, streak: 1, changed: true}},
		"LargeBucketLosesAFifth": {b: with(start, func(b *ratelimit.Bucket) { b.MaxTokens, b.RefillRate = 15, 10 }), r: limited(0),
			out: want{maxTokens: 12, rate: 8, streak: 1, changed: true}},
		"SlowDownFloored": {b: with(start, func(b *ratelimit.Bucket) { b.MaxTokens, b.RefillRate = 3, 1.5 }), r: limited(0),
			out: want{maxTokens: 2, rate: 1, streak: 1, changed: true}},
		"SecondInARowBacksOff": {b: with(start, func(b *ratelimit.Bucket) { b.RateLimits = 1 }), r: limited(0),
			out: want{maxTokens: 3, rate: 2, streak: 2, backoff: 2 * time.Second, changed: true}},
		"AtFloorsNoChange": {b: with(start, func(b *ratelimit.Bucket) { b.MaxTokens, b.RefillRate, b.RateLimits = 2, 1, 2 }), r: limited(0),
			out: want{maxTokens: 2, rate: 1, streak: 3, backoff: 4 * time.Second}},
		"BackoffGrows": {b: with(start, func(b *ratelimit.Bucket) { b.RateLimits = 5 }), r: limited(0),
			out: want{maxTokens: 3, rate: 2, streak: 6, backoff: 32 * time.Second, changed: true}},
		"BackoffCapped": {b: with(start, func(b *ratelimit.Bucket) { b.RateLimits = 6 }), r: limited(0),
			out: want{maxTokens: 3, rate: 2, streak: 7, backoff: time.Minute, changed: true}},
		"BackoffCappedLongRun": {b: with(start, func(b *ratelimit.Bucket) { b.RateLimits = 100 }), r: limited(0),
			out: want{maxTokens: 3, rate: 2, streak: 101, backoff: time.Minute, changed: true}},
		"RetryAfterLonger": {b: with(start, func(b *ratelimit.Bucket) { b.RateLimits = 1 }), r: limited(10 * time.Second),
			out: want{maxTokens: 3, rate: 2, streak: 2, backoff: 10 * time.Second, changed: true}},
		"RetryAfterShorter": {b: with(start, func(b *ratelimit.Bucket) { b.RateLimits = 4 }), r: limited(time.Second),
			out: want{maxTokens: 3, rate: 2, streak: 5, backoff: 16 * time.Second, changed: true}},
		"RetryAfterBeyondCap": {b: with(start, func(b *ratelimit.Bucket) { b.RateLimits = 9 }), r: limited(2 * time.Minute),
			out: want{maxTokens: 3, rate: 2, streak: 10, backoff: 2 * time.Minute, changed: true}},
		"BackoffNeverShortened": {b: with(start, func(b *ratelimit.Bucket) { b.BackoffUntil, b.RateLimits = t0.Add(50*time.Second), 1 }), r: limited(0),
			out: want{maxTokens: 3, rate: 2, streak: 2, backoff: 50 * time.Second, changed: true}},
		"StaleRateLimitOnlyEndsSuccesses": {
			b: with(start, func(b *ratelimit.Bucket) {
				b.MaxTokens, b.RefillRate, b.RateLimits, b.Successes, b.SlowedAt = 3, 2, 1, 4, t0
			}),
			r:   ratelimit.Result{Outcome: ratelimit.RateLimited, RetryAfter: 5 * time.Second, TakenAt: t0.Add(-time.Second)},
			out: want{maxTokens: 3, rate: 2, streak: 1}},
		"FreshRateLimitAfterSlowDown": {
			b: with(start, func(b *ratelimit.Bucket) {
				b.MaxTokens, b.RefillRate, b.RateLimits, b.SlowedAt = 3, 2, 1, t0.Add(-time.Minute)
			}),
			r:   ratelimit.Result{Outcome: ratelimit.RateLimited, TakenAt: t0.Add(-time.Second)},
			out: want{maxTokens: 2, rate: 1, streak: 2, backoff: 2 * time.Second, changed: true}},
		"NeutralChangesNothing": {b: with(start, func(b *ratelimit.Bucket) { b.Successes, b.RateLimits = 4, 2 }), r: ratelimit.Result{},
			out: want{maxTokens: 5, rate: 3, successes: 4, streak: 2}},
		"ClampsToNewSettings": {b: with(start, func(b *ratelimit.Bucket) { b.MaxTokens, b.RefillRate = 40, 0.1 }), r: ratelimit.Result{},
			out: want{maxTokens: 15, rate: 1}},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			next, changed := tc.b.Apply(p, tc.r, t0)
			got := want{maxTokens: next.MaxTokens, rate: next.RefillRate, successes: next.Successes, streak: next.RateLimits, changed: changed}
			if !next.BackoffUntil.IsZero() {
				got.backoff = next.BackoffUntil.Sub(t0)
			}
			require.Equal(t, tc.out, got)
			require.LessOrEqual(t, next.Tokens, next.MaxTokens)
		})
	}
}

// TestBucketSlowStart: until its first 429, a bucket in use multiplies its
// rate by 1.5 for each run of successes worth half a second (10 at
// least); one that is not in use stays put; the first 429 ends it.
func TestBucketSlowStart(t *testing.T) {
	t.Parallel()
	p := ratelimit.DefaultAdaptive()
	b := ratelimit.NewBucket(p, t0)
	for range 10 {
		b, _ = b.Apply(p, success(), t0)
	}
	require.Equal(t, 3.0, b.RefillRate, "a full bucket is not in use: no speed-up")

	b.Tokens = 0
	var changes int
	for range 9 {
		var changed bool
		b, changed = b.Apply(p, success(), t0)
		require.False(t, changed)
	}
	b, changed := b.Apply(p, success(), t0)
	require.True(t, changed)
	require.Equal(t, 4.5, b.RefillRate, "10 successes: x1.5")
	require.Equal(t, 5.0, b.MaxTokens, "the burst stays while above a second's worth")
	for b.RefillRate < 200 {
		var changed bool
		b, changed = b.Apply(p, success(), t0)
		if changed {
			changes++
		}
	}
	require.InDelta(t, 4.5*math.Pow(1.5, float64(changes)), b.RefillRate, 1e-9)
	require.Equal(t, 10, changes, "4.5/s to 200/s in ten steps")
	require.Equal(t, b.RefillRate, b.MaxTokens, "a second's burst")

	rate := b.RefillRate
	b, _ = b.Apply(p, limited(time.Second), t0)
	require.Equal(t, rate, b.Ceiling, "the first 429 records its rate")
	require.InDelta(t, 0.8*rate, b.RefillRate, 1e-9)
	require.True(t, b.BackoffUntil.IsZero(), "the first 429 of a run does not back off")
	for range 20 {
		b, _ = b.Apply(p, success(), t0)
	}
	require.InDelta(t, 0.8*rate+1, b.RefillRate, 1e-9, "after a 429, spec 004's additive steps")
}

// TestBucketApplyRefillsAtOldRate checks that tokens earned before a change
// are counted at the rate they were earned at.
func TestBucketApplyRefillsAtOldRate(t *testing.T) {
	t.Parallel()
	p := spec004()
	b := with(ratelimit.NewBucket(p, t0), func(b *ratelimit.Bucket) { b.Tokens, b.Successes, b.Ceiling = 0, 9, 100 })
	b, changed := b.Apply(p, success(), t0.Add(time.Second))
	require.True(t, changed)
	require.Equal(t, 3.5, b.RefillRate)
	require.InDelta(t, 3, b.Tokens, 1e-9, "one second at 3/s, not 3.5/s")
	require.Equal(t, t0.Add(time.Second), b.LastRefill)
}

// TestBucketSlowDownEmptiesTheBucket: a 429 that slows the bucket down
// empties it, and it earns nothing until its backoff ends: it starts again
// from no token at its new rate, not with a full burst.
func TestBucketSlowDownEmptiesTheBucket(t *testing.T) {
	t.Parallel()
	p := spec004()
	b := ratelimit.NewBucket(p, t0) // 5 tokens
	b, changed := b.Apply(p, limited(0), t0)
	require.True(t, changed)
	require.Zero(t, b.Tokens)
	_, granted, wait := b.Take(t0)
	require.False(t, granted)
	require.Equal(t, time.Second/2, wait, "one token at the new 2/s")

	b, _ = b.Apply(p, limited(0), t0) // the second in a row backs off
	require.Equal(t, t0.Add(2*time.Second), b.BackoffUntil)
	_, granted, wait = b.Take(t0.Add(1900 * time.Millisecond))
	require.False(t, granted)
	require.Equal(t, 100*time.Millisecond, wait, "the backoff's end")
	_, granted, wait = b.Take(t0.Add(2 * time.Second))
	require.False(t, granted, "nothing earned during the backoff")
	require.Equal(t, time.Second, wait, "one token at the new 1/s")
	next, granted, _ := b.Take(t0.Add(3 * time.Second))
	require.True(t, granted)
	require.InDelta(t, 0, next.Tokens, 1e-9)

	// A stale 429 (sent at the old pace) changes neither the tokens nor
	// when they accrue.
	b.Tokens = 1
	stale, _ := b.Apply(p, ratelimit.Result{Outcome: ratelimit.RateLimited, TakenAt: t0.Add(-time.Second)}, t0.Add(2*time.Second))
	require.Equal(t, 1.0, stale.Tokens)
}

// TestBucketConverges runs the arithmetic to its ends: 429s in a row reach
// the floors, successes in a row the caps.
func TestBucketConverges(t *testing.T) {
	t.Parallel()
	p := spec004()
	b := ratelimit.NewBucket(p, t0)
	changes := 0
	for range 10 {
		var changed bool
		b, changed = b.Apply(p, ratelimit.Result{Outcome: ratelimit.RateLimited}, t0)
		if changed {
			changes++
		}
	}
	require.Equal(t, []float64{2, 1}, []float64{b.MaxTokens, b.RefillRate})
	require.Equal(t, 2, changes, "5 -> 3 -> 2 tokens, 3 -> 2 -> 1 per second")
	require.Equal(t, t0.Add(time.Minute), b.BackoffUntil)

	require.Equal(t, 3.0, b.Ceiling, "the rate at the storm's first 429")

	// Back up: 10 successes a step, but the three steps from 2.5/s to 4/s
	// around the ceiling, which take 300.
	changes = 0
	for range 15*10 + 3*300 {
		var changed bool
		b, changed = b.Apply(p, success(), t0)
		if changed {
			changes++
		}
	}
	require.Equal(t, []float64{15, 10}, []float64{b.MaxTokens, b.RefillRate})
	require.Equal(t, 18, changes, "the rate needs 18 steps of 0.5 from 1 to 10")
	require.Zero(t, b.RateLimits)
}

// TestBucketCeiling: after a slow-down, the steps below the rate that drew
// the 429 take spec 004's 10 successes, those from it to 1/s past it 300,
// and the steps beyond 10 again.
func TestBucketCeiling(t *testing.T) {
	t.Parallel()
	p := spec004()
	b := with(ratelimit.NewBucket(p, t0), func(b *ratelimit.Bucket) { b.RefillRate, b.MaxTokens = 5, 10 })
	b, _ = b.Apply(p, limited(0), t0)
	require.Equal(t, []float64{5, 4}, []float64{b.Ceiling, b.RefillRate})
	b, _ = b.Apply(p, limited(0), t0.Add(10*time.Second))
	require.Equal(t, []float64{5, 3}, []float64{b.Ceiling, b.RefillRate}, "a 429 in the same run keeps the ceiling")
	steps := func(n int) {
		for range n {
			b, _ = b.Apply(p, success(), t0)
		}
	}
	steps(20)
	require.Equal(t, 4.0, b.RefillRate, "below the ceiling: 10 successes a step")
	steps(10 + 299)
	require.Equal(t, 4.5, b.RefillRate, "the step to the ceiling waits for 300")
	steps(1 + 600)
	require.Equal(t, 6.0, b.RefillRate, "to 5.5, then 6: 300 each")
	steps(10)
	require.Equal(t, 6.5, b.RefillRate, "past the ceiling's neighbourhood: 10 again")
	b, _ = b.Apply(p, limited(0), t0.Add(time.Minute))
	require.Equal(t, 6.5, b.Ceiling, "a new run of 429s moves the ceiling to its rate")
}

func with(b ratelimit.Bucket, change func(*ratelimit.Bucket)) ratelimit.Bucket {
	change(&b)
	return b
}

func success() ratelimit.Result { return ratelimit.Result{Outcome: ratelimit.Success} }

func limited(retryAfter time.Duration) ratelimit.Result {
	return ratelimit.Result{Outcome: ratelimit.RateLimited, RetryAfter: retryAfter}
}

// TestResultOf: a 429 slows down, and so do a 503 and a timeout; any other
// failure says nothing of the provider's capacity.
func TestResultOf(t *testing.T) {
	t.Parallel()
	at := t0
	for name, tc := range map[string]struct {
		err     error
		outcome ratelimit.Outcome
		retry   time.Duration
	}{
		"Success":      {nil, ratelimit.Success, 0},
		"429":          {&provider.Error{Class: provider.RateLimited, Status: 429, RetryAfter: 3 * time.Second}, ratelimit.RateLimited, 3 * time.Second},
		"503":          {&provider.Error{Class: provider.Transient, Status: 503, RetryAfter: time.Second}, ratelimit.Overloaded, time.Second},
		"Timeout":      {&provider.Error{Class: provider.Transient, Timeout: true}, ratelimit.Overloaded, 0},
		"500":          {&provider.Error{Class: provider.Transient, Status: 500}, ratelimit.Neutral, 0},
		"Permanent":    {&provider.Error{Class: provider.Permanent, Status: 400}, ratelimit.Neutral, 0},
		"Wrapped429":   {fmt.Errorf("ocr: %w", &provider.Error{Class: provider.RateLimited, Status: 429}), ratelimit.RateLimited, 0},
		"Unclassified": {errors.New("connection reset"), ratelimit.Neutral, 0},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			r := ratelimit.ResultOf(tc.err, at)
			require.Equal(t, ratelimit.Result{Outcome: tc.outcome, RetryAfter: tc.retry, TakenAt: at}, r)
		})
	}
}
