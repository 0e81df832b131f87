package ratelimit

import (
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/arke-institute/orchestrator/provider"
)

// The steps of the adaptation, which spec 004 does not make settings.
const (
	// speedUpAfter successes in a row raise the limits by one additive
	// step (spec 004's), once the bucket has seen a 429.
	speedUpAfter = 10
	// cautiousFactor multiplies speedUpAfter for the steps from just below
	// the rate of the last 429 (Bucket.Ceiling) to cautiousAbove past it:
	// not spec 004's.
	cautiousFactor = 30
	cautiousAbove  = 1
	// A speed-up adds these; a slow-down subtracts the slow-down steps or
	// takes slowDownFactor of the limits, whichever is lower: spec 004's
	// steps for a small bucket, a fifth of a large one.
	speedUpTokens, speedUpRate   = 1, 0.5
	slowDownTokens, slowDownRate = 2, 1
	slowDownFactor               = 0.8
	// Until its first 429 a bucket starts slowly (TCP's slow start):
	// each run of successes worth slowStartSeconds of requests at its rate
	// (speedUpAfter at least) multiplies its rate by slowStartFactor, so a
	// bucket in use doubles its rate about every second and reaches any
	// provider's capacity within seconds rather than minutes.
	slowStartFactor  = 1.5
	slowStartSeconds = 0.5
	// maxBackoff caps the exponential backoff of 2^(n-1) seconds after
	// the n-th slow-down in a row (a longer Retry-After still wins).
	maxBackoff = time.Minute
)

// Adaptive is the shape and range of an adaptive bucket: it starts at the
// initial values and moves between the minimums and maximums as outcomes are
// reported. Tokens are requests; rates are requests per second.
type Adaptive struct {
	InitialMaxTokens  float64
	InitialRefillRate float64
	MaxMaxTokens      float64
	MaxRefillRate     float64
	MinMaxTokens      float64
	MinRefillRate     float64
}

// DefaultAdaptive is spec 004's start, 5 tokens and 3 requests/s, and its
// floors, 2 tokens at 1/s; its caps of 15 tokens at 10/s were a chunk's, and
// one bucket serves the whole fleet, so it may grow to 1,000 tokens at
// 1,000/s: a provider's 429s, not the cap, find its capacity.
func DefaultAdaptive() Adaptive {
	return Adaptive{
		InitialMaxTokens:  5,
		InitialRefillRate: 3,
		MaxMaxTokens:      1000,
		MaxRefillRate:     1000,
		MinMaxTokens:      2,
		MinRefillRate:     1,
	}
}

// Validate reports parameters with which a bucket could never grant a token
// or could not stay in its range: every value must be positive and finite,
// each minimum at most its initial value and that at most its maximum, and
// the token minimum at least 1.
func (p Adaptive) Validate() error {
	for _, v := range []struct {
		name string
		v    float64
	}{
		{"initial max tokens", p.InitialMaxTokens}, {"initial refill rate", p.InitialRefillRate},
		{"max max tokens", p.MaxMaxTokens}, {"max refill rate", p.MaxRefillRate},
		{"min max tokens", p.MinMaxTokens}, {"min refill rate", p.MinRefillRate},
	} {
		if !(v.v > 0) || math.IsInf(v.v, 0) {
			return fmt.Errorf("%s must be a positive number, got %v", v.name, v.v)
		}
	}
	if p.MinMaxTokens < 1 {
		return fmt.Errorf("min max tokens must be at least 1, got %v", p.MinMaxTokens)
	}
	if p.MinMaxTokens > p.InitialMaxTokens || p.InitialMaxTokens > p.MaxMaxTokens {
		return fmt.Errorf("max tokens must satisfy min <= initial <= max, got %v <= %v <= %v", p.MinMaxTokens, p.InitialMaxTokens, p.MaxMaxTokens)
	}
	if p.MinRefillRate > p.InitialRefillRate || p.InitialRefillRate > p.MaxRefillRate {
		return fmt.Errorf("refill rate must satisfy min <= initial <= max, got %v <= %v <= %v", p.MinRefillRate, p.InitialRefillRate, p.MaxRefillRate)
	}
	return nil
}

