-- +goose Up

-- The durable cursor of the periodic scan of DOCUMENTS_PREFIX (issue 30):
-- each pass lists the prefix from the start, in key order, and queues the
-- objects whose key and ETag no document has yet; after is the last key
-- of the last page handled, so that a pass cut short (a restart, the
-- run's time budget) goes on where it was. One row per prefix scanned.
CREATE TABLE document_scans (
    prefix        text        PRIMARY KEY,
    after         text        NOT NULL DEFAULT '',
    -- passes counts the passes ended; last_pass_at is when the last did.
    passes        bigint      NOT NULL DEFAULT 0,
    last_pass_at  timestamptz,
    queued        bigint      NOT NULL DEFAULT 0,
    updated_at    timestamptz NOT NULL DEFAULT now()
);

-- +goose Down
DROP TABLE document_scans;
