-- +goose Up

-- Documents indexed for search (spec 003): one row per version of an
-- object's content. The object's key is the document's identity; a version
-- whose content hashes as the key's current one adopts its chunks instead
-- of being processed again.
CREATE TABLE documents (
    id               bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    r2_key           text        NOT NULL,
    version          integer     NOT NULL,
    -- status and current_step are spec 003's.
    status           text        NOT NULL DEFAULT 'not_started'
                     CHECK (status IN ('not_started', 'processing', 'completed', 'failed')),
    current_step     text        NOT NULL DEFAULT 'download'
                     CHECK (current_step IN ('download', 'embeddings', 'tags', 'store')),
    -- etag and size are the object's when the version was asked for;
    -- content_sha256 is its content's, once downloaded.
    etag             text,
    size_bytes       bigint,
    content_sha256   bytea,
    total_chunks     integer     NOT NULL DEFAULT 0,
    processed_chunks integer     NOT NULL DEFAULT 0,
    retry_count      integer     NOT NULL DEFAULT 0,
    -- resumes counts the retries asked for by hand: each runs a step job
    -- of its own (its args carry the count), which cannot be mistaken for
    -- the job of the run that failed while that one is still finishing.
    resumes          integer     NOT NULL DEFAULT 0,
    -- errors is spec 003's history: [{step, error, timestamp}, ...].
    errors           jsonb       NOT NULL DEFAULT '[]',
    document_tags    text[],
    -- current marks the version search reads: at most one per key, the
    -- last stored.
    current          boolean     NOT NULL DEFAULT false,
    -- batch_id and file_id name the batch file the document indexes, when a
    -- batch asked for it.
    batch_id         text,
    file_id          bigint,
    created_at       timestamptz NOT NULL DEFAULT now(),
    started_at       timestamptz,
    completed_at     timestamptz,
    failed_at        timestamptz,
    updated_at       timestamptz NOT NULL DEFAULT now(),
    UNIQUE (r2_key, version)
);

CREATE UNIQUE INDEX documents_current_idx ON documents (r2_key) WHERE current;
CREATE INDEX documents_batch_idx ON documents (batch_id) WHERE batch_id IS NOT NULL;

-- The chunks of a document version, written by its download step and
-- filled in by the steps after it; search reads those of current
-- documents.
CREATE TABLE document_chunks (
    document_id bigint  NOT NULL REFERENCES documents (id) ON DELETE CASCADE,
    chunk_index integer NOT NULL,
    text        text    NOT NULL,
    -- heading is the trail of headings in force where the chunk starts
    -- ("Install > On Linux"), embedded with the text.
    heading     text    NOT NULL DEFAULT '',
    tokens      integer NOT NULL,
    embedding   real[],
    tags        text[],
    status      text    NOT NULL DEFAULT 'pending'
                CHECK (status IN ('pending', 'embedding_done', 'tags_done', 'stored')),
    PRIMARY KEY (document_id, chunk_index)
);

-- +goose Down
DROP TABLE document_chunks;
DROP TABLE documents;
