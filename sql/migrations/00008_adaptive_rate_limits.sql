-- +goose Up

-- rate_limits holds two kinds of token bucket (package ratelimit). A fixed
-- bucket (Fly launches) gets its shape from the caller and keeps only
-- tokens and updated_at; its max_tokens and refill_rate stay NULL. An
-- adaptive bucket (an external API such as the OCR provider) keeps its shape
-- here, because every process adjusts it: spec 004's speed-up after a run of
-- successes and slow-down with backoff on a 429. updated_at is the last
-- refill for both kinds.
ALTER TABLE rate_limits
    ADD COLUMN max_tokens            double precision,
    ADD COLUMN refill_rate           double precision,
    ADD COLUMN consecutive_successes integer NOT NULL DEFAULT 0,
    ADD COLUMN consecutive_429s      integer NOT NULL DEFAULT 0,
    ADD COLUMN backoff_until         timestamptz,
    -- slowed_at is when the bucket last slowed down: a 429 for a request
    -- taken before then is answered already and does not slow it again.
    ADD COLUMN slowed_at             timestamptz,
    ADD CONSTRAINT rate_limits_shape_check CHECK ((max_tokens IS NULL) = (refill_rate IS NULL));

-- +goose Down
ALTER TABLE rate_limits
    DROP CONSTRAINT rate_limits_shape_check,
    DROP COLUMN slowed_at, DROP COLUMN backoff_until,
    DROP COLUMN consecutive_429s, DROP COLUMN consecutive_successes,
    DROP COLUMN refill_rate, DROP COLUMN max_tokens;
