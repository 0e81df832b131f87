package ratelimit

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/arke-institute/orchestrator/db"
)

// Grant is the answer of TakeAdaptive.
type Grant struct {
	// Granted reports that a token was taken: make the request, then
	// Report its outcome with TakenAt set to At.
	Granted bool
	// Wait, when nothing was granted, is how long until a token may be:
	// snooze the job that long rather than hold a worker slot sleeping.
	Wait time.Duration
	// At is the database's time of the take.
	At time.Time
	// Bucket is the state after the take.
	Bucket Bucket
}

// TakeAdaptive takes one token from the adaptive bucket named key, creating
// it at p's initial shape the first time. Every process on the database
// shares the bucket: the take happens with its row locked, on the
// database's clock.
func (l *Limiter) TakeAdaptive(ctx context.Context, key string, p Adaptive) (Grant, error) {
	var g Grant
	err := l.update(ctx, key, p, func(b Bucket, now time.Time) Bucket {
		g.At = now
		g.Bucket, g.Granted, g.Wait = b.Take(now)
		return g.Bucket
	})
	if err != nil {
		return Grant{}, fmt.Errorf("taking a token from %s: %w", key, err)
	}
	return g, nil
}

// TakeAdaptiveN takes up to n tokens from the adaptive bucket named key
// in one transaction, as TakeAdaptive takes one: a caller about to make
// several requests at once pays one round of locking for all of them.
// Granted is how many it took (each to be reported, with TakenAt = At);
// when fewer than n, Wait is how long until the next token may be.
func (l *Limiter) TakeAdaptiveN(ctx context.Context, key string, p Adaptive, n int) (granted int, g Grant, err error) {
	if n < 1 {
		return 0, Grant{}, errors.New("rate limit: n must be positive")
	}
	x, err := l.Exchange(ctx, key, p, nil, n)
	return x.Granted, x.Grant, err
}

// Exchanged is the answer of Exchange.
type Exchanged struct {
	// Grant is the take's: Granted, when at least one token was taken,
	// and Wait, when fewer than asked for, as TakeAdaptiveN's.
	Grant
	// Granted is how many tokens were taken.
	Granted int
	// Changed reports that the results moved the bucket's limits, Slowed
	// that one of them slowed it down.
	Changed, Slowed bool
}

// Exchange applies results to the adaptive bucket named key, in order (as
// Report applies one), then takes up to n tokens from it (n may be 0), in
// one transaction: a caller that keeps many requests going pays one round
// of locking for the outcomes of those that ended and the tokens of those
// it starts next, rather than one per request and per outcome.
func (l *Limiter) Exchange(ctx context.Context, key string, p Adaptive, results []Result, n int) (Exchanged, error) {
	if n < 0 {
		return Exchanged{}, errors.New("rate limit: n must not be negative")
	}
	var x Exchanged
	err := l.update(ctx, key, p, func(b Bucket, now time.Time) Bucket {
		x = Exchanged{Grant: Grant{At: now}}
		slowedAt := b.SlowedAt
		for _, r := range results {
			var changed bool
			b, changed = b.Apply(p, r, now)
			x.Changed = x.Changed || changed
		}
		x.Slowed = b.SlowedAt != slowedAt
		for x.Granted < n {
			next, ok, wait := b.Take(now)
			b = next
			if !ok {
				x.Wait = wait
				break
			}
			x.Granted++
		}
		x.Grant.Granted = x.Granted > 0
		x.Bucket = b
		return b
	})
	if err != nil {
		return Exchanged{}, fmt.Errorf("exchanging %d outcomes for %d tokens with %s: %w", len(results), n, key, err)
	}
	return x, nil
}

// Report applies one request's outcome to the adaptive bucket named key
// (see Bucket.Apply) and returns the bucket's new state and whether its
// limits changed. Each call applies its outcome exactly once, however many
// processes report at the same time.
func (l *Limiter) Report(ctx context.Context, key string, p Adaptive, r Result) (b Bucket, changed bool, err error) {
	err = l.update(ctx, key, p, func(cur Bucket, now time.Time) Bucket {
		b, changed = cur.Apply(p, r, now)
		return b
	})
	if err != nil {
		return Bucket{}, false, fmt.Errorf("reporting to %s: %w", key, err)
	}
	return b, changed, nil
}

