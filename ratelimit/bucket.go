package ratelimit

import (
	"fmt"
	"math"
	"time"
)

// The steps of spec 004's adaptation, which it does not make settings.
const (
	// speedUpAfter successes in a row raise the limits by one step.
	speedUpAfter = 10
	// cautiousFactor multiplies speedUpAfter for the steps from just below
	// the rate of the last 429 (Bucket.Ceiling) to cautiousAbove past it:
	// not spec 004's.
	cautiousFactor = 30
	cautiousAbove  = 1
	// A speed-up adds these; a slow-down subtracts the slow-down steps.
	speedUpTokens, speedUpRate   = 1, 0.5
	slowDownTokens, slowDownRate = 2, 1
	// maxBackoff caps the exponential backoff of 2^n seconds after the
	// n-th 429 in a row (a longer Retry-After still wins).
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

// DefaultAdaptive is spec 004's bucket: a conservative start of 5 tokens
// and 3 requests/s, between 2 tokens at 1/s and 15 tokens at 10/s.
func DefaultAdaptive() Adaptive {
	return Adaptive{
		InitialMaxTokens:  5,
		InitialRefillRate: 3,
		MaxMaxTokens:      15,
		MaxRefillRate:     10,
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
	// (a permanent error, a timeout, a 5xx): nothing changes.
	Neutral Outcome = iota
	// Success counts towards the run of successes that speeds up.
	Success
	// RateLimited is a 429: slow down and back off.
	RateLimited
)

// Result is one reported outcome.
type Result struct {
	Outcome Outcome
	// RetryAfter is the provider's Retry-After for a RateLimited outcome
	// (zero when it gave none); it wins over a shorter exponential backoff.
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

// Apply applies one outcome at now (spec 004): a success extends the run of
// successes and, at 10 in a row, raises the burst by 1 and the rate by 0.5/s
// up to p's maximums; a 429 ends that run, lowers the burst by 2 and the
// rate by 1/s down to p's minimums, and backs off min(60 s, 2^n s) for the
// n-th 429 in a row, or Retry-After if longer. Unlike the spec, a 429 for a
// request taken before the last slow-down only ends the run of successes and
// honours its Retry-After: every request in flight when the provider starts
// refusing gets a 429, and counting them all would drop the limits to their
// floors and back off a minute for one overload. Also unlike the spec, a
// slow-down empties the bucket and it earns no tokens until its backoff
// ends (see below), and it records the rate that drew the first 429 of a
// run as the bucket's Ceiling: the speed-ups from just below it to 1/s past
// it need thirty times the successes. One bucket shared by a fleet sees
// successes many times faster than spec 004's per-chunk buckets, so
// without this it climbs back past the provider's limit within seconds of
// each slow-down, and every 429 costs a backoff of two seconds or more:
// the ceiling makes those probes rare (TCP's congestion avoidance, in spec
// 004's steps). changed reports whether MaxTokens or RefillRate moved, so
// callers record one event per change.
func (b Bucket) Apply(p Adaptive, r Result, now time.Time) (next Bucket, changed bool) {
	// Tokens accrued so far were earned at the old rate.
	b = b.Refill(now).Clamp(p)
	before := b
	switch r.Outcome {
	case Success:
		b.RateLimits = 0
		b.Successes++
		need := speedUpAfter
		if b.Ceiling > 0 && b.RefillRate+speedUpRate >= b.Ceiling && b.RefillRate < b.Ceiling+cautiousAbove {
			need *= cautiousFactor
		}
		if b.Successes >= need {
			b.Successes = 0
			b.MaxTokens = min(p.MaxMaxTokens, b.MaxTokens+speedUpTokens)
			b.RefillRate = min(p.MaxRefillRate, b.RefillRate+speedUpRate)
		}
	case RateLimited:
		b.Successes = 0
		backoff := r.RetryAfter
		slowDown := r.TakenAt.IsZero() || !r.TakenAt.Before(b.SlowedAt)
		if slowDown {
			if b.RateLimits == 0 { // a new run of 429s: its rate is the limit
				b.Ceiling = b.RefillRate
			}
			b.RateLimits++
			b.MaxTokens = max(p.MinMaxTokens, b.MaxTokens-slowDownTokens)
			b.RefillRate = max(p.MinRefillRate, b.RefillRate-slowDownRate)
			b.SlowedAt = now
			backoff = max(backoff, exponentialBackoff(b.RateLimits))
		}
		if until := now.Add(backoff); until.After(b.BackoffUntil) {
			b.BackoffUntil = until
		}
		if slowDown {
			// The provider has no capacity left: the bucket is emptied and
			// earns nothing while it backs off, so that it starts again at
			// its new rate rather than with a full burst, which the
			// provider, refilled for the same time at most, would answer
			// with the next 429 (and a longer backoff).
			b.Tokens = 0
			b.LastRefill = b.BackoffUntil
		}
	case Neutral:
	}
	return b, b.MaxTokens != before.MaxTokens || b.RefillRate != before.RefillRate
}

// exponentialBackoff is min(60 s, 2^n s).
func exponentialBackoff(n int) time.Duration {
	if n >= 6 { // 2^6 s is past the cap; stop before the shift overflows
		return maxBackoff
	}
	return min(maxBackoff, time.Second<<n)
}
