-- PhaseOpenCount is how many tasks of a phase are pending or processing,
-- from the counters (task_counts), while the batch is in that phase; no row
-- otherwise. The fan-in reads it without any lock, to wait out a phase that
-- is far from its end (PhaseCheckWorker).
-- name: PhaseOpenCount :one
SELECT coalesce((SELECT sum(c.n) FROM task_counts c
    WHERE c.batch_id = b.id AND c.phase = b.status AND c.status IN ('pending', 'processing')), 0)::bigint AS open
FROM batches b
WHERE b.id = @batch_id AND b.status = @phase::text;

-- TaskClaimPending moves up to @max pending tasks of a phase to processing
-- for launch. Each gets a fresh random callback token: only its SHA-256 is
-- stored, and the token itself is returned once, for the machine's env; the
-- previous attempt's hash joins the superseded ones, so that its late
-- callbacks are told they are late. SKIP LOCKED lets several launchers share a phase
-- without waiting on each other. A task that still has its last attempt's
-- machine (ended_by 'retry', being retired) is not claimed: a task never has
-- two machines. The deadline is @timeout_seconds plus @seconds_per_gb per
-- 10^9 bytes of the input file; guest is the size of the machine to be
-- launched, which prices its time (the usage table).
-- name: TaskClaimPending :many
WITH claimed AS (
    SELECT p.id FROM tasks p
    WHERE p.batch_id = @batch_id AND p.phase = @phase AND p.status = 'pending' AND p.machine_id IS NULL
    ORDER BY p.created_at, p.id
    LIMIT @max
    FOR UPDATE SKIP LOCKED
), tokens AS (
    SELECT claimed.id, translate(encode(decode(replace(gen_random_uuid()::text || gen_random_uuid()::text, '-', ''), 'hex'), 'base64'), '+/=', '-_')::text AS token,
        @timeout_seconds::float8 AS timeout_seconds, @seconds_per_gb::float8 AS seconds_per_gb
    FROM claimed
)
UPDATE tasks t
SET status = 'processing', attempt = t.attempt + 1, urls_signed = 0, machine_id = NULL, ended_by = NULL, unheard = false, machine_gone = NULL,
    superseded_token_hashes = CASE WHEN t.token_hash IS NULL THEN t.superseded_token_hashes
        ELSE array_append(t.superseded_token_hashes, t.token_hash) END,
    token_hash = sha256(convert_to(tokens.token, 'UTF8')),
    deadline = clock_timestamp() + make_interval(secs => tokens.timeout_seconds + tokens.seconds_per_gb * f.file_size::float8 / 1000000000),
    launched_at = clock_timestamp(), updated_at = clock_timestamp(), guest = @guest::text
FROM tokens, files f
WHERE t.id = tokens.id AND f.id = t.file_id
RETURNING t.id, t.file_id, t.attempt, t.failures, t.deadline, f.r2_key, f.file_name, f.content_type, f.cid, tokens.token;

