-- name: ChunkItemClaimPending :many
-- ChunkItemClaimPending claims up to max_items pending items of a chunk
-- whose backoff is over, lowest index first, setting them processing. SKIP LOCKED: concurrent
-- claimers of one chunk get disjoint items. The claim is a CTE so that it
-- runs once (a subquery may be rescanned and claim past the limit).
WITH claimed AS MATERIALIZED (
    SELECT p.batch_id, p.phase, p.chunk_id, p.item_index FROM chunk_items p
    WHERE p.batch_id = @batch_id AND p.phase = @phase AND p.chunk_id = @chunk_id AND p.status = 'pending' AND coalesce(p.not_before, '-infinity') <= now()
    ORDER BY p.item_index
    LIMIT @max_items
    FOR UPDATE SKIP LOCKED
)
UPDATE chunk_items i SET status = 'processing', updated_at = now()
FROM claimed
WHERE i.batch_id = claimed.batch_id AND i.phase = claimed.phase AND i.chunk_id = claimed.chunk_id
    AND i.item_index = claimed.item_index
RETURNING i.*;

-- name: ChunkItemCountInfraFailed :many
-- ChunkItemCountInfraFailed counts the failed items of the batches named
-- whose retries infrastructure spent (failure 'infrastructure'), per phase.
SELECT batch_id, phase, count(*) AS n FROM chunk_items
WHERE batch_id = ANY(@batch_ids::text[]) AND status = 'error' AND failure = 'infrastructure'
GROUP BY batch_id, phase;

-- name: ChunkItemDeleteByBatch :execrows
-- ChunkItemDeleteByBatch deletes up to max of a batch's chunk items
-- (retention: one short statement at a time).
DELETE FROM chunk_items
WHERE (batch_id, phase, chunk_id, item_index) IN (
    SELECT i.batch_id, i.phase, i.chunk_id, i.item_index FROM chunk_items i WHERE i.batch_id = @batch_id LIMIT @max);

-- ChunkItemDropUnfinished removes a DONE batch's items that were neither
-- done nor skipped (failed, or left pending by a chunk that stopped), and
-- uncounts them in their chunks: an admin retry reruns them as items of
-- new chunks (jobs.ResumeBatch). It returns the items' keys.
-- name: ChunkItemDropUnfinished :many
WITH items AS (
    DELETE FROM chunk_items ci
    WHERE ci.batch_id = @batch_id AND ci.status NOT IN ('done', 'skipped')
        AND (NOT @infra_only::boolean OR ci.status <> 'error' OR ci.failure = 'infrastructure')
    RETURNING ci.phase, ci.chunk_id, ci.status, ci.r2_key
), per_chunk AS (
    SELECT i.phase, i.chunk_id, count(*) AS n, count(*) FILTER (WHERE i.status = 'error') AS failed
    FROM items i GROUP BY i.phase, i.chunk_id
), counted AS (
    UPDATE chunks c SET total_refs = c.total_refs - per_chunk.n, failed = c.failed - per_chunk.failed
    FROM per_chunk
    WHERE c.batch_id = @batch_id AND c.phase = per_chunk.phase AND c.chunk_id = per_chunk.chunk_id
)
SELECT i.phase, i.r2_key FROM items i;

-- name: ChunkItemGroupResults :many
-- ChunkItemGroupResults is a chunk's outcome per directory group (spec
-- 004's per-PI results): its items by state, and the failed ones with the
-- file names and errors.
SELECT ci.directory_path,
    count(*) AS total,
    count(*) FILTER (WHERE ci.status = 'done') AS completed,
    count(*) FILTER (WHERE ci.status = 'error') AS failed,
    count(*) FILTER (WHERE ci.status = 'skipped') AS skipped,
    coalesce(jsonb_agg(jsonb_build_object('filename', f.file_name, 'error', ci.error) ORDER BY ci.item_index)
        FILTER (WHERE ci.status = 'error'), '[]')::jsonb AS failed_refs
