-- +goose Up

-- unheard marks a task whose current attempt lived through a time in
-- which no orchestrator could accept callbacks (jobs.Listener): if it
-- then times out, its worker may have given up calling back, so the
-- timeout is not the machine's failure and costs none of
-- TASK_MAX_ATTEMPTS. excused counts such timeouts, which are bounded
-- apart (a machine that truly hangs across outage after outage still
-- ends).
ALTER TABLE tasks ADD COLUMN unheard boolean NOT NULL DEFAULT false;
ALTER TABLE tasks ADD COLUMN excused integer NOT NULL DEFAULT 0;

-- machine_gone says why the current attempt's machine is known to have
-- ended without calling back (stopped, failed, or no longer listed by the
-- Machines API): the sweep's check of running machines sets it, with a
-- short deadline for a callback still in flight, and it is the task's
-- error if the deadline passes.
ALTER TABLE tasks ADD COLUMN machine_gone text;

-- +goose Down
ALTER TABLE tasks DROP COLUMN machine_gone;
ALTER TABLE tasks DROP COLUMN excused;
ALTER TABLE tasks DROP COLUMN unheard;
