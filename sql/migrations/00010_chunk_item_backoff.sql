-- +goose Up

-- An item put back after a transient error waits out its backoff before a
-- chunk job claims it again (spec 004: retry with backoff); a 429 puts it
-- back at once, the shared limiter doing the waiting.
ALTER TABLE chunk_items ADD COLUMN not_before timestamptz;

-- +goose Down
ALTER TABLE chunk_items DROP COLUMN not_before;
