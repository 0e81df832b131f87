-- PoolBatches lists the batches a pool leases from, first served first:
-- the batches in the pool's phase with pending tasks of it (only the
-- pool's own batch for a batch pool, batch_id); with by_priority, those
-- of the highest priority first; then those with the fewest tasks leased
-- (processing), then the oldest. A shared pool so serves batches of one
-- priority in turn (a large batch does not starve a small one), and a
-- lease without by_priority (the minimum share) serves the lower ones.
-- name: PoolBatches :many
SELECT b.id, coalesce(p.n, 0)::bigint AS processing
FROM batches b
JOIN task_counts c ON c.batch_id = b.id AND c.phase = @phase::text AND c.status = 'pending' AND c.n > 0
LEFT JOIN task_counts p ON p.batch_id = b.id AND p.phase = @phase::text AND p.status = 'processing'
WHERE b.status = @phase::text AND (sqlc.narg('batch_id')::text IS NULL OR b.id = sqlc.narg('batch_id')::text)
ORDER BY CASE WHEN @by_priority::bool THEN b.priority ELSE 0 END DESC, processing, b.started_at, b.id
LIMIT @max;

-- PoolClose closes a pool (by its id), or the pools of a batch (by
-- batch id, e.g. on a reset: a shared pool serves other batches and stays
-- open): their machines' credentials lease nothing more, and their live
-- machines end. It returns those, to destroy.
-- name: PoolClose :many
WITH closed AS (
    UPDATE pools pl SET closed_at = clock_timestamp()
    WHERE (pl.id = sqlc.narg('id')::bigint OR pl.batch_id = sqlc.narg('batch_id')::text) AND pl.closed_at IS NULL
    RETURNING pl.id
)
UPDATE pool_machines m
SET ended_at = clock_timestamp(), ended_reason = @reason::text,
    busy_ms = m.busy_ms + coalesce((extract(epoch FROM clock_timestamp() - m.busy_since) * 1000)::bigint, 0), busy_since = NULL
FROM closed
WHERE m.pool_id = closed.id AND m.ended_at IS NULL
RETURNING m.id, m.app, m.machine_id;

-- PoolDeleteByBatch deletes a finished batch's pools and their machines'
-- rows (retention).
-- name: PoolDeleteByBatch :execrows
DELETE FROM pools WHERE batch_id = @batch_id;

-- PoolGet is a pool.
-- name: PoolGet :one
SELECT * FROM pools WHERE id = @id;

-- PoolHeartbeat extends the lease of the task the token holds, up to its
-- deadline, and says the machine was seen. No row: the task is not
-- processing under that token any more (it ended, or its lease was taken
-- back).
-- name: PoolHeartbeat :one
WITH t AS (
    UPDATE tasks tk
    SET lease_until = least(tk.deadline, clock_timestamp() + make_interval(secs => @lease_seconds::float8))
    WHERE tk.id = @id AND tk.batch_id = @batch_id AND tk.status = 'processing' AND tk.token_hash = @token_hash AND tk.pool_machine_id IS NOT NULL
    RETURNING tk.pool_machine_id, tk.lease_until
)
UPDATE pool_machines m SET seen_at = clock_timestamp()
FROM t WHERE m.id = t.pool_machine_id
RETURNING t.lease_until;

-- PoolLease leases a batch's next pending task of a phase to a pool
-- machine: the task moves to processing with a new attempt and a fresh
-- random callback token (only its SHA-256 is stored; the token is returned
-- once, for the lease's answer; the previous attempt's hash joins the
-- superseded ones), a deadline of timeout_seconds plus seconds_per_gb
-- per 10^9 bytes of its input, and a lease that holds lease_seconds
-- without a heartbeat, and the machine's guest size (which prices the
-- attempt's time). SKIP LOCKED: concurrent leases take different tasks,
-- and a task is never leased twice at once.
-- name: PoolLease :one
WITH picked AS (
    SELECT p.id FROM tasks p
    WHERE p.batch_id = @batch_id AND p.phase = @phase AND p.status = 'pending'
    ORDER BY p.created_at, p.id
    LIMIT 1
    FOR UPDATE SKIP LOCKED
), tokens AS (
    SELECT picked.id, translate(encode(decode(replace(gen_random_uuid()::text || gen_random_uuid()::text, '-', ''), 'hex'), 'base64'), '+/=', '-_')::text AS token,
        @timeout_seconds::float8 AS timeout_seconds, @seconds_per_gb::float8 AS seconds_per_gb, @lease_seconds::float8 AS lease_seconds
    FROM picked
)
UPDATE tasks t
SET status = 'processing', attempt = t.attempt + 1, urls_signed = 0, machine_id = @machine_id, pool_machine_id = @pool_machine_id, ended_by = NULL, unheard = false, machine_gone = NULL,
    superseded_token_hashes = CASE WHEN t.token_hash IS NULL THEN t.superseded_token_hashes
        ELSE array_append(t.superseded_token_hashes, t.token_hash) END,
    token_hash = sha256(convert_to(tokens.token, 'UTF8')),
    deadline = clock_timestamp() + make_interval(secs => tokens.timeout_seconds + tokens.seconds_per_gb * f.file_size::float8 / 1000000000),
    lease_until = clock_timestamp() + make_interval(secs => tokens.lease_seconds),
    launched_at = clock_timestamp(), updated_at = clock_timestamp(), guest = @guest::text
