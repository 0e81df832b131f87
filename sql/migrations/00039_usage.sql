-- +goose Up

-- What batches consumed (issue 32's cost): machine time by guest size and
-- provider calls by model, per batch and phase, summed as it happens. The
-- machine-seconds report read tasks.launched_at to finished_at, which a
-- retry resets: every attempt but a task's last went uncounted, and a
-- pool's idle machines not at all.
--
-- One row per (batch, phase, kind, role, resource), added to by the
-- statement that ends the attempt, the machine or the provider call's
-- item, in its transaction:
--   task       a task's attempt on a machine of its own (resource: its guest)
--   pool_busy  a task's attempt on a pool's machine, from its lease to its end
--   pool_idle  a pool machine's life (start-up included) less its busy time
--   provider   answers of an OCR, embeddings or tags provider (role says
--              which, resource is the model)
-- batch_id is '' for what belongs to no batch: a shared pool's idle time,
-- a document posted alone. No foreign key: the rows outlive retention
-- (which keeps batches) and are a few per batch.
CREATE TABLE usage (
    batch_id          text        NOT NULL,
    phase             text        NOT NULL,
    kind              text        NOT NULL CHECK (kind IN ('task', 'pool_busy', 'pool_idle', 'provider')),
    role              text        NOT NULL DEFAULT '',
    resource          text        NOT NULL,
    -- attempts: ended attempts (task, pool_busy) or ended machines (pool_idle).
    attempts          bigint      NOT NULL DEFAULT 0,
    seconds           float8      NOT NULL DEFAULT 0,
    requests          bigint      NOT NULL DEFAULT 0,
    prompt_tokens     bigint      NOT NULL DEFAULT 0,
    completion_tokens bigint      NOT NULL DEFAULT 0,
    updated_at        timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (batch_id, phase, kind, role, resource)
);

-- The guest size an attempt's or a pool machine's machine was launched
-- with (phases.Guest.Name, e.g. shared-cpu-2x-2048mb), which prices it.
ALTER TABLE tasks ADD COLUMN guest text;
ALTER TABLE pool_machines ADD COLUMN guest text;

-- A task's attempt ends when the task leaves processing with a machine
-- (or with its callback: the launcher may not have recorded the machine
-- yet): by its callback, a timeout, a lost lease, a reset, or a success of
-- an earlier attempt. It is charged from its launch (launched_at; a lease
-- for a pool) to the statement's updated_at. Like task_counts, one upsert
-- per statement: a group of callbacks adds to a row or two. That row is
-- locked to the commit, as task_counts' (batch, phase, processing) row
-- already is by every transaction that ends tasks of the phase, so it adds
-- no wait of its own. A launch that made no machine is not charged.
-- +goose StatementBegin
CREATE FUNCTION usage_task_attempts() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO usage AS u (batch_id, phase, kind, resource, attempts, seconds)
    SELECT n.batch_id, n.phase, CASE WHEN o.pool_machine_id IS NULL THEN 'task' ELSE 'pool_busy' END,
        coalesce(o.guest, ''), count(*),
        sum(greatest(0, extract(epoch FROM
            CASE WHEN n.updated_at > o.updated_at THEN n.updated_at ELSE clock_timestamp() END - o.launched_at)))
    FROM old_rows o JOIN new_rows n ON n.id = o.id
    WHERE o.status = 'processing' AND n.status <> 'processing' AND o.launched_at IS NOT NULL
        AND (o.machine_id IS NOT NULL OR o.pool_machine_id IS NOT NULL OR n.ended_by = 'callback')
    GROUP BY 1, 2, 3, 4 ORDER BY 1, 2, 3, 4
    ON CONFLICT (batch_id, phase, kind, role, resource) DO UPDATE
    SET attempts = u.attempts + excluded.attempts, seconds = u.seconds + excluded.seconds, updated_at = clock_timestamp();
    RETURN NULL;
END
$$;
-- +goose StatementEnd

CREATE TRIGGER usage_task_attempts
    AFTER UPDATE ON tasks
    REFERENCING OLD TABLE AS old_rows NEW TABLE AS new_rows
    FOR EACH STATEMENT EXECUTE FUNCTION usage_task_attempts();

-- A pool machine that ends (ended_at set) is charged its life, from its
-- record just before its launch to its end, less the time it held leases
-- (busy_ms), as its pool's idle time: its batch's, or no batch's for a
-- shared pool. Its busy time is its tasks' (pool_busy). A launch that made
-- no machine (no machine_id) is not charged.
-- +goose StatementBegin
CREATE FUNCTION usage_pool_machines() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO usage AS u (batch_id, phase, kind, resource, attempts, seconds)
    SELECT coalesce(p.batch_id, ''), p.phase, 'pool_idle', coalesce(n.guest, ''), count(*),
        sum(greatest(0, extract(epoch FROM n.ended_at - n.created_at) - n.busy_ms / 1000.0))
    FROM old_rows o JOIN new_rows n ON n.id = o.id JOIN pools p ON p.id = n.pool_id
    WHERE o.ended_at IS NULL AND n.ended_at IS NOT NULL AND n.machine_id IS NOT NULL
    GROUP BY 1, 2, 3, 4 ORDER BY 1, 2, 3, 4
    ON CONFLICT (batch_id, phase, kind, role, resource) DO UPDATE
    SET attempts = u.attempts + excluded.attempts, seconds = u.seconds + excluded.seconds, updated_at = clock_timestamp();
    RETURN NULL;
END
$$;
-- +goose StatementEnd

CREATE TRIGGER usage_pool_machines
    AFTER UPDATE ON pool_machines
    REFERENCING OLD TABLE AS old_rows NEW TABLE AS new_rows
    FOR EACH STATEMENT EXECUTE FUNCTION usage_pool_machines();

-- What the tasks and pool machines already ended show, as the old report
-- counted it (each task's latest attempt), of no known guest (''). The
-- ALTER TABLEs above hold every writer off until this commits.
INSERT INTO usage (batch_id, phase, kind, resource, attempts, seconds)
SELECT t.batch_id, t.phase, CASE WHEN t.pool_machine_id IS NULL THEN 'task' ELSE 'pool_busy' END, '', count(*),
    sum(greatest(0, extract(epoch FROM t.finished_at - t.launched_at)))
FROM tasks t
WHERE t.launched_at IS NOT NULL AND t.finished_at IS NOT NULL AND (t.ended_by = 'callback' OR t.machine_id IS NOT NULL)
GROUP BY 1, 2, 3;

INSERT INTO usage (batch_id, phase, kind, resource, attempts, seconds)
SELECT coalesce(p.batch_id, ''), p.phase, 'pool_idle', '', count(*),
    sum(greatest(0, extract(epoch FROM m.ended_at - m.created_at) - m.busy_ms / 1000.0))
FROM pool_machines m JOIN pools p ON p.id = m.pool_id
WHERE m.ended_at IS NOT NULL AND m.machine_id IS NOT NULL
GROUP BY 1, 2;

-- +goose Down
DROP TRIGGER usage_pool_machines ON pool_machines;
DROP TRIGGER usage_task_attempts ON tasks;
DROP FUNCTION usage_pool_machines();
DROP FUNCTION usage_task_attempts();
ALTER TABLE pool_machines DROP COLUMN guest;
ALTER TABLE tasks DROP COLUMN guest;
DROP TABLE usage;