// Bucket is an adaptive bucket's state at one moment. Its methods are pure:
// the Limiter applies them to the row it has locked, with the database's
// clock as now, and they are what the table tests check.
type Bucket struct {
	// Tokens is what the bucket held at LastRefill (fractional).
	Tokens float64
	// MaxTokens is the burst; RefillRate the sustained requests per second.
	MaxTokens  float64
	RefillRate float64
	LastRefill time.Time
	// Successes and RateLimits are the current runs of successes and of
	// 429s; an outcome of the other kind ends a run.
	Successes  int
	RateLimits int
	// BackoffUntil, when after now, grants nothing before it.
	BackoffUntil time.Time
	// SlowedAt is when the bucket last slowed down (see Apply).
	SlowedAt time.Time
	// Ceiling is the refill rate at which the bucket last slowed down
	// (0: never): the provider's limit as last seen (see Apply).
	Ceiling float64
}

// NewBucket is a full bucket of p's initial shape at now.
func NewBucket(p Adaptive, now time.Time) Bucket {
	return Bucket{Tokens: p.InitialMaxTokens, MaxTokens: p.InitialMaxTokens, RefillRate: p.InitialRefillRate, LastRefill: now}
}

// Outcome is what became of a request made with a token.
type Outcome int

// The outcomes a caller reports. The zero value is Neutral, so a Result
// that forgets to say changes nothing.
const (
	// Neutral is an outcome that says nothing about the provider's limit
	// (a permanent error, a 500): nothing changes.
	Neutral Outcome = iota
	// Success counts towards the run of successes that speeds up.
	Success
	// RateLimited is a 429: slow down, and back off if it is not the
	// first of its run.
	RateLimited
	// Overloaded is a 503 or a call that timed out: the provider is short
	// of capacity without saying so by a 429. It slows down as a 429 does.
	Overloaded
)

// Result is one reported outcome.
type Result struct {
	Outcome Outcome
	// RetryAfter is the provider's Retry-After for a RateLimited or
	// Overloaded outcome (zero when it gave none); it wins over a shorter
	// exponential backoff.
	RetryAfter time.Duration
	// TakenAt is when the request's token was taken (Grant.At); zero when
	// unknown. A 429 for a request taken before the bucket last slowed down
	// was sent at the old pace, which the bucket has answered already.
	TakenAt time.Time
}

// Refill is b at now with the tokens refilled for the time elapsed, up to
// MaxTokens. A now before LastRefill (a clock read before a lock was
// granted) counts as LastRefill: no time, no tokens, and LastRefill never
// goes back, so no interval is counted twice.
func (b Bucket) Refill(now time.Time) Bucket {
	if now.After(b.LastRefill) {
		b.Tokens += now.Sub(b.LastRefill).Seconds() * b.RefillRate
		b.LastRefill = now
	}
	b.Tokens = min(b.Tokens, b.MaxTokens)
	return b
}

// Clamp moves b's shape into p's range, so a bucket stored under other
// settings follows the current ones.
func (b Bucket) Clamp(p Adaptive) Bucket {
	b.MaxTokens = min(max(b.MaxTokens, p.MinMaxTokens), p.MaxMaxTokens)
	b.RefillRate = min(max(b.RefillRate, p.MinRefillRate), p.MaxRefillRate)
	b.Tokens = min(b.Tokens, b.MaxTokens)
	return b
}

// Take takes one token at now if b is not backing off and holds a whole
// token. Otherwise wait is how long until one may be granted: the end of
// the backoff, else the time until the next whole token.
func (b Bucket) Take(now time.Time) (next Bucket, granted bool, wait time.Duration) {
	if now.Before(b.BackoffUntil) {
		return b, false, b.BackoffUntil.Sub(now)
	}
	b = b.Refill(now)
	if b.Tokens >= 1 {
		b.Tokens--
		return b, true, 0
	}
	wait = time.Duration((1 - b.Tokens) / b.RefillRate * float64(time.Second))
	return b, false, max(wait, time.Millisecond)
}

