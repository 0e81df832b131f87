-- name: BatchEventInsert :exec
INSERT INTO batch_events (batch_id, type, phase, task_id, data)
VALUES (@batch_id, @type, @phase, @task_id, @data);

-- BatchEventListByBatch pages through a batch's events in order, after a
-- cursor (0 for the start).
-- name: BatchEventListByBatch :many
SELECT * FROM batch_events
WHERE batch_id = @batch_id AND id > @after_id
ORDER BY id
LIMIT @max;

-- name: BatchEventInsertMany :copyfrom
INSERT INTO batch_events (batch_id, type, phase, task_id, data)
VALUES (@batch_id, @type, @phase, @task_id, @data);
