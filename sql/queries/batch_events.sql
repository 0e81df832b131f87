-- BatchEventDeleteByBatch deletes up to max of a batch's events, oldest
-- first (retention: one short statement at a time).
-- name: BatchEventDeleteByBatch :execrows
DELETE FROM batch_events
WHERE id IN (SELECT e.id FROM batch_events e WHERE e.batch_id = @batch_id ORDER BY e.id LIMIT @max);

-- name: BatchEventInsert :exec
INSERT INTO batch_events (batch_id, type, phase, task_id, data)
VALUES (@batch_id, @type, @phase, @task_id, @data);

-- name: BatchEventInsertMany :copyfrom
INSERT INTO batch_events (batch_id, type, phase, task_id, data)
VALUES (@batch_id, @type, @phase, @task_id, @data);

-- BatchEventLastID is the id of a batch's latest event, 0 when it has none:
-- where a live stream's shared reads begin.
-- name: BatchEventLastID :one
SELECT coalesce(max(id), 0)::bigint AS id FROM batch_events
WHERE batch_id = @batch_id;

-- BatchEventListByBatch pages through a batch's events in order, after a
-- cursor (0 for the start).
-- name: BatchEventListByBatch :many
SELECT * FROM batch_events
WHERE batch_id = @batch_id AND id > @after_id
ORDER BY id
LIMIT @max;

-- BatchEventPhaseSpans is when each phase of a batch first started and last
-- completed (NULL while it runs), in the order the phases started: the
-- dashboard's timeline. @started and @completed are the events' types
-- (db.EventPhaseStarted, db.EventPhaseCompleted).
-- name: BatchEventPhaseSpans :many
SELECT s.phase::text AS phase, s.created_at AS started_at, c.created_at AS completed_at
FROM batch_events s
LEFT JOIN batch_events c ON c.id = (
    SELECT max(e.id) FROM batch_events e
    WHERE e.batch_id = s.batch_id AND e.type = @completed::text AND e.phase = s.phase
)
WHERE s.id IN (
    SELECT min(b.id) FROM batch_events b
    WHERE b.batch_id = @batch_id AND b.type = @started::text AND b.phase IS NOT NULL
    GROUP BY b.phase
)
ORDER BY s.id;