FROM chunk_items ci
LEFT JOIN files f ON f.id = ci.file_id
WHERE ci.batch_id = @batch_id AND ci.phase = @phase AND ci.chunk_id = @chunk_id
GROUP BY ci.directory_path
ORDER BY min(ci.item_index);

-- name: ChunkItemInsertMany :copyfrom
INSERT INTO chunk_items (batch_id, phase, chunk_id, item_index, directory_path, file_id, r2_key, status, error)
VALUES (@batch_id, @phase, @chunk_id, @item_index, @directory_path, @file_id, @r2_key, @status, sqlc.narg(error));

-- name: ChunkItemListByBatchPhase :many
-- ChunkItemListByBatchPhase is up to max_items items of a batch's phase
-- after (after_chunk_id, after_item_index), in primary-key order (chunk
-- ids as text: "10" before "9"), so each page is a range of the key: the
-- phase's transform reads done items' published refs page by page.
SELECT * FROM chunk_items
WHERE batch_id = @batch_id AND phase = @phase
    AND (chunk_id, item_index) > (@after_chunk_id::text, @after_item_index::int)
ORDER BY chunk_id, item_index
LIMIT @max_items;

-- name: ChunkItemListFailedByBatchPhase :many
-- ChunkItemListFailedByBatchPhase is the first max_per_chunk failed items
-- of each chunk of a batch's phase, with their files' logical paths (the
-- r2_key when the file row is gone), for the dashboard. Only the narrow
-- columns are read.
SELECT ci.chunk_id, coalesce(f.logical_path, ci.r2_key)::text AS logical_path, coalesce(ci.error, '')::text AS error
FROM (
    SELECT c.chunk_id, c.item_index, c.file_id, c.r2_key, c.error,
        row_number() OVER (PARTITION BY c.chunk_id ORDER BY c.item_index) AS n
    FROM chunk_items c
    WHERE c.batch_id = @batch_id AND c.phase = @phase AND c.status = 'error'
) ci
LEFT JOIN files f ON f.id = ci.file_id
WHERE ci.n <= @max_per_chunk::bigint
ORDER BY ci.chunk_id, ci.item_index;

-- name: ChunkItemProgress :one
-- ChunkItemProgress is what is left of a chunk: its pending and processing
-- items, and when the first pending item may be claimed (NULL: now).
SELECT count(*) FILTER (WHERE status = 'pending') AS pending,
    count(*) FILTER (WHERE status = 'processing') AS processing,
    coalesce(min(coalesce(not_before, now())) FILTER (WHERE status = 'pending'), now())::timestamptz AS next_due,
    now()::timestamptz AS now
FROM chunk_items
WHERE batch_id = @batch_id AND phase = @phase AND chunk_id = @chunk_id AND status IN ('pending', 'processing');

-- name: ChunkItemReleaseClaims :execrows
-- ChunkItemReleaseClaims puts back the items of a chunk left processing by
-- a run of its job that ended without settling them (a crash, a timeout):
-- only one run of a chunk's job is under way at a time, so at the start of
-- a run every processing item is such a leftover. No retry is used.
UPDATE chunk_items SET status = 'pending', updated_at = now()
WHERE batch_id = @batch_id AND phase = @phase AND chunk_id = @chunk_id AND status = 'processing';

-- name: ChunkItemRequeueFailed :many
-- ChunkItemRequeueFailed puts a batch phase's failed items back to pending
-- with their retries restored, reopens their chunks (uncounting the
-- failures) and returns the chunks reopened. An admin's retry; the caller
-- holds the batch's exclusive fan-in lock.
WITH items AS (
    UPDATE chunk_items ci SET status = 'pending', retry_count = 0, error = NULL, not_before = NULL, failing_since = NULL, failure = NULL, updated_at = now()
    WHERE ci.batch_id = @batch_id AND ci.phase = @phase AND ci.status = 'error'
        AND (NOT @infra_only::boolean OR ci.failure = 'infrastructure')
    RETURNING ci.batch_id, ci.phase, ci.chunk_id
), per_chunk AS (
    SELECT i.batch_id, i.phase, i.chunk_id, count(*) AS n FROM items i GROUP BY i.batch_id, i.phase, i.chunk_id
)
UPDATE chunks c SET failed = c.failed - per_chunk.n, state = 'PROCESSING', error = NULL, finished_at = NULL
FROM per_chunk
WHERE c.batch_id = per_chunk.batch_id AND c.phase = per_chunk.phase AND c.chunk_id = per_chunk.chunk_id
RETURNING c.chunk_id, per_chunk.n::int AS requeued;

