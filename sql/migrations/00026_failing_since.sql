-- +goose Up

-- failing_since is when an OCR ref (chunk_items) or a document's step
-- (documents) began failing transiently or being rate limited, in a row:
-- retries go on until PROVIDER_RETRY_WINDOW has passed since then
-- (provider.Retry), by time rather than by count. NULL while it is not
-- failing.
ALTER TABLE chunk_items ADD COLUMN failing_since timestamptz;
ALTER TABLE documents ADD COLUMN failing_since timestamptz;

-- +goose Down
ALTER TABLE documents DROP COLUMN failing_since;
ALTER TABLE chunk_items DROP COLUMN failing_since;
