-- +goose Up

-- chunk_vectors holds each chunk's vector quantised to a byte a component
-- (search.Quantise: each component over the largest one's magnitude, times
-- 127, rounded half to even, as a signed byte), which a search ranks its
-- candidates by: a narrow row sent as it is stored (dims bytes), where the
-- chunk's real[] is sent a component at a time and, for dense vectors of
-- 1,536 dimensions, kept out of line. The cosine it gives is within about
-- 0.001 of the exact one. It is a table of its own, not a column of
-- chunk_signatures, whose full scans (the in-memory index's load, filtered
-- searches) it would make six times longer. A chunk whose signature a
-- binary without it wrote has no row here: search then reads the vector
-- itself.
CREATE TABLE chunk_vectors (
    document_id     bigint  NOT NULL,
    chunk_index     integer NOT NULL,
    embedding_model text    NOT NULL,
    embedding_dims  integer NOT NULL,
    quantised       bytea   NOT NULL,
    PRIMARY KEY (document_id, chunk_index),
    FOREIGN KEY (document_id, chunk_index) REFERENCES document_chunks (document_id, chunk_index)
        ON DELETE CASCADE ON UPDATE CASCADE
);

INSERT INTO chunk_vectors (document_id, chunk_index, embedding_model, embedding_dims, quantised)
SELECT c.document_id, c.chunk_index, c.embedding_model, c.embedding_dims, coalesce(q.bytes, '\x'::bytea)
FROM document_chunks c, LATERAL (
    SELECT decode(string_agg(lpad(to_hex(coalesce(round(u.x::float8 * 127 / nullif(m.top, 0))::int, 0) & 255), 2, '0'), '' ORDER BY u.i), 'hex') AS bytes
    FROM (SELECT max(abs(y::float8)) AS top FROM unnest(c.embedding) y) m, unnest(c.embedding) WITH ORDINALITY u(x, i)
) q
WHERE c.embedding IS NOT NULL AND c.embedding_model IS NOT NULL AND c.embedding_dims IS NOT NULL;

-- +goose Down
DROP TABLE chunk_vectors;
