-- name: DocumentBatchHasOpen :one
-- Whether a document of the batch's files of generation is still running:
-- the DOCUMENT_INDEXING phase's open "tasks".
SELECT EXISTS (
    SELECT 1 FROM documents d JOIN files f ON f.id = d.file_id
    WHERE d.batch_id = @batch_id AND f.batch_id = @batch_id AND f.generation = @generation
      AND d.status IN ('not_started', 'processing')
);

-- name: DocumentBatchListAbandoned :many
-- The running documents of a batch's phase (generation) whose step job
-- River has given up on (discarded: its attempts spent, or cancelled):
-- no run will end them, so the sweep fails them. A document whose job is
-- missing altogether is not here: its job is enqueued again
-- (EnsureDocumentJobs).
SELECT d.id, d.resumes, j.state::text AS job_state, j.id AS job_id FROM documents d
JOIN files f ON f.id = d.file_id
JOIN LATERAL (
    SELECT r.id, r.state FROM river_job r
    WHERE r.kind = 'document_step' AND r.args @> jsonb_build_object('document_id', d.id)
    ORDER BY r.id DESC LIMIT 1
) j ON true
WHERE d.batch_id = @batch_id AND f.batch_id = @batch_id AND f.generation = @generation
  AND d.status IN ('not_started', 'processing') AND j.state IN ('discarded', 'cancelled')
ORDER BY d.id;

-- name: DocumentBatchListFailedKeys :many
-- The keys of a batch's failed documents (with infra_only, those that
-- failed for infrastructure reasons), whose files an admin retry of the
-- DONE batch reruns (jobs.ResumeBatch).
SELECT r2_key FROM documents WHERE batch_id = @batch_id AND status = 'failed'
    AND (NOT @infra_only::boolean OR failure = 'infrastructure');

-- name: DocumentBatchListOpen :many
-- The running documents of a batch's phase (generation), for the sweep's
-- backstop and a retry to make sure each has its job.
SELECT d.id, d.resumes FROM documents d JOIN files f ON f.id = d.file_id
WHERE d.batch_id = @batch_id AND f.batch_id = @batch_id AND f.generation = @generation
  AND d.status IN ('not_started', 'processing')
ORDER BY d.id;

