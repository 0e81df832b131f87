-- +goose Up

-- Pools of machines that lease the tasks of a phase (the pool executor):
-- a few long-lived machines per phase, each leasing task after task,
-- instead of a machine per task. A pool serves one batch's phase
-- (POOL_SCOPE=batch) or every batch in a phase (batch_id NULL).
CREATE TABLE pools (
    id         bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    phase      text        NOT NULL,
    batch_id   text        REFERENCES batches (id) ON DELETE CASCADE,
    -- app is the Fly app its machines run in (the phase's).
    app        text        NOT NULL,
    created_at timestamptz NOT NULL DEFAULT now(),
    -- closed_at is set once the pool's batch left the phase: its
    -- machines' credentials lease nothing any more.
    closed_at  timestamptz
);

-- One open pool per phase and batch (or per phase, for a shared one).
CREATE UNIQUE INDEX pools_open_key ON pools (phase, (coalesce(batch_id, ''))) WHERE closed_at IS NULL;

-- A pool's machines. Each holds a credential of its own (token_hash: the
-- SHA-256 of the POOL_TOKEN it was launched with), which leases tasks of
-- its pool only, until the machine ends.
CREATE TABLE pool_machines (
    id          bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    pool_id     bigint      NOT NULL REFERENCES pools (id) ON DELETE CASCADE,
    app         text        NOT NULL,
    -- machine_id is the provider's id, once the launch answered.
    machine_id  text,
    token_hash  bytea       NOT NULL UNIQUE,
    created_at  timestamptz NOT NULL DEFAULT now(),
    -- seen_at is its last lease request or heartbeat; NULL until its
    -- first (it is starting).
    seen_at     timestamptz,
    -- busy_since is when it leased the task it works on; NULL while idle.
    busy_since  timestamptz,
    -- ended_at: it was told its pool is done, it went idle, it was
    -- destroyed, or it was given up for lost (ended_reason says which).
    ended_at    timestamptz,
    ended_reason text,
    -- tasks and busy_ms total the tasks it leased and the time it held
    -- them (pool efficiency: busy time over its lifetime).
    tasks       integer     NOT NULL DEFAULT 0,
    busy_ms     bigint      NOT NULL DEFAULT 0
);

CREATE INDEX pool_machines_live_idx ON pool_machines (pool_id) WHERE ended_at IS NULL;
CREATE INDEX pool_machines_app_live_idx ON pool_machines (app) WHERE ended_at IS NULL;

-- A leased task's pool machine, and how long its lease holds without a
-- heartbeat: the sweep takes back a lease whose heartbeats stopped
-- (lease_until) well before the task's deadline, which bounds the task
-- whatever its heartbeats.
ALTER TABLE tasks
    ADD COLUMN pool_machine_id bigint,
    ADD COLUMN lease_until timestamptz;

CREATE INDEX tasks_lease_idx ON tasks (lease_until) WHERE status = 'processing' AND lease_until IS NOT NULL;

-- +goose Down
DROP INDEX tasks_lease_idx;
ALTER TABLE tasks DROP COLUMN lease_until, DROP COLUMN pool_machine_id;
DROP TABLE pool_machines;
DROP TABLE pools;
