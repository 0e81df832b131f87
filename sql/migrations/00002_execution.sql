-- +goose Up

-- How a task reached its end: its worker's callback, the timeout sweep, or an
-- admin reset. A repeat callback for a task ended by its own callback is a
-- harmless duplicate (200); one for a task ended otherwise is late (409).
ALTER TABLE tasks
    ADD COLUMN ended_by text CHECK (ended_by IN ('callback', 'timeout', 'reset'));

-- Delivery of the final manifest to the ingest service (an outbox: the
-- batch_finalize job retries until ingest acknowledges).
ALTER TABLE batches
    ADD COLUMN ingest_status       text NOT NULL DEFAULT 'none'
                                   CHECK (ingest_status IN ('none', 'pending', 'delivered', 'failed')),
    ADD COLUMN ingest_attempts     integer NOT NULL DEFAULT 0,
    ADD COLUMN ingest_last_error   text,
    ADD COLUMN ingest_delivered_at timestamptz;

-- Batches still running: the sweep's backstop scans these.
CREATE INDEX batches_active_idx ON batches (id) WHERE completed_at IS NULL;

-- Token buckets shared by every orchestrator process on this database, e.g.
-- Fly's machine-launch limit per app. One short row lock per launch round.
CREATE TABLE rate_limits (
    key        text             PRIMARY KEY,
    tokens     double precision NOT NULL,
    updated_at timestamptz      NOT NULL DEFAULT clock_timestamp()
);

-- +goose Down
DROP TABLE rate_limits;
DROP INDEX batches_active_idx;
ALTER TABLE batches
    DROP COLUMN ingest_status, DROP COLUMN ingest_attempts,
    DROP COLUMN ingest_last_error, DROP COLUMN ingest_delivered_at;
ALTER TABLE tasks DROP COLUMN ended_by;