// State is the adaptive bucket named key as of now, its tokens refilled to
// now, for status pages; it writes nothing. found is false for a key that
// no one has taken from yet.
func (l *Limiter) State(ctx context.Context, key string) (b Bucket, found bool, err error) {
	row, err := db.New(l.pool).RateLimitGet(ctx, key)
	if errors.Is(err, pgx.ErrNoRows) {
		return Bucket{}, false, nil
	}
	if err != nil {
		return Bucket{}, false, fmt.Errorf("reading rate limit %s: %w", key, err)
	}
	b, err = bucketFromRow(row.RateLimit)
	if err != nil {
		return Bucket{}, false, err
	}
	return b.Refill(row.Now), true, nil
}

// States reads the adaptive buckets named keys in one query, each
// refilled to the database's now, by key; a key no one has taken from yet
// is absent. A fixed bucket under one of the keys is an error, as for
// State.
func (l *Limiter) States(ctx context.Context, keys []string) (buckets map[string]Bucket, err error) {
	rows, err := db.New(l.pool).RateLimitListByKeys(ctx, keys)
	if err != nil {
		return nil, fmt.Errorf("reading rate limits: %w", err)
	}
	buckets = make(map[string]Bucket, len(rows))
	for _, row := range rows {
		b, err := bucketFromRow(row.RateLimit)
		if err != nil {
			return nil, err
		}
		buckets[row.RateLimit.Key] = b.Refill(row.Now)
	}
	return buckets, nil
}

// update runs change on the bucket named key with its row locked, creating
// the bucket first if need be, and writes back what change returns. The
// arithmetic runs here rather than in SQL so that spec 004's rules live in
// one place, Bucket, tested without a database; the lock makes each change
// see the one before it, in whichever process it ran.
func (l *Limiter) update(ctx context.Context, key string, p Adaptive, change func(b Bucket, now time.Time) Bucket) error {
	if err := p.Validate(); err != nil {
		return err
	}
	return pgx.BeginFunc(ctx, l.pool, func(tx pgx.Tx) error {
		q := db.New(tx)
		row, err := q.RateLimitGetForUpdate(ctx, key)
		if errors.Is(err, pgx.ErrNoRows) {
			err = q.RateLimitAdaptiveCreate(ctx, db.RateLimitAdaptiveCreateParams{Key: key, MaxTokens: p.InitialMaxTokens, RefillRate: p.InitialRefillRate})
			if err != nil {
				return err
			}
			row, err = q.RateLimitGetForUpdate(ctx, key)
		}
		if err != nil {
			return err
		}
		b, err := bucketFromRow(row.RateLimit)
		if err != nil {
			return err
		}
		b = change(b.Clamp(p), row.Now)
		return q.RateLimitAdaptiveSet(ctx, db.RateLimitAdaptiveSetParams{
			Key:                  key,
			Tokens:               b.Tokens,
			MaxTokens:            &b.MaxTokens,
			RefillRate:           &b.RefillRate,
			UpdatedAt:            b.LastRefill,
			ConsecutiveSuccesses: int32(b.Successes),
			Consecutive429s:      int32(b.RateLimits),
			BackoffUntil:         optionalTime(b.BackoffUntil),
			SlowedAt:             optionalTime(b.SlowedAt),
			CeilingRate:          optionalRate(b.Ceiling),
		})
	})
}

// bucketFromRow reads an adaptive bucket from its row; a fixed bucket's
// row (no stored shape) is an error, since its shape is its caller's.
func bucketFromRow(r db.RateLimit) (Bucket, error) {
	if r.MaxTokens == nil || r.RefillRate == nil {
		return Bucket{}, fmt.Errorf("rate limit %s is a fixed bucket, not an adaptive one", r.Key)
	}
	b := Bucket{
		Tokens:     r.Tokens,
		MaxTokens:  *r.MaxTokens,
		RefillRate: *r.RefillRate,
		LastRefill: r.UpdatedAt,
		Successes:  int(r.ConsecutiveSuccesses),
		RateLimits: int(r.Consecutive429s),
	}
	if r.BackoffUntil != nil {
		b.BackoffUntil = *r.BackoffUntil
	}
	if r.SlowedAt != nil {
		b.SlowedAt = *r.SlowedAt
	}
	if r.CeilingRate != nil {
		b.Ceiling = *r.CeilingRate
	}
	return b, nil
}

func optionalRate(r float64) *float64 {
	if r == 0 {
		return nil
	}
	return &r
}

func optionalTime(t time.Time) *time.Time {
	if t.IsZero() {
		return nil
	}
	return &t
}