-- TaskCompleteMany applies a group of workers' callbacks (one group commit)
-- and records an event for each task it ended, in one statement. It matches
-- only tasks of the batch named whose current token is the one presented,
-- so a callback from an earlier launch of a relaunched task cannot apply;
-- and only processing tasks, except that a success is taken late (work is
-- not thrown away for being late) while its attempt is still the current
-- one: from a task waiting for its timed-out machine's retirement (pending,
-- ended_by 'retry'), or from a task whose last attempt timed out while its
-- phase is still the batch's (the fan-in's shared lock, which the group
-- holds, keeps the phase from ending meanwhile). An error the worker calls
-- retryable sends the task back to pending to be retried instead of
-- failing it: for @transient_seconds from the first such error in a row
-- (failing_since) without counting as a failed attempt (an outage of a
-- few minutes fails no file, and leaves the task its attempts for its
-- machines' own failures), then while it has attempts left
-- (@max_attempts). The events' types are
-- db's constants (TaskCompleteManyArgs passes them). An id may
-- come more than once with different batches or tokens (a stray caller's
-- and the worker's): at most one of them matches, and RETURNING says which.
-- The input is sorted by task id, in byte order (as Go sorts strings), so
-- that concurrent groups and the launcher's bookkeeping (TaskSetMachines)
-- lock rows in one order.
-- name: TaskCompleteMany :many
WITH input AS (
    SELECT * FROM (
        SELECT unnest(@ids::text[]) AS id, unnest(@batch_ids::text[]) AS batch_id, unnest(@statuses::text[]) AS status,
            unnest(@results::text[]) AS result, unnest(@errors::text[]) AS error, unnest(@token_hashes::bytea[]) AS token_hash,
            unnest(@retryables::bool[]) AS retryable
    ) c
    ORDER BY id COLLATE "C"
), limits AS (
    SELECT @max_attempts::int AS max_attempts, @retire_seconds::float8 AS retire_seconds, @transient_seconds::float8 AS transient_seconds
), ended AS (
    -- retry: a retryable error with attempts left, decided once per row
    -- (a sub-select of the row being updated, so that a row another group
    -- changed first is decided again on its new version).
    UPDATE tasks t
    SET (status, result, error, ended_by, failures, deadline, finished_at, updated_at, failure, failing_since) = (
        SELECT CASE WHEN d.retry THEN 'pending' ELSE input.status END,
            CASE WHEN d.retry THEN NULL ELSE input.result::jsonb END,
            nullif(input.error, ''),
            CASE WHEN d.retry THEN 'retry' ELSE 'callback' END,
            t.failures + CASE WHEN d.failed AND NOT d.within THEN 1 ELSE 0 END,
            CASE WHEN d.retry THEN clock_timestamp() + make_interval(secs => limits.retire_seconds) ELSE t.deadline END,
            CASE WHEN d.retry THEN NULL ELSE clock_timestamp() END,
            clock_timestamp(),
            CASE WHEN d.retry OR input.status <> 'failed' THEN NULL WHEN input.retryable THEN 'infrastructure' ELSE 'permanent' END,
            CASE WHEN d.failed THEN coalesce(t.failing_since, clock_timestamp()) ELSE t.failing_since END
        FROM (SELECT f.failed, f.within, f.failed AND (f.within OR t.failures + 1 < limits.max_attempts) AS retry
            FROM (SELECT input.retryable AND input.status = 'failed' AS failed,
                limits.transient_seconds > 0
                    AND clock_timestamp() < coalesce(t.failing_since, clock_timestamp()) + make_interval(secs => limits.transient_seconds) AS within) f) d)
    FROM input, limits
    WHERE t.id = input.id AND t.batch_id = input.batch_id AND t.token_hash = input.token_hash
        AND (t.status = 'processing'
            OR (input.status = 'completed' AND t.ended_by = 'retry' AND t.status = 'pending')
            OR (input.status = 'completed' AND t.ended_by = 'timeout' AND t.status = 'failed'
                AND EXISTS (SELECT 1 FROM batches b WHERE b.id = t.batch_id AND b.status = t.phase)))
    RETURNING t.id, t.batch_id, t.phase, t.status, t.error, t.token_hash, t.failures
), events AS (
    INSERT INTO batch_events (batch_id, type, phase, task_id, data)
    SELECT batch_id, CASE status WHEN 'completed' THEN @event_completed::text WHEN 'pending' THEN @event_retrying::text ELSE @event_failed::text END, phase, id,
        CASE status WHEN 'completed' THEN '{}'::jsonb
            WHEN 'pending' THEN jsonb_build_object('error', error, 'reason', 'transient error', 'failed_attempts', failures)
            ELSE jsonb_build_object('error', error) END
    FROM ended
)
SELECT id, batch_id, phase, token_hash, status FROM ended;

-- TaskCompleteOvertaken applies a success of an earlier attempt of a task
-- (its token among the superseded ones) that arrives after the task was
-- launched again, while the task has no success yet and its phase is still
-- the batch's (the fan-in's shared lock, which the caller holds, keeps it
-- so): work is not thrown away because a later attempt was started. The
-- task completes with that attempt's result and token (its repeats are
-- then repeats), the token it had joins the superseded ones (the later
-- attempt's callbacks are told they are late), and it returns the machine
-- the task had, to be stopped (the later attempt's, or the timed-out one
-- still waiting for its destruction; none for a pool's machine, which
-- hears of it at its next heartbeat). A reset task is left alone.
-- name: TaskCompleteOvertaken :one
WITH old AS MATERIALIZED (
    SELECT t.id, t.token_hash, t.machine_id, t.pool_machine_id FROM tasks t
    WHERE t.id = @id AND t.batch_id = @batch_id AND @token_hash::bytea = ANY(t.superseded_token_hashes)
        AND t.status <> 'completed' AND t.ended_by IS DISTINCT FROM 'reset'
        AND EXISTS (SELECT 1 FROM batches b WHERE b.id = t.batch_id AND b.status = t.phase)
    FOR NO KEY UPDATE OF t
), done AS (
    UPDATE tasks t
    SET status = 'completed', result = @result::jsonb, error = NULL, ended_by = 'callback', lease_until = NULL, failure = NULL,
        token_hash = @token_hash::bytea,
        superseded_token_hashes = CASE WHEN old.token_hash IS NULL THEN array_remove(t.superseded_token_hashes, @token_hash::bytea)
            ELSE array_append(array_remove(t.superseded_token_hashes, @token_hash::bytea), old.token_hash) END,
        finished_at = clock_timestamp(), updated_at = clock_timestamp()
    FROM old
    WHERE t.id = old.id
    RETURNING t.id, t.batch_id, t.phase
), events AS (
    INSERT INTO batch_events (batch_id, type, phase, task_id, data)
    SELECT batch_id, @event_completed::text, phase, id, '{"overtook_a_later_attempt": true}'::jsonb FROM done
)
SELECT done.phase, coalesce(CASE WHEN old.pool_machine_id IS NULL THEN old.machine_id END, '')::text AS machine_id
FROM done JOIN old ON old.id = done.id;

-- TaskCountByBatch counts a batch's tasks per phase and status. It reads
-- the counters triggers keep (task_counts, migration 00004): a few rows,
-- however many tasks the batch has.
-- name: TaskCountByBatch :many
SELECT phase, status, n AS count
FROM task_counts
WHERE batch_id = @batch_id AND n <> 0;

-- TaskCountByBatches is TaskCountByBatch for several batches at once
-- (status, a page of the dashboard's listing).
-- name: TaskCountByBatches :many
SELECT c.batch_id, c.phase, c.status, c.n AS count
FROM task_counts c
WHERE c.batch_id = ANY(@batch_ids::text[]) AND c.n <> 0;

-- TaskCountCompleted is how many tasks of a phase completed, from the
-- counters (task_counts): within a phase it only grows, so the fan-in
-- check tells by it whether a task completed since it last looked.
-- name: TaskCountCompleted :one
SELECT coalesce(sum(n), 0)::bigint FROM task_counts
WHERE batch_id = @batch_id AND phase = @phase AND status = 'completed';

-- TaskCountDeleteByBatch deletes a batch's task counters of @phases, once
-- their tasks are gone (they are all zero then).
-- name: TaskCountDeleteByBatch :execrows
DELETE FROM task_counts WHERE batch_id = @batch_id AND phase = ANY(@phases::text[]) AND n = 0;

-- TaskCountInfraFailed counts the failed tasks of the batches named whose
-- attempts infrastructure spent (failure 'infrastructure'), per phase.
-- name: TaskCountInfraFailed :many
SELECT batch_id, phase, count(*) AS n FROM tasks
WHERE batch_id = ANY(@batch_ids::text[]) AND status = 'failed' AND failure = 'infrastructure'
GROUP BY batch_id, phase;

-- TaskCountPending is how many tasks of a phase wait for a launch, from the
-- counters (task_counts).
-- name: TaskCountPending :one
SELECT coalesce(sum(n), 0)::bigint FROM task_counts
WHERE batch_id = @batch_id AND phase = @phase AND status = 'pending';

-- TaskCountProcessingGroups are the (batch, phase) pairs of @phases with
-- processing tasks, from the counters (task_counts).
-- name: TaskCountProcessingGroups :many
SELECT batch_id, phase FROM task_counts
WHERE phase = ANY(@phases::text[]) AND status = 'processing' AND n > 0;

-- TaskDeleteByBatch deletes up to max of a batch's tasks of @phases
-- (retention: one short statement at a time). The triggers count them out
-- of task_counts.
-- name: TaskDeleteByBatch :execrows
DELETE FROM tasks
WHERE id IN (SELECT t.id FROM tasks t WHERE t.batch_id = @batch_id AND t.phase = ANY(@phases::text[]) LIMIT @max);

-- TaskDeleteFailedByBatch removes a DONE batch's failed tasks of @phases,
-- which an admin retry reruns as new tasks of the files they failed on
-- (jobs.ResumeBatch); their outcomes stay in batch_events. It returns each
-- task's phase and its file's key.
-- name: TaskDeleteFailedByBatch :many
WITH d AS (
    DELETE FROM tasks t WHERE t.batch_id = @batch_id::text AND t.phase = ANY(@phases::text[]) AND t.status = 'failed'
        AND (NOT @infra_only::boolean OR t.failure = 'infrastructure')
    RETURNING t.id, t.phase, t.file_id
)
SELECT d.id, d.phase, f.r2_key FROM d JOIN files f ON f.id = d.file_id;

-- TaskExpiredGroups finds (batch, phase) pairs of @phases with tasks past
-- their deadline, or whose lease's heartbeats stopped (lease_until). It
-- compares with now(), not clock_timestamp(): a stable value is a range
-- condition on tasks_deadline_idx and tasks_lease_idx, a volatile one made
-- every sweep read the whole index.
-- name: TaskExpiredGroups :many
SELECT DISTINCT batch_id, phase FROM (
    SELECT batch_id, phase FROM tasks WHERE status = 'processing' AND deadline < now()
    UNION ALL
    SELECT batch_id, phase FROM tasks WHERE status = 'processing' AND lease_until IS NOT NULL AND lease_until < now()
) expired
WHERE phase = ANY(@phases::text[])
LIMIT @max;

-- TaskExtendRunning moves the deadline and the lease of every processing
-- task later by the seconds given: time in which no callback could be
-- accepted (jobs.Listener) is not charged to the tasks. It marks them
-- unheard: should one time out all the same, its worker may have given up
-- calling back meanwhile, and the timeout costs no attempt
-- (TaskFailExpired).
-- name: TaskExtendRunning :execrows
WITH by AS (SELECT make_interval(secs => @seconds::float8) AS d)
UPDATE tasks t
SET deadline = t.deadline + by.d, lease_until = t.lease_until + by.d, unheard = true
FROM by
WHERE t.status = 'processing';

-- TaskFailExpired ends the processing tasks of a phase that are past their
-- deadline, with the message of spec 000, or whose lease's heartbeats
-- stopped (lease_until: its pool machine died): a task with attempts left
-- (@max_attempts) goes back to pending to be retried (ended_by 'retry',
-- its token kept so that a late success of this attempt still counts; a
-- machine task's deadline: until @retire_seconds from now, as its launcher
-- retires its machine first), the others fail. retry says which. An
-- attempt that lived through a silence of every orchestrator (unheard) is
-- excused: its worker may have given up calling back while none could
-- listen, so it is retried without counting as a failed attempt, up to
-- @max_excused times a task. Only tasks with a machine: a launch that made
-- none is the sweep's to settle (TaskSettleUnlaunched). The rows are
-- decided, and locked, first, so that RETURNING can say what was decided.
-- name: TaskFailExpired :many
WITH limits AS (
    SELECT @max_attempts::int AS max_attempts, @max_excused::int AS max_excused,
        @retire_seconds::float8 AS retire_seconds, @lease_seconds::float8 AS lease_seconds
), decided AS MATERIALIZED (
    SELECT d.id, d.excuse, d.excuse OR d.failures + 1 < limits.max_attempts AS retry
    FROM (
        SELECT x.id, x.failures, x.unheard AND x.excused < limits.max_excused AS excuse
        FROM tasks x, limits
        WHERE x.batch_id = @batch_id AND x.phase = @phase AND x.status = 'processing'
            AND (x.deadline < clock_timestamp() OR x.lease_until < clock_timestamp())
            AND (x.machine_id IS NOT NULL OR x.pool_machine_id IS NOT NULL)
        ORDER BY x.id COLLATE "C"
        FOR NO KEY UPDATE OF x
    ) d, limits
)
UPDATE tasks t
SET status = CASE WHEN decided.retry THEN 'pending' ELSE 'failed' END,
    ended_by = CASE WHEN decided.retry THEN 'retry' ELSE 'timeout' END,
    failures = t.failures + CASE WHEN decided.excuse THEN 0 ELSE 1 END,
    excused = t.excused + CASE WHEN decided.excuse THEN 1 ELSE 0 END,
    deadline = CASE WHEN decided.retry THEN clock_timestamp() + make_interval(secs => limits.retire_seconds) ELSE t.deadline END,
    finished_at = CASE WHEN decided.retry THEN NULL ELSE clock_timestamp() END,
    failure = CASE WHEN decided.retry THEN NULL ELSE 'infrastructure' END,
    lease_until = NULL,
    updated_at = clock_timestamp(),
    error = CASE WHEN t.machine_gone IS NOT NULL THEN t.machine_gone
        WHEN t.deadline >= clock_timestamp()
        THEN 'Lease lost: no heartbeat from its machine for ' || round((extract(epoch FROM clock_timestamp() - t.lease_until) + limits.lease_seconds)::numeric, 1)::text || 's'
        ELSE 'Task timed out after ' || round(extract(epoch FROM clock_timestamp() - coalesce(t.launched_at, t.created_at))::numeric, 1)::text || 's' END
FROM decided, limits
WHERE t.id = decided.id
RETURNING t.id, t.machine_id, t.pool_machine_id, t.error, t.failures, decided.retry::bool AS retry, decided.excuse::bool AS excused;

-- TaskFailOpenByBatch ends every open task of a batch's @phases (admin
-- reset).
-- name: TaskFailOpenByBatch :many
UPDATE tasks
SET status = 'failed', ended_by = 'reset', error = @error, lease_until = NULL,
    finished_at = clock_timestamp(), updated_at = clock_timestamp()
WHERE batch_id = @batch_id AND phase = ANY(@phases::text[]) AND status IN ('pending', 'processing')
RETURNING id, phase, machine_id, pool_machine_id;

-- TaskGetForURLs reads what answering a worker's request for presigned
-- URLs needs: the task's batch, phase and state, its token and deadline,
-- and its input's key.
-- name: TaskGetForURLs :one
SELECT t.id, t.batch_id, t.phase, t.status, t.token_hash, t.deadline, f.r2_key
FROM tasks t JOIN files f ON f.id = t.file_id
WHERE t.id = @id;

-- TaskHasOpen asks whether any task of a phase is still pending or
-- processing: the fan-in's question. It reads the counters (task_counts),
-- which the statements that change tasks update in their own transaction,
-- so under the batch's exclusive lock they are as exact as the tasks.
-- Asking the tasks instead walked the index entries of every task claimed
-- or ended since the last vacuum.
-- name: TaskHasOpen :one
SELECT EXISTS (
    SELECT 1 FROM task_counts
    WHERE batch_id = @batch_id AND phase = @phase AND status IN ('pending', 'processing') AND n > 0
);

-- name: TaskInsertMany :copyfrom
INSERT INTO tasks (id, batch_id, phase, file_id)
VALUES (@id, @batch_id, @phase, @file_id);

-- TaskListCompletedBy lists which of the tasks named completed, with the
-- token of the attempt that completed each.
-- name: TaskListCompletedBy :many
SELECT t.id, t.token_hash FROM tasks t
WHERE t.id = ANY(@ids::text[]) AND t.batch_id = @batch_id AND t.phase = @phase AND t.status = 'completed';

-- TaskListExpiredUnlaunched lists a phase's tasks past their deadline with
-- no recorded machine: the launcher died, or could not tell whether its
-- launch made one, between claiming and recording them.
-- name: TaskListExpiredUnlaunched :many
SELECT id, attempt, unlaunched FROM tasks
WHERE batch_id = @batch_id AND phase = @phase AND status = 'processing'
    AND machine_id IS NULL AND deadline < clock_timestamp();

-- TaskListFailedByBatch lists a batch's failed tasks of @phases with
-- their files' paths, oldest failure first, at most max of them.
-- name: TaskListFailedByBatch :many
SELECT t.id, t.phase, coalesce(f.logical_path, '')::text AS logical_path, coalesce(t.error, '')::text AS error, t.finished_at
FROM tasks t LEFT JOIN files f ON f.id = t.file_id
WHERE t.batch_id = @batch_id AND t.phase = ANY(@phases::text[]) AND t.status = 'failed'
ORDER BY t.finished_at NULLS LAST, t.id
LIMIT @max;

-- TaskListForCallbacks reads what authenticating and classifying a group
-- of callbacks needs.
-- name: TaskListForCallbacks :many
SELECT id, batch_id, phase, status, token_hash, ended_by, superseded_token_hashes
FROM tasks
WHERE id = ANY(@ids::text[]);

-- TaskListMachinesRunning lists a phase's processing tasks with a machine
-- of their own (not a pool's) that was launched before @launched_before
-- and is not yet known to be gone, with their machines: the sweep checks
-- them against the Machines API's list of the batch's machines.
-- name: TaskListMachinesRunning :many
SELECT id, machine_id::text AS machine_id FROM tasks
WHERE batch_id = @batch_id AND phase = @phase AND status = 'processing'
    AND machine_id IS NOT NULL AND pool_machine_id IS NULL AND machine_gone IS NULL
    AND launched_at < @launched_before::timestamptz;

-- TaskListRetiring lists up to @max tasks of a phase waiting to be retried
-- whose last attempt's machine is still recorded: the launcher destroys it
-- before the task is claimed again (deadline: when to give up waiting for
-- the destruction).
-- name: TaskListRetiring :many
SELECT id, attempt, machine_id::text AS machine_id, coalesce(deadline < clock_timestamp(), true)::bool AS overdue
FROM tasks
WHERE batch_id = @batch_id AND phase = @phase AND status = 'pending' AND ended_by = 'retry' AND machine_id IS NOT NULL
ORDER BY id
LIMIT @max;

-- TaskMarkMachinesGone records that running tasks' machines ended without
-- calling back (@whys says how), each while the task still runs on that
-- machine: the deadline comes within @grace_seconds, for a callback still
-- in flight, and the sweep then retries the task with that reason. It
-- locks the rows first, in byte order of their ids (as TaskCompleteMany
-- and TaskSetMachines do).
-- name: TaskMarkMachinesGone :many
WITH u AS (
    SELECT unnest(@ids::text[]) AS id, unnest(@machine_ids::text[]) AS machine_id, unnest(@whys::text[]) AS why
), locked AS MATERIALIZED (
    SELECT t.id FROM tasks t
    WHERE t.id = ANY(@ids::text[])
    ORDER BY t.id COLLATE "C"
    FOR NO KEY UPDATE
), grace AS (SELECT make_interval(secs => @grace_seconds::float8) AS d)
UPDATE tasks t
SET machine_gone = u.why, deadline = least(t.deadline, clock_timestamp() + grace.d), updated_at = clock_timestamp()
FROM u JOIN locked l ON l.id = u.id, grace
WHERE t.id = u.id AND t.machine_id = u.machine_id AND t.status = 'processing' AND t.machine_gone IS NULL
RETURNING t.id;

-- TaskRelease returns claimed tasks whose launch certainly did not create a
-- machine to pending, forgetting their token: each only while it is still
-- in the launch attempt given (a task the sweep released and another
-- launcher claimed meanwhile is that launcher's).
-- name: TaskRelease :many
UPDATE tasks t
SET status = 'pending', token_hash = NULL, deadline = NULL, launched_at = NULL, updated_at = clock_timestamp()
FROM (SELECT unnest(@ids::text[]) AS id, unnest(@attempts::int[]) AS attempt) u
WHERE t.id = u.id AND t.attempt = u.attempt AND t.status = 'processing' AND t.machine_id IS NULL
RETURNING t.id;

-- TaskReleaseRetired makes tasks whose last attempt's machine is gone (or
-- given up on) launchable again, each while it is still waiting in the
-- attempt given. Their token joins the superseded ones.
-- name: TaskReleaseRetired :many
UPDATE tasks t
SET machine_id = NULL, superseded_token_hashes = array_append(t.superseded_token_hashes, t.token_hash), token_hash = NULL, deadline = NULL,
    launched_at = NULL, updated_at = clock_timestamp()
FROM (SELECT unnest(@ids::text[]) AS id, unnest(@attempts::int[]) AS attempt) u
WHERE t.id = u.id AND t.attempt = u.attempt AND t.status = 'pending' AND t.ended_by = 'retry' AND t.machine_id IS NOT NULL
RETURNING t.id;

-- TaskRequeueFailed returns the failed tasks of a phase to pending for an
-- admin retry, forgetting their last launch (token, machine, deadline,
-- outcome) so the launcher claims them afresh; completed tasks are not
-- touched. A late callback of the failed launch no longer authenticates.
-- The tasks get TASK_MAX_ATTEMPTS attempts (and maxUnlaunched launches
-- without a machine) afresh.
-- name: TaskRequeueFailed :many
UPDATE tasks
SET status = 'pending', ended_by = NULL, failures = 0, unlaunched = 0, excused = 0, unheard = false, machine_gone = NULL, failure = NULL, failing_since = NULL, token_hash = NULL, machine_id = NULL, deadline = NULL,
    result = NULL, error = NULL, launched_at = NULL, finished_at = NULL, updated_at = clock_timestamp()
WHERE batch_id = @batch_id AND phase = @phase AND status = 'failed' AND (NOT @infra_only::boolean OR failure = 'infrastructure')
RETURNING id;

-- TaskSetMachines records launched machines, for tasks still in the same
-- launch attempt (a callback may already have ended the task: a fast worker
-- can beat this bookkeeping). A task back in pending in that attempt waits
-- for no machine (an admin retry requeued it after a callback failed it,
-- or the sweep released it: the attempt only counts up at the next claim)
-- and is left alone, since with a machine recorded it would never be
-- claimed again; unless a retryable error of its callback put it there
-- (ended_by 'retry'): the machine is recorded, to be retired before the
-- task is claimed again. It returns how each task ended so far, so the
-- caller can destroy the machines it did not record, and those whose task
-- was reset or timed out meanwhile.
-- It locks the rows first, explicitly in byte order of their ids: ordering
-- the input alone (as TaskCompleteMany does) keeps that order only while
-- the join is a nested loop, and for a large claim on a generic plan the
-- planner may hash the input and scan the table instead.
-- name: TaskSetMachines :many
WITH u AS (
    SELECT unnest(@ids::text[]) AS id, unnest(@attempts::int[]) AS attempt, unnest(@machine_ids::text[]) AS machine_id
), locked AS MATERIALIZED (
    SELECT t.id FROM tasks t
    WHERE t.id = ANY(@ids::text[])
    ORDER BY t.id COLLATE "C"
    FOR NO KEY UPDATE
)
UPDATE tasks t
SET machine_id = u.machine_id, updated_at = clock_timestamp()
FROM u JOIN locked l ON l.id = u.id
WHERE t.id = u.id AND t.attempt = u.attempt AND t.machine_id IS NULL
    AND (t.status <> 'pending' OR t.ended_by = 'retry')
RETURNING t.id, t.ended_by;

-- TaskSettleUnlaunched settles, in one statement, expired tasks whose
-- machine was never recorded, each as the sweep decided (@actions):
-- 'found' records the machine its lookup found; 'release' returns the task
-- to pending to be launched again, keeping its token as superseded; 'fail'
-- fails it for want of a machine, with @error. A launch that made no
-- machine (Fly's outage, the launcher's crash) ran none of the task's
-- work: it is not a failed attempt (failures stays) but counts in
-- unlaunched, which the sweep bounds apart. Each change is for the launch
-- attempt the sweep looked at; a task that ended, got its machine or was launched
-- again meanwhile is left alone. It locks the rows first, explicitly in
-- byte order of their ids (the order TaskCompleteMany and TaskSetMachines
-- give their input): with one statement per action, the rows of one
-- action were locked before those of the next, in no common order. It
-- returns the tasks it changed, with their action.
-- name: TaskSettleUnlaunched :many
WITH u AS (
    SELECT unnest(@ids::text[]) AS id, unnest(@attempts::int[]) AS attempt,
        unnest(@actions::text[]) AS action, unnest(@machine_ids::text[]) AS machine_id
), locked AS MATERIALIZED (
    SELECT t.id FROM tasks t
    WHERE t.id = ANY(@ids::text[])
    ORDER BY t.id COLLATE "C"
    FOR NO KEY UPDATE
)
UPDATE tasks t
SET machine_id = CASE WHEN u.action = 'found' THEN u.machine_id ELSE t.machine_id END,
    status = CASE u.action WHEN 'release' THEN 'pending' WHEN 'fail' THEN 'failed' ELSE t.status END,
    unlaunched = CASE WHEN u.action IN ('release', 'fail') THEN t.unlaunched + 1 ELSE t.unlaunched END,
    superseded_token_hashes = CASE WHEN u.action = 'release' THEN array_append(t.superseded_token_hashes, t.token_hash)
        ELSE t.superseded_token_hashes END,
    token_hash = CASE WHEN u.action = 'release' THEN NULL ELSE t.token_hash END,
    deadline = CASE WHEN u.action = 'release' THEN NULL ELSE t.deadline END,
    launched_at = CASE WHEN u.action = 'release' THEN NULL ELSE t.launched_at END,
    ended_by = CASE WHEN u.action = 'fail' THEN 'timeout' ELSE t.ended_by END,
    error = CASE WHEN u.action = 'fail' THEN @error::text ELSE t.error END,
    failure = CASE WHEN u.action = 'fail' THEN 'infrastructure' ELSE t.failure END,
    finished_at = CASE WHEN u.action = 'fail' THEN clock_timestamp() ELSE t.finished_at END,
    updated_at = clock_timestamp()
FROM u JOIN locked l ON l.id = u.id
WHERE t.id = u.id AND t.attempt = u.attempt AND t.status = 'processing' AND t.machine_id IS NULL
RETURNING t.id, u.action::text AS action;

-- TaskSignURLs counts n more URLs against the current attempt of a
-- processing task whose token record is the one given, unless that makes
-- more than the most allowed; no row then (or for a task no longer
-- running under that token).
-- name: TaskSignURLs :one
UPDATE tasks t SET urls_signed = t.urls_signed + @n::int
WHERE t.id = @id AND t.status = 'processing' AND t.token_hash = @token_hash AND t.urls_signed + @n::int <= @most::int
RETURNING t.urls_signed;
