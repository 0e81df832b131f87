-- TaskCountByBatch counts a batch's tasks per phase and status; it is an
-- index-only scan of tasks_batch_phase_status_idx.
-- name: TaskCountByBatch :many
SELECT phase, status, count(*)::bigint AS count
FROM tasks
WHERE batch_id = @batch_id
GROUP BY phase, status;

-- name: TaskInsertMany :copyfrom
INSERT INTO tasks (id, batch_id, phase, file_id)
VALUES (@id, @batch_id, @phase, @file_id);
