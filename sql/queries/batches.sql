-- BatchAdmissionLock serializes the intakes' admission (batches.Limits)
-- for the transaction, so that two cannot both take the last room.
-- name: BatchAdmissionLock :exec
SELECT pg_advisory_xact_lock(7263012);

-- BatchBuildAdvance records that the generation is written up to the input
-- file at ordinal cursor (NULL: all of it, the build is over).
-- name: BatchBuildAdvance :exec
UPDATE batches
SET build_cursor = sqlc.narg(cursor)::integer,
    build_from = CASE WHEN sqlc.narg(cursor)::integer IS NULL THEN NULL ELSE build_from END,
    updated_at = clock_timestamp()
WHERE id = @id;

-- name: BatchGeneralPrompt :one
-- The batch's own instructions for every AI call (its manifest's
-- custom_prompts.general), '' when it gave none: read alone, without the
-- rest of its queue message.
SELECT coalesce(queue_message->'custom_prompts'->>'general', '')::text AS general
FROM batches WHERE id = @id;

-- name: BatchGetByID :one
SELECT * FROM batches WHERE id = $1;

-- BatchGetByIDForUpdate locks the batch row against other writers of it.
-- FOR NO KEY UPDATE, not FOR UPDATE: we never change the key, and the weaker
-- lock does not block the FOR KEY SHARE that an insert into task_counts takes
-- for its foreign key, so callbacks never queue behind a transition on the
-- batch row. (Files, tasks and events have no foreign keys: migration 00005.)
-- name: BatchGetByIDForUpdate :one
SELECT * FROM batches WHERE id = $1 FOR NO KEY UPDATE;

-- BatchInFlight counts the batches in flight (not DONE or ERROR) and their
-- files, in all and of one uploader.
-- name: BatchInFlight :one
SELECT count(*) AS batches,
    coalesce(sum((queue_message->>'total_files')::bigint), 0)::bigint AS files,
    count(*) FILTER (WHERE uploader = @uploader::text) AS uploader_batches,
    coalesce(sum((queue_message->>'total_files')::bigint) FILTER (WHERE uploader = @uploader::text), 0)::bigint AS uploader_files
FROM batches WHERE completed_at IS NULL;

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
INSERT INTO batches (id, uploader, queue_message, priority)
VALUES (@id, @uploader, @queue_message, @priority)
ON CONFLICT (id) DO NOTHING
RETURNING *;

-- BatchLaunchOutage records a transient launch failure of the batch's
-- phase: it returns how long the run of such failures has lasted, which
-- starts now if none was running.
-- name: BatchLaunchOutage :one
UPDATE batches SET launch_outage_since = coalesce(launch_outage_since, clock_timestamp()), updated_at = clock_timestamp()
WHERE id = @id
RETURNING (extract(epoch FROM clock_timestamp() - launch_outage_since) * 1000)::bigint AS lasted_ms;

-- BatchList pages through batches newest first, by (started_at, id), with
-- optional filters. The cursor is the (started_at, id) of the last row of
-- the previous page: keyset pagination, so batches inserted meanwhile (all
-- newer) never shift the pages that follow. Served by the indexes on
-- (started_at, id), (status, started_at) and (uploader, started_at).
-- name: BatchList :many
SELECT id, status, phase, uploader, error, started_at, updated_at, completed_at, ingest_status, pruned_counts, priority,
    coalesce((queue_message->>'total_files')::bigint, 0)::bigint AS total_files,
    coalesce((queue_message->>'total_bytes')::bigint, 0)::bigint AS total_bytes
FROM batches
WHERE (sqlc.narg(status)::text IS NULL OR status = sqlc.narg(status)::text)
    AND (sqlc.narg(uploader)::text IS NULL OR uploader = sqlc.narg(uploader)::text)
    AND (sqlc.narg(since)::timestamptz IS NULL OR started_at >= sqlc.narg(since)::timestamptz)
    AND (sqlc.narg(until)::timestamptz IS NULL OR started_at < sqlc.narg(until)::timestamptz)
    AND (sqlc.narg(before_started_at)::timestamptz IS NULL
        OR (started_at, id) < (sqlc.narg(before_started_at)::timestamptz, sqlc.narg(before_id)::text))