// Apply applies one outcome at now. changed reports whether MaxTokens or
// RefillRate moved, so callers record one event per change.
//
// Until its first 429 (Ceiling 0) the bucket starts slowly: a run of
// successes worth half a second at its rate (10 at least) multiplies its
// rate by 1.5, and raises its burst to a second's worth, as long as the
// bucket is in use (under half full: a caller that takes fewer tokens
// than it earns says nothing of the provider's capacity). After that,
// spec 004's steps: 10 successes in a row raise the burst by 1 and the
// rate by 0.5/s, up to p's maximums; one bucket shared by a fleet sees
// successes as many times faster as it sends, so this too grows in
// proportion to the rate, about 5% a second.
//
// A 429 (or an Overloaded outcome) ends the run of successes and slows
// the bucket down: the rate by 1/s or to 0.8 of itself, whichever is
// lower, the burst by 2 or to 0.8 of itself, down to p's minimums. It
// records the rate that drew the first 429 of a run as the bucket's
// Ceiling: the speed-ups from just below it to 1/s past it need thirty
// times the successes, so the bucket probes the provider's limit rarely
// (TCP's congestion avoidance, in spec 004's steps). The bucket is
// emptied and earns nothing until its backoff ends, so that it starts
// again at its new rate rather than with a full burst. The first
// slow-down of a run does not back off: its cut answers an overload, and
// pausing a fleet-wide bucket for the provider's Retry-After (whole
// seconds) would cost more capacity than the overload did. The n-th in a
// row (no success between) backs off min(60 s, 2^(n-1) s), or the
// provider's Retry-After if longer: the provider is refusing, not just
// full.
//
// A 429 for a request taken before the last slow-down was sent at the
// old pace, which the bucket has answered already: it only ends the run
// of successes. Every request in flight when the provider starts
// refusing gets a 429, and counting them all would drop the limits to
// their floors for one overload.
func (b Bucket) Apply(p Adaptive, r Result, now time.Time) (next Bucket, changed bool) {
	// Tokens accrued so far were earned at the old rate.
	b = b.Refill(now).Clamp(p)
	before := b
	switch r.Outcome {
	case Success:
		b.RateLimits = 0
		if b.Ceiling == 0 {
			b = b.slowStart(p)
			break
		}
		b.Successes++
		need := speedUpAfter
		if b.RefillRate+speedUpRate >= b.Ceiling && b.RefillRate < b.Ceiling+cautiousAbove {
			need *= cautiousFactor
		}
		if b.Successes >= need {
			b.Successes = 0
			b.MaxTokens = min(p.MaxMaxTokens, b.MaxTokens+speedUpTokens)
			b.RefillRate = min(p.MaxRefillRate, b.RefillRate+speedUpRate)
		}
	case RateLimited, Overloaded:
		b.Successes = 0
		if !r.TakenAt.IsZero() && r.TakenAt.Before(b.SlowedAt) {
			break // sent at the old pace
		}
		if b.RateLimits == 0 { // a new run of 429s: its rate is the limit
			b.Ceiling = b.RefillRate
		}
		b.RateLimits++
		b.MaxTokens = max(p.MinMaxTokens, min(b.MaxTokens-slowDownTokens, b.MaxTokens*slowDownFactor))
		b.RefillRate = max(p.MinRefillRate, min(b.RefillRate-slowDownRate, b.RefillRate*slowDownFactor))
		b.SlowedAt = now
		if b.RateLimits > 1 {
			until := now.Add(max(r.RetryAfter, exponentialBackoff(b.RateLimits-1)))
			if until.After(b.BackoffUntil) {
				b.BackoffUntil = until
			}
		}
		b.Tokens = 0
		b.LastRefill = now
		if b.BackoffUntil.After(now) {
			b.LastRefill = b.BackoffUntil
		}
	case Neutral:
	}
	return b, b.MaxTokens != before.MaxTokens || b.RefillRate != before.RefillRate
}

// slowStart counts a success of a bucket that has not seen a 429 yet (see
// Apply).
func (b Bucket) slowStart(p Adaptive) Bucket {
	if b.Tokens >= b.MaxTokens/2 {
		return b // not in use: the callers, not the bucket, set the pace
	}
	b.Successes++
	if float64(b.Successes) < max(speedUpAfter, b.RefillRate*slowStartSeconds) {
		return b
	}
	b.Successes = 0
	b.RefillRate = min(p.MaxRefillRate, b.RefillRate*slowStartFactor)
	b.MaxTokens = min(p.MaxMaxTokens, max(b.MaxTokens, b.RefillRate))
	return b
}

// exponentialBackoff is min(60 s, 2^n s).
func exponentialBackoff(n int) time.Duration {
	if n >= 6 { // 2^6 s is past the cap; stop before the shift overflows
		return maxBackoff
	}
	return min(maxBackoff, time.Second<<n)
}

// ResultOf is the outcome of a call that ended with err (nil: a success),
// made with a token taken at takenAt: a 429 is RateLimited and a 503 or a
// timeout Overloaded, each with the provider's Retry-After; any other
// failure is Neutral.
func ResultOf(err error, takenAt time.Time) Result {
	r := Result{TakenAt: takenAt}
	switch {
	case err == nil:
		r.Outcome = Success
	case provider.ClassOf(err) == provider.RateLimited:
		r.Outcome = RateLimited
	case provider.Overloaded(err):
		r.Outcome = Overloaded
	}
	if pe, ok := errors.AsType[*provider.Error](err); ok && r.Outcome != Neutral {
		r.RetryAfter = pe.RetryAfter
	}
	return r
}
