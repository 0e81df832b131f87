-- MachineBatchesExisting are the ids among ids that name a batch (the
-- orphan reaper's events go to batches that exist).
-- name: MachineBatchesExisting :many
SELECT id FROM batches WHERE id = ANY(@ids::text[]);

-- MachineFleetUsage (the launchers' spend bounds, MAX_MACHINES and
-- MAX_MACHINE_SECONDS_PER_HOUR) is what the fleet runs now and has run over the last
-- hour. running: machine-per-task tasks that are processing (a machine
-- launched or being launched) and pool machines not ended (one being
-- launched included). seconds: each such machine's time within the last
-- hour, from its launch (a task's launched_at, a pool machine's
-- created_at) to its end (finished_at, ended_at) or now. A task keeps its
-- latest attempt only, and a machine per task counts as the report
-- machine-seconds counts it: until its task ended.
-- name: MachineFleetUsage :one
WITH win AS (SELECT clock_timestamp() AS now, clock_timestamp() - interval '1 hour' AS since),
task_machines AS (
    SELECT t.launched_at AS started, t.finished_at AS ended, t.status = 'processing' AS running
    FROM tasks t
    WHERE t.status = 'processing' AND t.pool_machine_id IS NULL
    UNION ALL
    SELECT t.launched_at, t.finished_at, false
    FROM tasks t, win
    WHERE t.finished_at > win.since AND t.pool_machine_id IS NULL AND t.launched_at IS NOT NULL AND t.status <> 'processing'
      AND (t.ended_by = 'callback' OR t.machine_id IS NOT NULL)
),
pool_machines_ AS (
    SELECT m.created_at AS started, m.ended_at AS ended, m.ended_at IS NULL AS running
    FROM pool_machines m
    WHERE m.ended_at IS NULL
    UNION ALL
    SELECT m.created_at, m.ended_at, false
    FROM pool_machines m, win
    WHERE m.ended_at > win.since
),
all_machines AS (
    SELECT * FROM task_machines UNION ALL SELECT * FROM pool_machines_
)
SELECT
    count(*) FILTER (WHERE a.running)::bigint AS running,
    coalesce(sum(greatest(0, extract(epoch FROM least(coalesce(a.ended, win.now), win.now) - greatest(coalesce(a.started, win.now), win.since)))), 0)::float8
        AS seconds
FROM all_machines a, win;

-- MachinePoolApps are the apps of the pools, open or closed: their
-- machines may outlive them.
-- name: MachinePoolApps :many
SELECT DISTINCT app FROM pools ORDER BY app;

-- MachinePoolOwners are the pool machines among ids, and whether each
-- has not ended.
-- name: MachinePoolOwners :many
SELECT id, machine_id, (ended_at IS NULL)::bool AS live FROM pool_machines WHERE id = ANY(@ids::bigint[]);

-- MachineTaskOwners are the tasks among ids, with what says whether a
-- machine is theirs: their status, launch attempt and machine.
-- name: MachineTaskOwners :many
SELECT id, batch_id, phase, status, attempt, machine_id FROM tasks WHERE id = ANY(@ids::text[]);
