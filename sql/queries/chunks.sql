-- name: ChunkCountFailure :exec
-- ChunkCountFailure counts a failed run of a chunk's job (spec 004's
-- global retries), with its error.
UPDATE chunks SET global_retry_count = global_retry_count + 1, error = @error
WHERE batch_id = @batch_id AND phase = @phase AND chunk_id = @chunk_id;

-- name: ChunkCountOpen :one
-- ChunkCountOpen counts the chunks of a batch's phase that are not DONE or
-- ERROR (chunks_open_idx): zero means the phase's chunks are all terminal.
SELECT count(*) FROM chunks
WHERE batch_id = @batch_id AND phase = @phase AND state NOT IN ('DONE', 'ERROR');

-- name: ChunkDeleteByBatch :execrows
-- ChunkDeleteByBatch deletes up to max of a batch's chunks (retention),
-- once their items are gone.
DELETE FROM chunks
WHERE (batch_id, phase, chunk_id) IN (
    SELECT k.batch_id, k.phase, k.chunk_id FROM chunks k WHERE k.batch_id = @batch_id LIMIT @max);

-- name: ChunkGet :one
-- ChunkGet is a chunk with its counters, for spec 004's chunk status.
SELECT * FROM chunks
WHERE batch_id = @batch_id AND phase = @phase AND chunk_id = @chunk_id;

-- name: ChunkGetByID :one
-- ChunkGetByID is a batch's chunk by its id alone, as spec 004's chunk
-- status names it: the latest started, should two chunked phases have a
-- chunk of that id.
SELECT * FROM chunks
WHERE batch_id = @batch_id AND chunk_id = @chunk_id
ORDER BY started_at DESC NULLS LAST, phase
LIMIT 1;

-- name: ChunkInsertMany :copyfrom
INSERT INTO chunks (batch_id, phase, chunk_id, total_refs, skipped)
VALUES (@batch_id, @phase, @chunk_id, @total_refs, @skipped);

-- name: ChunkListByBatchPhase :many
SELECT * FROM chunks
WHERE batch_id = @batch_id AND phase = @phase
ORDER BY length(chunk_id), chunk_id;

-- name: ChunkListOpen :many
-- ChunkListOpen is the ids of a batch phase's chunks that are not
-- terminal: the chunks whose jobs must exist.
SELECT chunk_id FROM chunks
WHERE batch_id = @batch_id AND phase = @phase AND state NOT IN ('DONE', 'ERROR')
ORDER BY length(chunk_id), chunk_id;

-- name: ChunkReopen :execrows
-- ChunkReopen moves a chunk that ended ERROR with items still pending (a
-- provider that refused the key) back to PROCESSING, for an admin's retry.
UPDATE chunks c SET state = 'PROCESSING', error = NULL, finished_at = NULL
WHERE c.batch_id = @batch_id AND c.phase = @phase AND c.state = 'ERROR'
    AND EXISTS (SELECT 1 FROM chunk_items ci WHERE ci.batch_id = c.batch_id AND ci.phase = c.phase
        AND ci.chunk_id = c.chunk_id AND ci.status = 'pending');

-- name: ChunkSetState :execrows
-- ChunkSetState moves a chunk that is not terminal to state (spec 004's
-- chunk phase), stamping started_at on its first move and finished_at,
-- error and processing_time_ms when state is DONE or ERROR. A terminal
-- chunk is left as it is.
UPDATE chunks SET state = @state,
    started_at = coalesce(started_at, now()),
    finished_at = CASE WHEN @state IN ('DONE', 'ERROR') THEN now() END,
    error = coalesce(sqlc.narg(error), error),
    processing_time_ms = CASE WHEN @state IN ('DONE', 'ERROR')
        THEN (extract(epoch FROM now() - coalesce(started_at, now())) * 1000)::bigint ELSE processing_time_ms END
WHERE batch_id = @batch_id AND phase = @phase AND chunk_id = @chunk_id AND state NOT IN ('DONE', 'ERROR');

-- name: ChunkSummary :one
-- ChunkSummary is a batch phase's chunks and items by outcome, for the
-- batch's status.
SELECT count(*)::int AS chunks_total,
    (count(*) FILTER (WHERE state = 'DONE'))::int AS chunks_done,
    (count(*) FILTER (WHERE state = 'ERROR'))::int AS chunks_error,
    coalesce(sum(total_refs), 0)::int AS refs_total,
    coalesce(sum(completed), 0)::int AS refs_done,
    coalesce(sum(failed), 0)::int AS refs_failed,
    coalesce(sum(skipped), 0)::int AS refs_skipped
FROM chunks
WHERE batch_id = @batch_id AND phase = @phase;

-- name: ChunkSummaryByBatches :many
-- ChunkSummaryByBatches is ChunkSummary for each phase of several
-- batches at once (status, the dashboard's listing).
SELECT batch_id, phase, count(*)::int AS chunks_total,
    (count(*) FILTER (WHERE state = 'DONE'))::int AS chunks_done,
    (count(*) FILTER (WHERE state = 'ERROR'))::int AS chunks_error,
    coalesce(sum(total_refs), 0)::int AS refs_total,
    coalesce(sum(completed), 0)::int AS refs_done,
    coalesce(sum(failed), 0)::int AS refs_failed,
    coalesce(sum(skipped), 0)::int AS refs_skipped
FROM chunks
WHERE batch_id = ANY(@batch_ids::text[])
GROUP BY batch_id, phase;