-- name: DocumentBatchResume :many
-- The batch's failed documents of these keys, for its DOCUMENT_INDEXING
-- phase run again after an admin retry of the DONE batch: each now indexes
-- the file given (of the phase's generation), from the step that failed
-- (from download when its source changed), with its retries anew, as
-- DocumentRetry resumes one.
UPDATE documents d SET status = 'processing', retry_count = 0, failing_since = NULL, resumes = d.resumes + 1, failed_at = NULL, failure = NULL,
    file_id = k.file_id, source = k.source,
    current_step = CASE WHEN d.source IS DISTINCT FROM k.source THEN 'download' ELSE d.current_step END,
    updated_at = now()
FROM (SELECT unnest(@r2_keys::text[]) AS r2_key, unnest(@file_ids::bigint[]) AS file_id,
             unnest(@sources::jsonb[]) AS source) k
WHERE d.batch_id = @batch_id AND d.status = 'failed' AND d.r2_key = k.r2_key
    AND d.version = (SELECT max(l.version) FROM documents l WHERE l.r2_key = d.r2_key)
RETURNING d.id, d.resumes, d.r2_key;

-- name: DocumentBatchRetryFailed :many
-- The failed documents of a batch's phase (generation) resume from the
-- step that failed, with their retries anew: an admin retry of the batch
-- (with infra_only, of those that failed for infrastructure reasons).
UPDATE documents d SET status = 'processing', retry_count = 0, failing_since = NULL, resumes = d.resumes + 1, failed_at = NULL, failure = NULL, updated_at = now()
FROM files f
WHERE f.id = d.file_id AND d.batch_id = @batch_id AND f.batch_id = @batch_id AND f.generation = @generation
    AND d.status = 'failed' AND (NOT @infra_only::boolean OR d.failure = 'infrastructure')
RETURNING d.id, d.resumes;

-- name: DocumentBatchSummary :one
-- A batch's documents by status, for its status document. A batch has one
-- document per key: a phase run again after an admin retry of the DONE
-- batch resumes its failed documents (DocumentBatchResume) rather than
-- making new ones, and its completed ones' files are not indexed again.
SELECT count(*)::int AS total,
       count(*) FILTER (WHERE status = 'completed')::int AS completed,
       count(*) FILTER (WHERE status = 'failed')::int AS failed,
       count(*) FILTER (WHERE status = 'failed' AND failure = 'infrastructure')::int AS failed_infrastructure
FROM documents d
WHERE d.batch_id = @batch_id;

-- name: DocumentBatchSummaryMany :many
-- DocumentBatchSummary for several batches at once (status, the
-- dashboard's listing).
SELECT d.batch_id::text AS batch_id, count(*)::int AS total,
       count(*) FILTER (WHERE status = 'completed')::int AS completed,
       count(*) FILTER (WHERE status = 'failed')::int AS failed,
       count(*) FILTER (WHERE status = 'failed' AND failure = 'infrastructure')::int AS failed_infrastructure
FROM documents d
WHERE d.batch_id = ANY(@batch_ids::text[])
GROUP BY d.batch_id;

-- name: DocumentChunkInsertMany :copyfrom
INSERT INTO document_chunks (document_id, chunk_index, text, heading, tokens, first_page, last_page)
VALUES (@document_id, @chunk_index, @text, @heading, @tokens, @first_page, @last_page);

-- name: DocumentChunkList :many
-- The first chunks of a document for the dashboard, each with the start of
-- its text, and how many chunks it has.
SELECT chunk_index, heading, tokens, status, tags, left(text, @excerpt_chars::int)::text AS excerpt,
    count(*) OVER () AS total
FROM document_chunks
WHERE document_id = @document_id
ORDER BY chunk_index
LIMIT @max;

-- name: DocumentChunkSetEmbedding :exec
-- Stores a chunk's vector with its embedder's identity, and the vector's
-- signature (chunk_signatures, search.Signature), which search's vector
-- candidates come from, and its quantised form (chunk_vectors,
-- search.Quantise), which search ranks them by.
WITH c AS (
    UPDATE document_chunks u SET embedding = @embedding::real[], embedding_model = @embedding_model::text,
        embedding_dims = @embedding_dims::int, status = 'embedding_done'
    WHERE u.document_id = @document_id::bigint AND u.chunk_index = @chunk_index::int AND u.status = 'pending'
    RETURNING u.document_id, u.chunk_index
), s AS (
    INSERT INTO chunk_signatures (document_id, chunk_index, embedding_model, embedding_dims, signature)
    SELECT c.document_id, c.chunk_index, @embedding_model::text, @embedding_dims::int, @signature::bit varying FROM c
    ON CONFLICT (document_id, chunk_index) DO UPDATE SET embedding_model = excluded.embedding_model,
        embedding_dims = excluded.embedding_dims, signature = excluded.signature
)
INSERT INTO chunk_vectors (document_id, chunk_index, embedding_model, embedding_dims, quantised)
SELECT c.document_id, c.chunk_index, @embedding_model::text, @embedding_dims::int, @quantised::bytea FROM c
ON CONFLICT (document_id, chunk_index) DO UPDATE SET embedding_model = excluded.embedding_model,
    embedding_dims = excluded.embedding_dims, quantised = excluded.quantised;

-- name: DocumentChunkSetTags :exec
UPDATE document_chunks SET tags = @tags::text[], status = 'tags_done'
WHERE document_id = @document_id AND chunk_index = @chunk_index AND status = 'embedding_done';

-- name: DocumentChunkTags :many
SELECT chunk_index, text, tags FROM document_chunks WHERE document_id = @document_id ORDER BY chunk_index;

-- name: DocumentChunksDelete :exec
DELETE FROM document_chunks WHERE document_id = @document_id;

-- name: DocumentChunksInStatus :many
-- The next chunks a step works on, in order.
SELECT chunk_index, text, heading FROM document_chunks
WHERE document_id = @document_id AND status = @status
ORDER BY chunk_index LIMIT @max_chunks;

-- name: DocumentChunksMove :exec
-- Moves the chunks of one version to another (unchanged content).
UPDATE document_chunks SET document_id = @to_id WHERE document_id = @from_id;

-- name: DocumentChunksSetSearchText :exec
-- Writes the full-text search vector of a document's chunks (their heading
-- and text) as the text search configuration text_config parses them.
UPDATE document_chunks SET search_text = to_tsvector(@text_config::regconfig, heading || ' ' || text), text_config = @text_config::text
WHERE document_id = @document_id;

-- name: DocumentChunksStored :exec
UPDATE document_chunks SET status = 'stored' WHERE document_id = @document_id;

-- name: DocumentComplete :exec
-- The store step: the version becomes the key's current one, its chunks
-- stored, in the transaction that unmarks the previous one.
UPDATE documents SET status = 'completed', current = true, search_xid = pg_current_xact_id(), processed_chunks = total_chunks,
    completed_at = now(), updated_at = now()
WHERE id = @id;

-- name: DocumentCountProcessed :exec
-- processed_chunks counts the chunks done with the current step.
UPDATE documents SET processed_chunks = (
    SELECT count(*) FROM document_chunks c WHERE c.document_id = @id AND c.status = ANY(@done::text[])
), updated_at = now()
WHERE id = @id;

-- name: DocumentCurrentBySHA :one
-- The key's current version, if its content hashes as sha.
SELECT * FROM documents WHERE r2_key = @r2_key AND current AND content_sha256 = @content_sha256;

-- name: DocumentDownloaded :exec
-- The download step's outcome: the content's hash and its chunks' count;
-- the next step is embeddings.
UPDATE documents SET content_sha256 = @content_sha256, size_bytes = @size_bytes, total_chunks = @total_chunks,
    processed_chunks = 0, current_step = 'embeddings', updated_at = now()
WHERE id = @id;

-- name: DocumentGet :one
SELECT * FROM documents WHERE id = @id;

-- name: DocumentGetForUpdate :one
SELECT * FROM documents WHERE id = @id FOR NO KEY UPDATE;

-- name: DocumentInsert :one
INSERT INTO documents (r2_key, version, etag, size_bytes, batch_id, file_id)
VALUES (@r2_key, COALESCE((SELECT max(version) FROM documents WHERE r2_key = @r2_key), 0) + 1,
        @etag, @size_bytes, @batch_id, @file_id)
RETURNING *;

-- name: DocumentInsertBatch :many
-- The documents of a batch's DOCUMENT_INDEXING phase, one per indexed
-- file. A batch's keys lie under its own staging prefix, and the batch's
-- transitions are serialised by its fan-in lock, so no other request
-- makes versions of these keys meanwhile (DocumentLockKey is not needed;
-- thousands of advisory locks in one transaction would fill the lock
-- table). Each key appears once in a call.
INSERT INTO documents (r2_key, version, batch_id, file_id, source)
SELECT k.r2_key, COALESCE((SELECT max(version) FROM documents d WHERE d.r2_key = k.r2_key), 0) + 1,
       @batch_id::text, k.file_id, k.source
FROM (SELECT unnest(@r2_keys::text[]) AS r2_key, unnest(@file_ids::bigint[]) AS file_id,
             unnest(@sources::jsonb[]) AS source) k
RETURNING id;

-- name: DocumentLatest :one
SELECT * FROM documents WHERE r2_key = @r2_key ORDER BY version DESC LIMIT 1;

-- name: DocumentLatestETags :many
-- The ETag of each key's latest version, for the keys that have one.
SELECT DISTINCT ON (r2_key) r2_key, etag FROM documents
WHERE r2_key = ANY(@r2_keys::text[])
ORDER BY r2_key, version DESC;

-- name: DocumentList :many
SELECT * FROM documents ORDER BY id DESC LIMIT @max_rows;

-- name: DocumentListAbandoned :many
-- Up to @max documents posted through the API (no batch) that are still
-- running while their step job River has given up on (discarded or
-- cancelled): no run will end them, so the sweep fails them.
SELECT d.id, d.resumes, j.state::text AS job_state, j.id AS job_id FROM documents d
JOIN LATERAL (
    SELECT r.id, r.state FROM river_job r
    WHERE r.kind = 'document_step' AND r.args @> jsonb_build_object('document_id', d.id)
    ORDER BY r.id DESC LIMIT 1
) j ON true
WHERE d.batch_id IS NULL AND d.status IN ('not_started', 'processing') AND j.state IN ('discarded', 'cancelled')
ORDER BY d.id
LIMIT @max;

-- name: DocumentListPage :many
-- A page of the dashboard's listing, newest first, optionally of one
-- status and of one batch: before_id is the last id of the previous page
-- (keyset paging, so documents added meanwhile never shift the pages
-- after it).
SELECT * FROM documents
WHERE (sqlc.narg(status)::text IS NULL OR status = sqlc.narg(status)::text)
    AND (sqlc.narg(batch_id)::text IS NULL OR batch_id = sqlc.narg(batch_id)::text)
    AND (sqlc.narg(before_id)::bigint IS NULL OR id < sqlc.narg(before_id)::bigint)
ORDER BY id DESC
LIMIT @max;

-- name: DocumentLockKey :exec
-- Serialises the versions of one key: two requests for a key at once make
-- one version.
SELECT pg_advisory_xact_lock(hashtextextended('document:' || @r2_key::text, 0));

-- name: DocumentMarkFailing :exec
-- Marks when the document began failing in a row (a 429, which is not
-- in its history), unless it already is.
UPDATE documents SET failing_since = now() WHERE id = @id AND failing_since IS NULL;

-- name: DocumentNoteError :exec
-- Appends an error of the current step to the history without failing
-- the document or counting a retry: a part of the step given up (the tags
-- of some chunks) while the document goes on.
UPDATE documents SET errors = errors || jsonb_build_array(jsonb_build_object(
        'step', current_step, 'error', @error::text, 'timestamp', to_char(now() AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"'))),
    updated_at = now()
WHERE id = @id;

-- name: DocumentRecordError :one
-- Appends an error to the history and marks when the document began
-- failing in a row; with fail the document ends failed, for failure's
-- reason ('permanent' or 'infrastructure'), else counted says whether the
-- retry uses one of its retries (a 429's does not).
UPDATE documents SET errors = errors || jsonb_build_array(jsonb_build_object(
        'step', current_step, 'error', @error::text, 'timestamp', to_char(now() AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"'))),
    retry_count = retry_count + CASE WHEN NOT @fail::boolean AND @counted::boolean THEN 1 ELSE 0 END,
    failing_since = coalesce(failing_since, now()),
    status = CASE WHEN @fail::boolean THEN 'failed' ELSE status END,
    failed_at = CASE WHEN @fail::boolean THEN now() ELSE failed_at END,
    failure = CASE WHEN @fail::boolean THEN nullif(@failure::text, '') ELSE failure END,
    updated_at = now()
WHERE id = @id
RETURNING *;

-- name: DocumentRecordStepRun :one
-- Records a run of step in step_timing (see the column) and returns the
-- step's entry; finished says the run finished the step, ok that it did
-- its work (the document is no longer failing).
UPDATE documents SET failing_since = CASE WHEN @ok::boolean THEN NULL ELSE failing_since END, step_timing = step_timing || jsonb_build_object(@step::text, jsonb_build_object(
        'startedAt', COALESCE(step_timing -> @step::text -> 'startedAt', to_jsonb(@started_at::timestamptz)),
        'completedAt', CASE WHEN @finished::boolean THEN to_jsonb(@ended_at::timestamptz) END,
        'runs', COALESCE((step_timing -> @step::text ->> 'runs')::integer, 0) + 1,
        'workMs', round(COALESCE((step_timing -> @step::text ->> 'workMs')::numeric, 0) + (@work_ms::float8)::numeric, 1)))
WHERE id = @id
RETURNING (step_timing -> @step::text)::jsonb AS timing;

-- name: DocumentRetry :one
-- Resumes a failed document from the step that failed, with its retries
-- anew.
UPDATE documents SET status = 'processing', retry_count = 0, failing_since = NULL, resumes = resumes + 1, failed_at = NULL, failure = NULL, updated_at = now()
WHERE id = @id AND status = 'failed'
RETURNING *;

-- name: DocumentScanAdvance :exec
-- Records a page of the scan of prefix handled: after is its last key,
-- queued how many documents it queued.
UPDATE document_scans SET after = @after, queued = queued + @queued, updated_at = now() WHERE prefix = @prefix;

-- name: DocumentScanEnd :exec
-- Ends a pass of the scan of prefix: the next starts from the first key.
UPDATE document_scans SET after = '', passes = passes + 1, last_pass_at = now(), updated_at = now() WHERE prefix = @prefix;

-- name: DocumentScanGet :one
-- The scan of prefix, made the first time.
INSERT INTO document_scans (prefix) VALUES (@prefix)
ON CONFLICT (prefix) DO UPDATE SET prefix = EXCLUDED.prefix
RETURNING *;

-- name: DocumentSearchChanged :many
-- The versions made current or not current by transactions from since
-- on (an xid8, as DocumentSearchXmin gives it), for an in-memory index
-- to bring itself in step.
SELECT id, current FROM documents WHERE search_xid >= (@since::bigint)::text::xid8 ORDER BY id;

-- name: DocumentSearchChunks :many
-- What a page of search results shows of its chunks (document and chunk
-- indexes, in pairs), in no order.
SELECT c.document_id, d.r2_key, c.chunk_index, c.text, c.tags, c.first_page, c.last_page
FROM (SELECT unnest(@document_ids::bigint[]) AS document_id, unnest(@chunk_indexes::int[]) AS chunk_index) k
JOIN document_chunks c ON c.document_id = k.document_id AND c.chunk_index = k.chunk_index
JOIN documents d ON d.id = c.document_id;

-- name: DocumentSearchHasSignatures :one
-- Whether any chunk has a vector of the embedder, so that a search that
-- found no vector candidate can say why.
SELECT EXISTS (SELECT 1 FROM chunk_signatures WHERE embedding_model = @embedding_model AND embedding_dims = @embedding_dims);

-- name: DocumentSearchReindexNext :many
-- The next chunks of current versions whose vectors are not the
-- embedder's (another model or size, or none known), locked for the
-- re-index that embeds them again; those locked by another are skipped.
-- Chunks still pending are the document steps'.
SELECT c.document_id, c.chunk_index, c.heading, c.text
FROM document_chunks c JOIN documents d ON d.id = c.document_id
WHERE d.current AND c.status <> 'pending'
    AND (c.embedding_model IS DISTINCT FROM @embedding_model::text OR c.embedding_dims IS DISTINCT FROM @embedding_dims::int)
ORDER BY c.document_id, c.chunk_index
LIMIT @max
FOR UPDATE OF c SKIP LOCKED;

-- name: DocumentSearchReindexProgress :one
-- How many chunks of current versions search reads, and how many of them
-- have a vector of the embedder and search text of the configuration.
SELECT count(*) AS chunks,
    count(*) FILTER (WHERE c.embedding_model = @embedding_model::text AND c.embedding_dims = @embedding_dims::int
        AND c.text_config = @text_config::text) AS done
FROM document_chunks c JOIN documents d ON d.id = c.document_id
WHERE d.current AND c.status <> 'pending';

-- name: DocumentSearchReindexText :execrows
-- Parses again the text of the next chunks (at most max) of current versions written
-- under another text search configuration.
UPDATE document_chunks u SET search_text = to_tsvector(CAST(@text_config::text AS regconfig), u.heading || ' ' || u.text), text_config = @text_config::text
FROM (
    SELECT c.document_id, c.chunk_index FROM document_chunks c JOIN documents d ON d.id = c.document_id
    WHERE d.current AND c.text_config IS DISTINCT FROM @text_config::text
    LIMIT @max
    FOR UPDATE OF c SKIP LOCKED
) k
WHERE u.document_id = k.document_id AND u.chunk_index = k.chunk_index;

-- name: DocumentSearchReindexVector :exec
-- Replaces a chunk's vector with the embedder's, and its signature and
-- quantised form; the version is marked changed (search_xid) so that
-- in-memory indexes read its signatures again.
WITH c AS (
    UPDATE document_chunks u SET embedding = @embedding::real[], embedding_model = @embedding_model::text, embedding_dims = @embedding_dims::int
    WHERE u.document_id = @document_id::bigint AND u.chunk_index = @chunk_index::int
    RETURNING u.document_id, u.chunk_index
), s AS (
    INSERT INTO chunk_signatures (document_id, chunk_index, embedding_model, embedding_dims, signature)
    SELECT c.document_id, c.chunk_index, @embedding_model::text, @embedding_dims::int, @signature::bit varying FROM c
    ON CONFLICT (document_id, chunk_index) DO UPDATE SET embedding_model = excluded.embedding_model,
        embedding_dims = excluded.embedding_dims, signature = excluded.signature
), v AS (
    INSERT INTO chunk_vectors (document_id, chunk_index, embedding_model, embedding_dims, quantised)
    SELECT c.document_id, c.chunk_index, @embedding_model::text, @embedding_dims::int, @quantised::bytea FROM c
    ON CONFLICT (document_id, chunk_index) DO UPDATE SET embedding_model = excluded.embedding_model,
        embedding_dims = excluded.embedding_dims, quantised = excluded.quantised
)
UPDATE documents SET search_xid = pg_current_xact_id() WHERE id = @document_id::bigint;

-- name: DocumentSearchSignatureScan :many
-- The vector candidates of a search by a scan of the signatures: the
-- chunks of current versions passing the filters (as
-- DocumentSearchText's) whose vectors' signatures are nearest the
-- query's signature (Hamming distance). It reads every signature the filters leave,
-- so a process uses it for filtered searches and until its in-memory index
-- is loaded.
SELECT s.document_id, s.chunk_index
FROM chunk_signatures s JOIN documents d ON d.id = s.document_id
WHERE d.current AND s.embedding_model = @embedding_model::text AND s.embedding_dims = @embedding_dims::int
    AND (sqlc.narg(batch_id)::text IS NULL OR d.batch_id = sqlc.narg(batch_id)::text)
    AND (@key_pattern::text = '' OR d.r2_key LIKE @key_pattern::text)
    AND (cardinality(@tags::text[]) = 0 OR EXISTS (SELECT 1 FROM document_chunks c
        WHERE c.document_id = s.document_id AND c.chunk_index = s.chunk_index AND c.tags @> @tags::text[]))
ORDER BY bit_count(s.signature # @signature::bit varying), s.document_id, s.chunk_index
LIMIT @max;

-- name: DocumentSearchSignatures :many
-- The signatures of the embedder's vectors of these versions' chunks.
SELECT document_id, chunk_index, signature FROM chunk_signatures
WHERE document_id = ANY(@document_ids::bigint[]) AND embedding_model = @embedding_model AND embedding_dims = @embedding_dims;

-- name: DocumentSearchSignaturesPage :many
-- A page of the signatures of the embedder's vectors of current versions'
-- chunks, after the chunk (after_document, after_chunk), in key order:
-- what an in-memory index loads.
SELECT s.document_id, s.chunk_index, s.signature
FROM chunk_signatures s JOIN documents d ON d.id = s.document_id
WHERE d.current AND s.embedding_model = @embedding_model AND s.embedding_dims = @embedding_dims
    AND (s.document_id, s.chunk_index) > (@after_document::bigint, @after_chunk::int)
ORDER BY s.document_id, s.chunk_index
LIMIT @max;

-- name: DocumentSearchText :many
-- The full-text candidates of a search: chunks of current versions
-- passing the filters (the batch, the key pattern, a LIKE prefix pattern
-- or '' for any key, and tags the chunk carries) that match the query
-- (websearch_to_tsquery: words, "quoted phrases", or, -excluded), the
-- first scan of them ranked by ts_rank_cd, best first: a bound on the
-- work a query of common words does.
SELECT m.document_id, m.chunk_index FROM (
    SELECT c.document_id, c.chunk_index, c.search_text
    FROM document_chunks c JOIN documents d ON d.id = c.document_id
    WHERE c.search_text @@ websearch_to_tsquery(@text_config::regconfig, @query::text) AND d.current
        AND (sqlc.narg(batch_id)::text IS NULL OR d.batch_id = sqlc.narg(batch_id)::text)
        AND (@key_pattern::text = '' OR d.r2_key LIKE @key_pattern::text)
        AND (cardinality(@tags::text[]) = 0 OR c.tags @> @tags::text[])
    LIMIT @scan
) m
ORDER BY ts_rank_cd(m.search_text, websearch_to_tsquery(@text_config::regconfig, @query::text)) DESC, m.document_id, m.chunk_index
LIMIT @max;

-- name: DocumentSearchVectors :many
-- The candidates of a search (document and chunk indexes, in pairs; the
-- full-text and signature queries applied its filters) that are still
-- chunks of current versions, each with its vector quantised
-- (chunk_vectors) when the embedder's (model and dimensions) made it, else
-- none: a search never compares another's. Where a binary that did not
-- quantise wrote the vector, the vector itself comes instead, in the
-- array's binary form (array_send), which search decodes.
SELECT k.document_id::bigint AS document_id, k.chunk_index::int AS chunk_index,
    (CASE WHEN v.embedding_model = @embedding_model::text AND v.embedding_dims = @embedding_dims::int THEN v.quantised END)::bytea AS quantised,
    (CASE WHEN v.quantised IS NULL AND @with_vectors::bool
        THEN (SELECT array_send(c.embedding) FROM document_chunks c WHERE c.document_id = k.document_id AND c.chunk_index = k.chunk_index
            AND c.embedding_model = @embedding_model::text AND c.embedding_dims = @embedding_dims::int)
    END)::bytea AS embedding
FROM (SELECT unnest(@document_ids::bigint[]) AS document_id, unnest(@chunk_indexes::int[]) AS chunk_index) k
JOIN documents d ON d.id = k.document_id AND d.current
LEFT JOIN chunk_vectors v ON v.document_id = k.document_id AND v.chunk_index = k.chunk_index;

-- name: DocumentSearchXmin :one
-- The oldest transaction still running (pg_snapshot_xmin), taken before an
-- in-memory index reads what changed: any that commits later has an xid at
-- least this one.
SELECT pg_snapshot_xmin(pg_current_snapshot())::text::bigint AS xmin;

-- name: DocumentSetStep :exec
-- Moves the document on to its next step, none of whose chunks is done
-- yet (processed_chunks counts the current step's).
UPDATE documents SET current_step = @current_step, processed_chunks = 0, updated_at = now() WHERE id = @id;

-- name: DocumentSetTags :exec
UPDATE documents SET document_tags = @document_tags::text[], current_step = 'store', processed_chunks = 0, updated_at = now() WHERE id = @id;

-- name: DocumentStart :exec
UPDATE documents SET status = 'processing', started_at = COALESCE(started_at, now()), updated_at = now()
WHERE id = @id;

-- name: DocumentUncurrent :exec
UPDATE documents SET current = false, search_xid = pg_current_xact_id(), updated_at = now() WHERE r2_key = @r2_key AND current AND id <> @id;
