-- name: ChunkListByBatchPhase :many
SELECT * FROM chunks
WHERE batch_id = @batch_id AND phase = @phase
ORDER BY chunk_index;
