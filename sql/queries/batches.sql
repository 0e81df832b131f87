-- BatchListStalled is the sweep's backstop: running batches not touched for
-- a while, with whether their phase still has pending or open tasks. A
-- phase with no open task should have transitioned; one with pending tasks
-- should have a launcher.
-- name: BatchListStalled :many
SELECT b.id, b.phase::text AS phase,
    EXISTS (SELECT 1 FROM tasks t WHERE t.batch_id = b.id AND t.phase = b.phase AND t.status = 'pending') AS has_pending,
    EXISTS (SELECT 1 FROM tasks t WHERE t.batch_id = b.id AND t.phase = b.phase AND t.status IN ('pending', 'processing')) AS has_open
FROM batches b
WHERE b.completed_at IS NULL AND b.phase IS NOT NULL AND b.status = b.phase AND b.updated_at < @before
ORDER BY b.updated_at, b.id
LIMIT @max;

-- name: BatchGetByID :one
SELECT * FROM batches WHERE id = $1;

-- BatchGetByIDForUpdate locks the batch row against other writers of it.
-- FOR NO KEY UPDATE, not FOR UPDATE: we never change the key, and the weaker
-- lock does not block the FOR KEY SHARE that every insert referencing the
-- batch (events, files, tasks) takes for its foreign key, so callbacks never
-- queue behind a transition on the batch row.
-- name: BatchGetByIDForUpdate :one
SELECT * FROM batches WHERE id = $1 FOR NO KEY UPDATE;

-- BatchIngestRecord records one attempt at delivering the final manifest.
-- name: BatchIngestRecord :exec
UPDATE batches
SET ingest_status = @ingest_status, ingest_attempts = ingest_attempts + 1, ingest_last_error = @last_error,
    ingest_delivered_at = CASE WHEN @ingest_status = 'delivered' THEN clock_timestamp() ELSE ingest_delivered_at END,
    updated_at = clock_timestamp()
WHERE id = @id;

-- BatchInsert inserts a new batch; on a repeat of the same id it inserts
-- nothing and returns no row, which is how intake stays idempotent.
-- name: BatchInsert :one
INSERT INTO batches (id, uploader, queue_message)
VALUES (@id, @uploader, @queue_message)
ON CONFLICT (id) DO NOTHING
RETURNING *;

-- BatchPhaseRetry counts one more phase-level failure and returns the count.
-- name: BatchPhaseRetry :one
UPDATE batches SET phase_retry_count = phase_retry_count + 1, updated_at = clock_timestamp()
WHERE id = @id
RETURNING phase_retry_count;

-- name: BatchPhaseRetryReset :exec
UPDATE batches SET phase_retry_count = 0 WHERE id = @id AND phase_retry_count <> 0;

-- BatchSetDone finishes a running batch with its final file generation and
-- queues delivery to ingest; a batch already DONE or ERROR is left as it is
-- (no row is returned).
-- name: BatchSetDone :one
UPDATE batches
SET status = 'DONE', generation = @generation, error = NULL, ingest_status = 'pending',
    completed_at = clock_timestamp(), updated_at = clock_timestamp()
WHERE id = @id AND status NOT IN ('DONE', 'ERROR')
RETURNING *;

-- BatchSetError stops a batch that is not finished yet with a message; a
-- batch already DONE or ERROR is left as it is (no row is returned).
-- name: BatchSetError :one
UPDATE batches
SET status = 'ERROR', error = @error, completed_at = clock_timestamp(), updated_at = clock_timestamp()
WHERE id = @id AND status NOT IN ('DONE', 'ERROR')
RETURNING *;

-- BatchSetPhase moves a running batch into a phase whose tasks exist, with the
-- file generation that phase works on.
-- name: BatchSetPhase :one
UPDATE batches
SET status = @phase, phase = @phase, generation = @generation,
    phase_retry_count = 0, updated_at = clock_timestamp()
WHERE id = @id AND status NOT IN ('DONE', 'ERROR')
RETURNING *;

-- BatchTouch marks the batches the backstop looked at, so its next runs
-- look at the others first (it takes the least recently touched).
-- name: BatchTouch :exec
UPDATE batches SET updated_at = clock_timestamp() WHERE id = ANY(@ids::text[]);

-- BatchLockExclusive and BatchLockShared are the fan-in guard (design.md):
-- every transaction that ends a task of a batch holds the shared lock while
-- it updates the task and enqueues phase_check; phase_check holds the
-- exclusive lock while it counts open tasks and transitions. So a check
-- either counts a task's end or runs after it, and never misses the last one.
-- name: BatchLockExclusive :exec
SELECT pg_advisory_xact_lock(hashtextextended('batch:' || @id::text, 0));

-- name: BatchLockShared :exec
SELECT pg_advisory_xact_lock_shared(hashtextextended('batch:' || @id::text, 0));

-- BatchLockSharedMany takes the shared lock of several batches, in sorted
-- order so that no two callers can wait on each other.
-- name: BatchLockSharedMany :exec
SELECT pg_advisory_xact_lock_shared(hashtextextended('batch:' || id, 0))
FROM (SELECT DISTINCT unnest(@ids::text[]) AS id ORDER BY 1) b;