FROM tokens, files f
WHERE t.id = tokens.id AND f.id = t.file_id
RETURNING t.id, t.file_id, t.attempt, t.deadline, f.r2_key, f.file_name, f.content_type, f.cid, tokens.token;

-- PoolMachineBusy records that a pool machine leased a task: it is busy
-- from now, and has one more task.
-- name: PoolMachineBusy :exec
UPDATE pool_machines
SET seen_at = clock_timestamp(), busy_since = clock_timestamp(), tasks = tasks + 1
WHERE id = @id;

-- PoolMachineByToken is the live pool machine whose credential hashes to
-- token_hash, with its pool.
-- name: PoolMachineByToken :one
SELECT m.id, m.pool_id, m.app, m.machine_id, m.busy_since, m.tasks, p.phase, p.batch_id, p.closed_at
FROM pool_machines m JOIN pools p ON p.id = m.pool_id
WHERE m.token_hash = @token_hash AND m.ended_at IS NULL;

-- PoolMachineEnd ends a pool machine (its pool is done, it went idle),
-- adding the time it was busy, if it was.
-- name: PoolMachineEnd :exec
UPDATE pool_machines
SET ended_at = clock_timestamp(), ended_reason = @reason::text, seen_at = clock_timestamp(),
    busy_ms = busy_ms + coalesce((extract(epoch FROM clock_timestamp() - busy_since) * 1000)::bigint, 0), busy_since = NULL
WHERE id = @id AND ended_at IS NULL;

-- PoolMachineIdle records that a pool machine asks for work: it is no
-- longer busy (the time it was is added), was seen now, and has the
-- provider's id it says, if it had none yet.
-- name: PoolMachineIdle :exec
UPDATE pool_machines
SET seen_at = clock_timestamp(), machine_id = coalesce(machine_id, sqlc.narg('machine_id')::text),
    busy_ms = busy_ms + coalesce((extract(epoch FROM clock_timestamp() - busy_since) * 1000)::bigint, 0), busy_since = NULL
WHERE id = @id;

-- PoolMachineInsert records a pool machine about to be launched, with
-- the hash of its credential and its guest size (which prices its idle
-- time).
-- name: PoolMachineInsert :one
INSERT INTO pool_machines (pool_id, app, token_hash, guest) VALUES (@pool_id, @app, @token_hash, @guest::text)
RETURNING id;

-- PoolMachineLaunched records the provider's id of a launched pool
-- machine.
-- name: PoolMachineLaunched :one
UPDATE pool_machines SET machine_id = @machine_id WHERE id = @id
RETURNING (ended_at IS NOT NULL)::bool AS ended;

-- PoolMachineLose ends pool machines given up: their launch made none, they
-- stopped calling, or their lease was taken back. It returns those it
-- ended, to destroy.
-- name: PoolMachineLose :many
UPDATE pool_machines
SET ended_at = clock_timestamp(), ended_reason = @reason::text,
    busy_ms = busy_ms + coalesce((extract(epoch FROM clock_timestamp() - busy_since) * 1000)::bigint, 0), busy_since = NULL
WHERE id = ANY(@ids::bigint[]) AND ended_at IS NULL
RETURNING id, app, machine_id;

