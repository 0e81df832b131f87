-- +goose Up

-- One row per batch handed to us. The intake message is kept as it arrived
-- (queue_message, immutable). There are deliberately no per-callback counters
-- here: a row every callback updates is a hot row that serialises all
-- callbacks of a batch (see design.md); progress is counted from tasks.
CREATE TABLE batches (
    id                text        PRIMARY KEY,
    -- PENDING until discovery, then the name of the running phase, then DONE or ERROR.
    status            text        NOT NULL DEFAULT 'PENDING',
    -- The phase the batch is in, or was in when it stopped (kept on ERROR so
    -- that a retry can resume there). NULL before the first phase.
    phase             text,
    -- Number of the file generation that is current (0 = the manifest's files).
    generation        integer     NOT NULL DEFAULT 0,
    phase_retry_count integer     NOT NULL DEFAULT 0,
    uploader          text        NOT NULL,
    queue_message     jsonb       NOT NULL,
    error             text,
    started_at        timestamptz NOT NULL DEFAULT now(),
    updated_at        timestamptz NOT NULL DEFAULT now(),
    completed_at      timestamptz,
    CONSTRAINT batches_status_not_empty CHECK (status <> ''),
    CONSTRAINT batches_terminal_completed CHECK ((status IN ('DONE', 'ERROR')) = (completed_at IS NOT NULL))
);

-- Listing newest first, optionally by status or uploader.
CREATE INDEX batches_started_at_idx ON batches (started_at DESC, id DESC);
CREATE INDEX batches_status_idx ON batches (status, started_at DESC);
CREATE INDEX batches_uploader_idx ON batches (uploader, started_at DESC);

-- The evolving file list: one row per file per generation. Generation 0 is
-- the manifest; each phase that had tasks writes the next generation in full,
-- and parent_id links every row to the row of the previous generation it came
-- from, so a file's lineage (TIFF -> JPEG -> ref.json) is a walk up parent_id.
CREATE TABLE files (
    id                bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    batch_id          text        NOT NULL REFERENCES batches (id) ON DELETE CASCADE,
    generation        integer     NOT NULL,
    -- Position in the generation's list, so the list keeps the manifest's order.
    ordinal           integer     NOT NULL,
    parent_id         bigint      REFERENCES files (id) ON DELETE CASCADE,
    -- The phase whose transform produced this generation (NULL for generation 0).
    phase             text,
    directory_path    text        NOT NULL,
    r2_key            text        NOT NULL,
    logical_path      text        NOT NULL,
    file_name         text        NOT NULL,
    file_size         bigint      NOT NULL CHECK (file_size >= 0),
    content_type      text        NOT NULL,
    cid               text,
    processing_config jsonb       NOT NULL,
    preprocessor_tags text[]      NOT NULL DEFAULT '{}',
    created_at        timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT files_batch_generation_ordinal_key UNIQUE (batch_id, generation, ordinal)
);

CREATE INDEX files_parent_id_idx ON files (parent_id) WHERE parent_id IS NOT NULL;

-- One row per unit of work in a phase (one machine per task).
CREATE TABLE tasks (
    id          text        PRIMARY KEY,
    batch_id    text        NOT NULL REFERENCES batches (id) ON DELETE CASCADE,
    phase       text        NOT NULL,
    file_id     bigint      NOT NULL REFERENCES files (id) ON DELETE CASCADE,
    status      text        NOT NULL DEFAULT 'pending'
                CHECK (status IN ('pending', 'processing', 'completed', 'failed')),
    -- Launches so far; a relaunch after an ambiguous failure bumps it.
    attempt     integer     NOT NULL DEFAULT 0,
    machine_id  text,
    -- SHA-256 of the per-launch callback token; the token itself is never stored.
    token_hash  bytea,
    deadline    timestamptz,
    result      jsonb,
    error       text,
    created_at  timestamptz NOT NULL DEFAULT now(),
    launched_at timestamptz,
    finished_at timestamptz,
    updated_at  timestamptz NOT NULL DEFAULT now()
);

-- Per-phase progress counts and the fan-in check ("is any task of this
-- (batch, phase) still open?") are index-only scans of this index.
CREATE INDEX tasks_batch_phase_status_idx ON tasks (batch_id, phase, status);
-- The launcher claims pending tasks in creation order.
CREATE INDEX tasks_pending_idx ON tasks (batch_id, phase, created_at, id) WHERE status = 'pending';
-- The timeout sweep finds processing tasks past their deadline.
CREATE INDEX tasks_deadline_idx ON tasks (deadline) WHERE status = 'processing';

-- A group of items processed by one job in fan-out phases (OCR, spec 004),
-- with its own progress and the adaptive rate limiter's last observations.
CREATE TABLE chunks (
    id            bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    batch_id      text        NOT NULL REFERENCES batches (id) ON DELETE CASCADE,
    phase         text        NOT NULL,
    task_id       text        REFERENCES tasks (id) ON DELETE SET NULL,
    chunk_index   integer     NOT NULL,
    status        text        NOT NULL DEFAULT 'pending'
                  CHECK (status IN ('pending', 'processing', 'completed', 'failed')),
    items         jsonb       NOT NULL DEFAULT '[]',
    items_total   integer     NOT NULL DEFAULT 0,
    items_done    integer     NOT NULL DEFAULT 0,
    items_failed  integer     NOT NULL DEFAULT 0,
    -- Adaptive token bucket state as last reported (refill rate, bucket size, 429s seen).
    rate_limiter  jsonb,
    error         text,
    created_at    timestamptz NOT NULL DEFAULT now(),
    updated_at    timestamptz NOT NULL DEFAULT now(),
    completed_at  timestamptz,
    CONSTRAINT chunks_batch_phase_index_key UNIQUE (batch_id, phase, chunk_index)
);

-- Append-only log of everything that happens to a batch: status history,
-- live streams and reports read it.
CREATE TABLE batch_events (
    id         bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    batch_id   text        NOT NULL REFERENCES batches (id) ON DELETE CASCADE,
    type       text        NOT NULL,
    phase      text,
    task_id    text,
    data       jsonb       NOT NULL DEFAULT '{}',
    created_at timestamptz NOT NULL DEFAULT now()
);

CREATE INDEX batch_events_batch_id_idx ON batch_events (batch_id, id);

-- +goose Down
DROP TABLE batch_events;
DROP TABLE chunks;
DROP TABLE tasks;
DROP TABLE files;
DROP TABLE batches;
