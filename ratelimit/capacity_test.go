package ratelimit_test

import (
	"fmt"
	"math"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/arke-institute/orchestrator/ratelimit"
)

// TestBucketFindsCapacity runs the default bucket against a simulated
// provider of each capacity from 5 to 200 requests/s (a token bucket of a
// second's burst answering 429 with Retry-After in whole seconds, as
// fakeocr's), with callers that always have work and answers 50 ms after
// each request: within 30 s it reaches 0.8 of the capacity and holds it,
// with at most 5% of requests answered 429. The clock is simulated; the
// database's part (one row shared by every process) is the Limiter's.
func TestBucketFindsCapacity(t *testing.T) {
	t.Parallel()
	for _, capacity := range []float64{5, 8, 20, 50, 100, 200} {
		t.Run(fmt.Sprint(capacity), func(t *testing.T) {
			t.Parallel()
			s := simulate(capacity, 50*time.Millisecond, 3*time.Minute)
			require.LessOrEqual(t, s.reached, 30*time.Second, "time to 0.8 of capacity")
			require.GreaterOrEqual(t, s.heldShare, 0.8, "OK requests/s over capacity after 30 s")
			require.LessOrEqual(t, s.limitedShare, 0.05, "requests answered 429")
		})
	}
}

type simulation struct {
	reached      time.Duration // first 1-s window with OK >= 0.8 capacity
	heldShare    float64       // OK/s from 30 s to the end, over capacity
	limitedShare float64
}

func simulate(capacity float64, latency, length time.Duration) simulation {
	p := ratelimit.DefaultAdaptive()
	b := ratelimit.NewBucket(p, t0)
	const step = time.Millisecond
	provTokens, provBurst := math.Ceil(capacity), math.Ceil(capacity)
	type answer struct {
		at     time.Time
		result ratelimit.Result
	}
	var pending []answer
	okPerSecond := make([]int, int(length/time.Second)+1)
	var requests, limited int
	for now := t0; now.Sub(t0) < length; now = now.Add(step) {
		provTokens = min(provBurst, provTokens+capacity*step.Seconds())
		for len(pending) > 0 && !pending[0].at.After(now) {
			b, _ = b.Apply(p, pending[0].result, now)
			pending = pending[1:]
		}
		for {
			next, granted, _ := b.Take(now)
			if !granted {
				break
			}
			b = next
			requests++
			r := ratelimit.Result{Outcome: ratelimit.Success, TakenAt: now}
			if provTokens >= 1 { // the provider sees it at once, answers after latency
				provTokens--
				okPerSecond[int(now.Sub(t0)/time.Second)]++
			} else {
				limited++
				r = ratelimit.Result{Outcome: ratelimit.RateLimited, TakenAt: now, RetryAfter: time.Second}
			}
			pending = append(pending, answer{at: now.Add(latency), result: r})
		}
	}
	s := simulation{reached: -1, limitedShare: float64(limited) / float64(requests)}
	held := 0
	for sec, ok := range okPerSecond[:len(okPerSecond)-1] {
		if s.reached < 0 && float64(ok) >= 0.8*capacity {
			s.reached = time.Duration(sec+1) * time.Second
		}
		if sec >= 30 {
			held += ok
		}
	}
	if s.reached < 0 {
		s.reached = length
	}
	s.heldShare = float64(held) / (length.Seconds() - 30) / capacity
	return s
}
