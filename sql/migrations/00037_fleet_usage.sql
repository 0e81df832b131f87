-- +goose Up

-- The fleet's spend (MAX_MACHINE_SECONDS_PER_HOUR) counts the machine
-- time of the last hour: the machine-per-task tasks that ended in it and
-- the pool machines that ended in it, besides those still running. These
-- find the ended ones without reading every task.
CREATE INDEX tasks_machine_finished_idx ON tasks (finished_at)
    WHERE pool_machine_id IS NULL AND launched_at IS NOT NULL AND finished_at IS NOT NULL;
CREATE INDEX pool_machines_ended_idx ON pool_machines (ended_at) WHERE ended_at IS NOT NULL;

-- The (batch, phase)s whose launches a spend bound (MAX_MACHINES,
-- MAX_MACHINE_SECONDS_PER_HOUR) has held back: the bound, and since when
-- it first did (the phase.launch_bounded event's occasion); held while it
-- still does, since held_since, for the status document.
CREATE TABLE launch_bounds (
    batch_id   text        NOT NULL REFERENCES batches (id) ON DELETE CASCADE,
    phase      text        NOT NULL,
    bound      text        NOT NULL,
    since      timestamptz NOT NULL DEFAULT now(),
    held       boolean     NOT NULL DEFAULT true,
    held_since timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (batch_id, phase)
);

-- +goose Down
DROP TABLE launch_bounds;
DROP INDEX pool_machines_ended_idx;
DROP INDEX tasks_machine_finished_idx;
