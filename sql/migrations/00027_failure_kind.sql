-- +goose Up

-- failure says why a failed task or OCR ref failed: 'permanent' (the file
-- is bad: the worker or the provider refused it) or 'infrastructure' (its
-- attempts or retries were spent by timeouts, dead machines, outages,
-- transient errors or a spent quota). A batch's status, final manifest and
-- ingest callback count the two apart, an admin retry can rerun only the
-- latter, and INFRA_FAILURE_MAX bounds them. NULL for work not failed, or
-- ended with its batch (a reset).
ALTER TABLE tasks ADD COLUMN failure text CHECK (failure IN ('permanent', 'infrastructure'));
ALTER TABLE chunk_items ADD COLUMN failure text CHECK (failure IN ('permanent', 'infrastructure'));

-- +goose Down
ALTER TABLE chunk_items DROP COLUMN failure;
ALTER TABLE tasks DROP COLUMN failure;
