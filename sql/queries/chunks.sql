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
