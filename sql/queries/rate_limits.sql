-- RateLimitEnsure creates a full bucket the first time a key is used.
-- name: RateLimitEnsure :exec
INSERT INTO rate_limits (key, tokens) VALUES (@key, @burst::float8)
ON CONFLICT (key) DO NOTHING;

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
