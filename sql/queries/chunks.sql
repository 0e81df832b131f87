-- name: ChunkCountOpen :one
-- ChunkCountOpen counts the chunks of a batch's phase that are not DONE or
-- ERROR (chunks_open_idx): zero means the phase's chunks are all terminal.
SELECT count(*) FROM chunks
WHERE batch_id = @batch_id AND phase = @phase AND state NOT IN ('DONE', 'ERROR');

-- name: ChunkGet :one
-- ChunkGet is a chunk with its counters, for spec 004's chunk status.
SELECT * FROM chunks
WHERE batch_id = @batch_id AND phase = @phase AND chunk_id = @chunk_id;

-- name: ChunkInsertMany :copyfrom
INSERT INTO chunks (batch_id, phase, chunk_id, total_refs, skipped)
VALUES (@batch_id, @phase, @chunk_id, @total_refs, @skipped);

-- name: ChunkListByBatchPhase :many
SELECT * FROM chunks
WHERE batch_id = @batch_id AND phase = @phase
ORDER BY length(chunk_id), chunk_id;

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
