-- RateLimitAdaptiveCreate creates an adaptive bucket, full at its initial
-- shape, the first time its key is used.
-- name: RateLimitAdaptiveCreate :exec
INSERT INTO rate_limits (key, tokens, max_tokens, refill_rate)
VALUES (@key, @max_tokens::float8, @max_tokens::float8, @refill_rate::float8)
ON CONFLICT (key) DO NOTHING;

-- RateLimitAdaptiveSet writes an adaptive bucket's new state, computed by
-- ratelimit while the row is locked (RateLimitGetForUpdate).
-- name: RateLimitAdaptiveSet :exec
UPDATE rate_limits SET
    tokens = @tokens,
    max_tokens = @max_tokens,
    refill_rate = @refill_rate,
    updated_at = @updated_at,
    consecutive_successes = @consecutive_successes,
    consecutive_429s = @consecutive_429s,
    backoff_until = @backoff_until,
    slowed_at = @slowed_at,
    ceiling_rate = @ceiling_rate
WHERE key = @key;

-- RateLimitEnsure creates a full bucket the first time a key is used.
-- name: RateLimitEnsure :exec
INSERT INTO rate_limits (key, tokens) VALUES (@key, @burst::float8)
ON CONFLICT (key) DO NOTHING;

-- RateLimitGet reads a bucket and the database's clock, which is the one
-- clock every process shares.
-- name: RateLimitGet :one
SELECT sqlc.embed(rate_limits), clock_timestamp()::timestamptz AS now
FROM rate_limits WHERE key = @key;

-- RateLimitGetForUpdate is RateLimitGet with the row locked until the
-- transaction ends, so that concurrent takers and reporters, in any
-- process, apply their changes one after another.
-- name: RateLimitGetForUpdate :one
SELECT sqlc.embed(rate_limits), clock_timestamp()::timestamptz AS now
FROM rate_limits WHERE key = @key
FOR UPDATE;

-- RateLimitListByKeys reads buckets by key with the database's clock, as
-- RateLimitGet reads one.
-- name: RateLimitListByKeys :many
SELECT sqlc.embed(rate_limits), clock_timestamp()::timestamptz AS now
FROM rate_limits WHERE key = ANY(@keys::text[]);

-- RateLimitTake refills the bucket for the time elapsed (at @rate tokens per
-- second, up to @burst), takes up to @want whole tokens, and returns how many
-- it took and how many (fractional) are left. The row lock serialises
-- concurrent takers across processes.
-- name: RateLimitTake :one
WITH cur AS (
    SELECT rl.key, least(sqlc.arg(burst)::float8, rl.tokens + sqlc.arg(rate)::float8 * extract(epoch FROM clock_timestamp() - rl.updated_at)::float8) AS avail
    FROM rate_limits rl WHERE rl.key = sqlc.arg(key)
    FOR UPDATE
), took AS (
    SELECT key, avail, least(floor(avail), sqlc.arg(want)::float8) AS granted FROM cur
)
UPDATE rate_limits r
SET tokens = took.avail - took.granted, updated_at = clock_timestamp()
FROM took
WHERE r.key = took.key
RETURNING took.granted::int AS granted, (took.avail - took.granted)::float8 AS remaining;
