-- +goose Up

-- Chunks of a chunked phase (spec 004's OCR): the refs of a batch's phase
-- grouped by manifest directory, a few groups per chunk, each chunk run by
-- River jobs that claim its items a few at a time and commit each item's
-- outcome as it ends. 00001's chunks table was never used and kept items
-- in a jsonb array, which every settled item would rewrite whole: items are
-- rows of chunk_items instead.
DROP TABLE chunks;

CREATE TABLE chunks (
    batch_id           text        NOT NULL REFERENCES batches (id) ON DELETE CASCADE,
    phase              text        NOT NULL,
    -- chunk_id is the chunk's index in the batch's phase, as text ("0",
    -- "1", ...) as spec 004 names chunks.
    chunk_id           text        NOT NULL,
    -- state is spec 004's chunk phase (named otherwise here: phase is the
    -- pipeline's).
    state              text        NOT NULL DEFAULT 'PENDING'
                       CHECK (state IN ('PENDING', 'FETCHING', 'PROCESSING', 'PUBLISHING', 'DONE', 'ERROR')),
    -- The counters are kept by the item queries in the statement that
    -- settles an item (chunk_items.sql), so a status read is one row.
    total_refs         integer     NOT NULL,
    completed          integer     NOT NULL DEFAULT 0,
    failed             integer     NOT NULL DEFAULT 0,
    skipped            integer     NOT NULL DEFAULT 0,
    global_retry_count integer     NOT NULL DEFAULT 0,
    error              text,
    processing_time_ms bigint      NOT NULL DEFAULT 0,
    created_at         timestamptz NOT NULL DEFAULT now(),
    started_at         timestamptz,
    finished_at        timestamptz,
    PRIMARY KEY (batch_id, phase, chunk_id)
);

-- Open chunks of a batch's phase: the phase's end counts them (zero means
-- every chunk is terminal) from this index alone.
CREATE INDEX chunks_open_idx ON chunks (batch_id, phase) WHERE state NOT IN ('DONE', 'ERROR');

CREATE TABLE chunk_items (
    batch_id       text        NOT NULL,
    phase          text        NOT NULL,
    chunk_id       text        NOT NULL,
    -- item_index orders the chunk's items (list order); claims take the
    -- lowest pending first.
    item_index     integer     NOT NULL,
    -- directory_path is the item's group (spec 004's PI), for per-group
    -- results.
    directory_path text        NOT NULL,
    -- file_id and r2_key are the ref's row and object in the generation
    -- the chunks were made from.
    file_id        bigint      NOT NULL,
    r2_key         text        NOT NULL,
    status         text        NOT NULL DEFAULT 'pending'
                   CHECK (status IN ('pending', 'processing', 'done', 'skipped', 'error')),
    retry_count    integer     NOT NULL DEFAULT 0,
    error          text,
    text_length    integer,
    -- text is the item's text until it is published; published_key and
    -- published_size are the ref rewritten with it.
    text           text,
    published_key  text,
    published_size bigint,
    updated_at     timestamptz NOT NULL DEFAULT now(),
    -- No foreign key to chunks: items are written in bulk (COPY), and
    -- per-row checks are what 00005 removed from files and tasks. Only the
    -- transaction that inserts a batch phase's chunks inserts their items.
    PRIMARY KEY (batch_id, phase, chunk_id, item_index)
);

-- Next pending items of a chunk, in order.
CREATE INDEX chunk_items_pending_idx ON chunk_items (batch_id, phase, chunk_id, item_index) WHERE status = 'pending';

-- +goose Down
DROP TABLE chunk_items;
DROP TABLE chunks;

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
    rate_limiter  jsonb,
    error         text,
    created_at    timestamptz NOT NULL DEFAULT now(),
    updated_at    timestamptz NOT NULL DEFAULT now(),
    completed_at  timestamptz,
    CONSTRAINT chunks_batch_phase_index_key UNIQUE (batch_id, phase, chunk_index)
);