ORDER BY started_at DESC, id DESC
LIMIT @max;

-- BatchListPrunable lists finished batches whose processing state
-- retention may remove (jobs/retention.go), oldest first: DONE or ERROR
-- since before cutoff, not pruned yet (or pruned part way), and not still
-- delivering to ingest (batch_finalize reads the final generation and the
-- staging objects it names), nor one of skip (whose pruning failed in
-- this run). Served by batches_prunable_idx.
-- name: BatchListPrunable :many
SELECT id FROM batches
WHERE completed_at < @cutoff::timestamptz AND pruned_at IS NULL
    AND status IN ('DONE', 'ERROR') AND ingest_status <> 'pending'
    AND id <> ALL(coalesce(@skip::text[], '{}'))
ORDER BY completed_at, id
LIMIT @max;

-- BatchListStalled is the sweep's backstop: running batches not touched
-- for a while. Their phase's executor makes sure its work has its jobs; a
-- phase with no open work should have transitioned; one whose generation
-- is still being written (build_from set) should have its writer.
-- name: BatchListStalled :many
SELECT b.id, b.phase::text AS phase, b.generation, b.build_from
FROM batches b
WHERE b.completed_at IS NULL AND b.phase IS NOT NULL AND b.status = b.phase AND b.updated_at < @before
ORDER BY b.updated_at, b.id
LIMIT @max;

-- BatchListStalledPending lists PENDING batches untouched since @before:
-- each should have a batch_start job, which the sweep's backstop makes
-- sure of (a unique insert: an existing one is kept).
-- name: BatchListStalledPending :many
SELECT b.id FROM batches b
WHERE b.status = 'PENDING' AND b.completed_at IS NULL AND b.updated_at < @before
ORDER BY b.updated_at, b.id
LIMIT @max;

-- BatchLockExclusive and BatchLockSharedMany are the fan-in guard; package
-- fanin owns the protocol and says why it makes a lost wake-up
-- impossible. Every transaction that ends work of a batch holds the
-- shared lock while it updates it and makes sure a phase_check is
-- pending; phase_check holds the exclusive lock while it counts open work
-- and transitions. The key is batch_lock_key (migration 00007).
-- name: BatchLockExclusive :exec
SELECT pg_advisory_xact_lock(batch_lock_key(@id::text));

-- BatchLockSharedMany takes the shared lock of several batches (duplicates
-- allowed), in id order so that no two callers wait on each other.
-- name: BatchLockSharedMany :exec
SELECT pg_advisory_xact_lock_shared(batch_lock_key(id))
FROM (SELECT DISTINCT unnest(@ids::text[]) AS id ORDER BY 1) b;

-- BatchOutranked tells whether a batch of higher priority than priority,
-- other than batch_id, waits for machines: it is in one of phases (those
-- whose machines are of one app) with tasks of it pending, and no pause
-- holds its work. The launchers of a batch so outranked leave the
-- launches to it (executor/machine/precedence.go). batches_status_idx
-- finds the batches in phases.
-- name: BatchOutranked :one
SELECT EXISTS (
    SELECT 1 FROM batches b
    JOIN task_counts c ON c.batch_id = b.id AND c.phase = b.status AND c.status = 'pending' AND c.n > 0
    WHERE b.status = ANY(@phases::text[]) AND b.priority > @priority::smallint AND b.id <> @batch_id::text
        AND NOT EXISTS (SELECT 1 FROM pauses ps
            WHERE ps.scope = 'global' OR (ps.scope = 'phase' AND ps.target = b.status) OR (ps.scope = 'batch' AND ps.target = b.id))
)::bool AS outranked;

