-- +goose Up

-- The refill rate at which an adaptive bucket last drew a 429: above it the
-- bucket speeds up cautiously (ratelimit.Bucket.Ceiling).
ALTER TABLE rate_limits ADD COLUMN ceiling_rate double precision;

-- +goose Down
ALTER TABLE rate_limits DROP COLUMN ceiling_rate;