-- PoolMachineStale lists a pool's live machines not heard from since
-- seen_before (a machine that never called is judged by its launch,
-- started_before): they are gone, or hung, and the pool replaces them.
-- name: PoolMachineStale :many
SELECT id, app, machine_id FROM pool_machines
WHERE pool_id = @pool_id AND ended_at IS NULL
    AND ((seen_at IS NULL AND created_at < @started_before) OR seen_at < @seen_before);

-- PoolMachines lists the machines of pools, newest first, at most max
-- (the dashboard's section).
-- name: PoolMachines :many
SELECT m.id, m.pool_id, m.app, m.machine_id, m.created_at, m.seen_at, m.busy_since, m.ended_at, m.ended_reason, m.tasks, m.busy_ms
FROM pool_machines m
WHERE m.pool_id = ANY(@pool_ids::bigint[])
ORDER BY m.id DESC
LIMIT @max;

-- PoolOpen is the open pool of a phase for a batch (batch_id NULL: the
-- phase's shared pool), made if there is none.
-- name: PoolOpen :one
INSERT INTO pools (phase, batch_id, app) VALUES (@phase, sqlc.narg('batch_id'), @app)
ON CONFLICT (phase, (coalesce(batch_id, ''))) WHERE closed_at IS NULL DO UPDATE SET app = EXCLUDED.app
RETURNING *;

-- PoolState counts what a pool's manager needs: the pending and leased
-- tasks it serves, and its machines: live, starting (launched, not yet
-- heard from), busy; and the live machines of its app across every pool
-- (POOL_MAX_MACHINES bounds them).
-- name: PoolState :one
SELECT
    coalesce((SELECT sum(c.n) FROM task_counts c JOIN batches b ON b.id = c.batch_id AND b.status = c.phase
        WHERE c.phase = p.phase AND c.status = 'pending' AND (p.batch_id IS NULL OR c.batch_id = p.batch_id)), 0)::bigint AS pending,
    coalesce((SELECT sum(c.n) FROM task_counts c JOIN batches b ON b.id = c.batch_id AND b.status = c.phase
        WHERE c.phase = p.phase AND c.status = 'processing' AND (p.batch_id IS NULL OR c.batch_id = p.batch_id)), 0)::bigint AS processing,
    (SELECT count(*) FROM pool_machines m WHERE m.pool_id = p.id AND m.ended_at IS NULL)::bigint AS live,
    (SELECT count(*) FROM pool_machines m WHERE m.pool_id = p.id AND m.ended_at IS NULL AND m.seen_at IS NULL)::bigint AS starting,
    (SELECT count(*) FROM pool_machines m WHERE m.pool_id = p.id AND m.ended_at IS NULL AND m.busy_since IS NOT NULL)::bigint AS busy,
    (SELECT count(*) FROM pool_machines m WHERE m.app = p.app AND m.ended_at IS NULL)::bigint AS app_live,
    p.closed_at
FROM pools p
WHERE p.id = @id;

-- PoolSummary sums pools for status and the dashboard: those of batches,
-- and the open shared pools: machines by state, tasks leased, and busy
-- and live time.
-- name: PoolSummary :many
SELECT p.id, p.phase, p.batch_id, p.app, p.created_at, p.closed_at,
    count(m.id) FILTER (WHERE m.ended_at IS NULL AND m.seen_at IS NULL)::bigint AS starting,
    count(m.id) FILTER (WHERE m.ended_at IS NULL AND m.busy_since IS NOT NULL)::bigint AS busy,
    count(m.id) FILTER (WHERE m.ended_at IS NULL AND m.seen_at IS NOT NULL AND m.busy_since IS NULL)::bigint AS idle,
    count(m.id)::bigint AS machines,
    coalesce(sum(m.tasks), 0)::bigint AS tasks,
    coalesce(sum(m.busy_ms + coalesce((extract(epoch FROM clock_timestamp() - m.busy_since) * 1000)::bigint, 0)), 0)::bigint AS busy_ms,
    coalesce(sum((extract(epoch FROM coalesce(m.ended_at, clock_timestamp()) - m.created_at) * 1000)::bigint), 0)::bigint AS live_ms
FROM pools p LEFT JOIN pool_machines m ON m.pool_id = p.id
WHERE p.batch_id = ANY(@batch_ids::text[]) OR (p.batch_id IS NULL AND p.closed_at IS NULL)
GROUP BY p.id
ORDER BY p.id;