-- name: ChunkItemSetDone :execrows
-- ChunkItemSetDone records a processing item's outcome (its engine's
-- result, for the phase's transform) and counts it in its chunk, in one
-- statement so the counters always match the items. Like every ChunkItemSet query it moves only a processing
-- item: settling twice (a job retried after its commit) changes nothing.
WITH item AS (
    UPDATE chunk_items ci SET status = 'done', error = NULL, result = @result::jsonb, updated_at = now()
    WHERE ci.batch_id = @batch_id AND ci.phase = @phase AND ci.chunk_id = @chunk_id AND ci.item_index = @item_index
        AND ci.status = 'processing'
    RETURNING ci.batch_id, ci.phase, ci.chunk_id
)
UPDATE chunks c SET completed = c.completed + 1
FROM item WHERE c.batch_id = item.batch_id AND c.phase = item.phase AND c.chunk_id = item.chunk_id;

-- name: ChunkItemSetError :execrows
-- ChunkItemSetError fails a processing item for good and counts it.
WITH item AS (
    UPDATE chunk_items ci SET status = 'error', error = @error, failure = @failure::text, updated_at = now()
    WHERE ci.batch_id = @batch_id AND ci.phase = @phase AND ci.chunk_id = @chunk_id AND ci.item_index = @item_index
        AND ci.status = 'processing'
    RETURNING ci.batch_id, ci.phase, ci.chunk_id
)
UPDATE chunks c SET failed = c.failed + 1
FROM item WHERE c.batch_id = item.batch_id AND c.phase = item.phase AND c.chunk_id = item.chunk_id;

-- name: ChunkItemSetPending :execrows
-- ChunkItemSetPending puts a processing item back without using a retry:
-- back-pressure (a 429) or a job that stopped before sending it.
UPDATE chunk_items SET status = 'pending', updated_at = now()
WHERE batch_id = @batch_id AND phase = @phase AND chunk_id = @chunk_id AND item_index = @item_index
    AND status = 'processing';

-- name: ChunkItemSetRetry :execrows
-- ChunkItemSetRetry puts a processing item back after a transient error or
-- a 429 (provider.Retry), marking when it began failing in a row; a
-- transient one uses one of its retries (@counted). It is not claimed
-- again for backoff_secs.
UPDATE chunk_items SET status = 'pending', retry_count = retry_count + CASE WHEN @counted::boolean THEN 1 ELSE 0 END,
    error = @error, failing_since = coalesce(failing_since, now()), updated_at = now(),
    not_before = now() + make_interval(secs => @backoff_secs::float8)
WHERE batch_id = @batch_id AND phase = @phase AND chunk_id = @chunk_id AND item_index = @item_index
    AND status = 'processing';

-- name: ChunkItemSetSkipped :execrows
-- ChunkItemSetSkipped marks a processing item as needing no OCR and
-- counts it.
WITH item AS (
    UPDATE chunk_items ci SET status = 'skipped', error = @reason, updated_at = now()
    WHERE ci.batch_id = @batch_id AND ci.phase = @phase AND ci.chunk_id = @chunk_id AND ci.item_index = @item_index
        AND ci.status = 'processing'
    RETURNING ci.batch_id, ci.phase, ci.chunk_id
)
UPDATE chunks c SET skipped = c.skipped + 1
FROM item WHERE c.batch_id = item.batch_id AND c.phase = item.phase AND c.chunk_id = item.chunk_id;
