-- +goose Up

-- Search on Postgres (issue 30): full-text candidates from a tsvector per
-- chunk, vector candidates from a binary signature of each vector, both
-- ranked with the chunks' vectors; no process keeps the corpus.

-- search_text is the chunk's heading and text as text_config (a text
-- search configuration, SEARCH_TEXT_CONFIG) parses them, written with the
-- chunk. It is a plain column, not a generated one, because the
-- configuration is a setting: a chunk written under another keeps its
-- name, and a re-index writes it again. Existing chunks are written with
-- 'simple', the default.
-- embedding_model and embedding_dims name the embedder of embedding: a
-- search compares only vectors of its own embedder. Vectors written before
-- this migration have no known embedder, and search skips them until they
-- are embedded again.
ALTER TABLE document_chunks
    ADD COLUMN search_text     tsvector,
    ADD COLUMN text_config     text,
    ADD COLUMN embedding_model text,
    ADD COLUMN embedding_dims  integer;

UPDATE document_chunks SET search_text = to_tsvector('simple', heading || ' ' || text), text_config = 'simple';

CREATE INDEX document_chunks_search_text_idx ON document_chunks USING gin (search_text);
-- A search filtered by tags finds the chunks that carry them.
CREATE INDEX document_chunks_tags_idx ON document_chunks USING gin (tags);
-- A search filtered by key prefix finds the current versions under it.
CREATE INDEX documents_current_key_idx ON documents (r2_key text_pattern_ops) WHERE current;

-- chunk_signatures holds the signature of each chunk's vector (512 bits:
-- the signs of the vector after a fixed pseudo-random rotation,
-- search.Signature; the share of bits two signatures differ in estimates
-- the angle between their vectors), apart from the wide chunk rows (text,
-- vector) so that a scan of every signature reads 100 bytes a chunk: a
-- process loads them into its in-memory index, and searches scan them here
-- until it has. Search takes its vector candidates by them and ranks them
-- by the exact cosine. A chunk moved to a new version (unchanged content)
-- takes its signature along.
CREATE TABLE chunk_signatures (
    document_id     bigint      NOT NULL,
    chunk_index     integer     NOT NULL,
    embedding_model text        NOT NULL,
    embedding_dims  integer     NOT NULL,
    signature       bit varying NOT NULL,
    PRIMARY KEY (document_id, chunk_index),
    FOREIGN KEY (document_id, chunk_index) REFERENCES document_chunks (document_id, chunk_index)
        ON DELETE CASCADE ON UPDATE CASCADE
);

-- search_xid is the transaction that last made the version current or not
-- current: a process's in-memory index reads the versions changed since the
-- oldest transaction that was running when it last looked (one that
-- commits later has an xid at least that), and so never misses one.
ALTER TABLE documents ADD COLUMN search_xid xid8;
CREATE INDEX documents_search_xid_idx ON documents (search_xid) WHERE search_xid IS NOT NULL;

-- +goose Down
DROP INDEX documents_search_xid_idx;
ALTER TABLE documents DROP COLUMN search_xid;
DROP TABLE chunk_signatures;
DROP INDEX documents_current_key_idx;
DROP INDEX document_chunks_tags_idx;
DROP INDEX document_chunks_search_text_idx;
ALTER TABLE document_chunks DROP COLUMN search_text, DROP COLUMN text_config, DROP COLUMN embedding_model, DROP COLUMN embedding_dims;
