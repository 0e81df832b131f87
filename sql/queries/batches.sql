-- name: BatchGetByID :one
SELECT * FROM batches WHERE id = $1;

-- name: BatchGetByIDForUpdate :one
SELECT * FROM batches WHERE id = $1 FOR UPDATE;

-- BatchInsert inserts a new batch; on a repeat of the same id it inserts
-- nothing and returns no row, which is how intake stays idempotent.
-- name: BatchInsert :one
INSERT INTO batches (id, uploader, queue_message)
VALUES (@id, @uploader, @queue_message)
ON CONFLICT (id) DO NOTHING
RETURNING *;

-- BatchSetDone finishes a running batch; a batch already DONE or ERROR is
-- left as it is (no row is returned).
-- name: BatchSetDone :one
UPDATE batches
SET status = 'DONE', error = NULL, completed_at = now(), updated_at = now()
WHERE id = @id AND status NOT IN ('DONE', 'ERROR')
RETURNING *;

-- BatchSetError stops a batch that is not finished yet with a message; a
-- batch already DONE or ERROR is left as it is (no row is returned).
-- name: BatchSetError :one
UPDATE batches
SET status = 'ERROR', error = @error, completed_at = now(), updated_at = now()
WHERE id = @id AND status NOT IN ('DONE', 'ERROR')
RETURNING *;

-- BatchSetPhase moves a running batch into a phase whose tasks exist, with the
-- file generation that phase works on.
-- name: BatchSetPhase :one
UPDATE batches
SET status = @phase, phase = @phase, generation = @generation,
    phase_retry_count = 0, updated_at = now()
WHERE id = @id AND status NOT IN ('DONE', 'ERROR')
RETURNING *;