-- BatchPhaseRetry counts one more phase-level failure and returns the count.
-- name: BatchPhaseRetry :one
UPDATE batches SET phase_retry_count = phase_retry_count + 1, updated_at = clock_timestamp()
WHERE id = @id
RETURNING phase_retry_count;

-- name: BatchPhaseRetryReset :exec
UPDATE batches SET phase_retry_count = 0, launch_outage_since = NULL
WHERE id = @id AND (phase_retry_count <> 0 OR launch_outage_since IS NOT NULL);

-- BatchPruneBegin marks a batch as being pruned, if it still may be (as
-- BatchListPrunable; the row lock orders it with an admin retry, which
-- refuses a batch once this committed), and keeps what its status needs
-- once its work's rows are gone: @snapshot, each phase's progress as its
-- executor reported it ({"phases": [...]}: pruned_counts). Beginning
-- again a removal that was interrupted keeps the first snapshot.
-- name: BatchPruneBegin :one
UPDATE batches b
SET pruned_counts = coalesce(b.pruned_counts, @snapshot::jsonb)
WHERE b.id = @id AND b.completed_at < @cutoff::timestamptz AND b.pruned_at IS NULL
    AND b.status IN ('DONE', 'ERROR') AND b.ingest_status <> 'pending'
RETURNING b.id, b.status, b.generation;

-- BatchPruneEnd records that a batch's processing state is gone.
-- name: BatchPruneEnd :exec
UPDATE batches SET pruned_at = clock_timestamp() WHERE id = @id AND pruned_counts IS NOT NULL;

-- BatchReopen takes a DONE batch back to work for an admin retry of what
-- failed (jobs.ResumeBatch), in the transaction that moves it into the
-- phase it resumes in; its delivery to ingest is to be made again.
-- name: BatchReopen :one
UPDATE batches
SET status = 'PENDING', error = NULL, completed_at = NULL, phase_retry_count = 0,
    ingest_status = 'none', ingest_attempts = 0, ingest_last_error = NULL, ingest_delivered_at = NULL, updated_at = clock_timestamp()
WHERE id = @id AND status = 'DONE'
RETURNING *;

-- BatchResume puts a batch in ERROR back to work, in @status (the phase it
-- failed in, or PENDING when it failed before its first phase), for an admin
-- retry. Any other batch is left as it is (no row is returned).
-- name: BatchResume :one
UPDATE batches
SET status = @status, error = NULL, completed_at = NULL, phase_retry_count = 0, launch_outage_since = NULL, updated_at = clock_timestamp()
WHERE id = @id AND status = 'ERROR'
RETURNING *;

-- BatchRetryTouch marks a running batch as changed by an admin retry.
-- name: BatchRetryTouch :exec
UPDATE batches SET phase_retry_count = 0, updated_at = clock_timestamp() WHERE id = @id;

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
    phase_retry_count = 0, launch_outage_since = NULL, updated_at = clock_timestamp()
WHERE id = @id AND status NOT IN ('DONE', 'ERROR')
RETURNING *;

-- BatchSetPhaseBuilding moves a running batch into a phase whose file
-- generation is still being written in chunks (migration 00006): the first
-- chunk's files and tasks exist, and build_cursor is the ordinal of the last
-- input file (of generation - 1, transformed by phase from) it covered.
-- name: BatchSetPhaseBuilding :one
UPDATE batches
SET status = @phase, phase = @phase, generation = @generation, phase_retry_count = 0, launch_outage_since = NULL,
    build_from = @build_from::text, build_cursor = @cursor::integer, updated_at = clock_timestamp()
WHERE id = @id AND status NOT IN ('DONE', 'ERROR')
RETURNING *;

-- BatchTouch marks the batches the backstop looked at, so its next runs
-- look at the others first (it takes the least recently touched).
-- name: BatchTouch :exec
UPDATE batches SET updated_at = clock_timestamp() WHERE id = ANY(@ids::text[]);
