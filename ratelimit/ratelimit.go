// Package ratelimit keeps token buckets in Postgres, so that every
// orchestrator process on one database shares one limit per key. There are
// two kinds, in one table:
//
//   - A fixed bucket (Take, with a Limit): Fly allows about one machine
//     launch per second per app with bursts of 3, however many orchestrators
//     are launching.
//   - An adaptive bucket (TakeAdaptive and Report, with an Adaptive): an
//     external API whose limit is unknown, such as the OCR provider's. Its
//     shape follows the outcomes every process reports (spec 004: faster
//     after runs of successes, slower and backing off on 429s), so the fleet
//     as a whole converges on what the provider takes, where one bucket per
//     worker would send the sum of their rates.
package ratelimit

import (
	"context"
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/arke-institute/orchestrator/db"
)

// Limit is a bucket's shape: Rate tokens per second, holding at most Burst.
type Limit struct {
	Rate  float64
	Burst int
}

// Validate reports a limit that could never grant a token.
func (l Limit) Validate() error {
	if l.Rate <= 0 || math.IsInf(l.Rate, 0) || math.IsNaN(l.Rate) {
		return fmt.Errorf("rate must be a positive number, got %v", l.Rate)
	}
	if l.Burst < 1 {
		return fmt.Errorf("burst must be at least 1, got %d", l.Burst)
	}
	return nil
}

// Limiter takes tokens from buckets in the database.
type Limiter struct {
	pool *pgxpool.Pool
}

// New returns a Limiter on pool.
func New(pool *pgxpool.Pool) *Limiter { return &Limiter{pool: pool} }

// Take takes up to want tokens from the bucket named key and returns how many
// it got. When it got fewer than want, wait is how long until the next token
// is due, so the caller can come back then instead of polling.
func (l *Limiter) Take(ctx context.Context, key string, limit Limit, want int) (granted int, wait time.Duration, err error) {
	if err := limit.Validate(); err != nil {
		return 0, 0, fmt.Errorf("rate limit %s: %w", key, err)
	}
	if want <= 0 {
		return 0, 0, errors.New("rate limit: want must be positive")
	}
	var row db.RateLimitTakeRow
	err = pgx.BeginFunc(ctx, l.pool, func(tx pgx.Tx) error {
		q := db.New(tx)
		if err := q.RateLimitEnsure(ctx, db.RateLimitEnsureParams{Key: key, Burst: float64(limit.Burst)}); err != nil {
			return err
		}
		var err error
		row, err = q.RateLimitTake(ctx, db.RateLimitTakeParams{Key: key, Rate: limit.Rate, Burst: float64(limit.Burst), Want: float64(want)})
		return err
	})
	if err != nil {
		return 0, 0, fmt.Errorf("taking %d tokens from %s: %w", want, key, err)
	}
	granted = int(row.Granted)
	if granted < want {
		wait = time.Duration((1 - row.Remaining) / limit.Rate * float64(time.Second))
		wait = max(wait, time.Millisecond)
	}
	return granted, wait, nil
}
