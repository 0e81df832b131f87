-- +goose Up

-- Each orchestrator process writes here about once a second that it is
-- up and can reach Postgres, so can accept callbacks. A silence of every
-- process (Postgres away or failed over, a partition, the fleet down) is
-- time in which no callback could be committed: the first process to be
-- heard again extends the deadlines of the running tasks by it
-- (jobs.Listener), so that no task is timed out for the orchestrator's
-- own deafness.
CREATE TABLE listeners (
    process_id text        PRIMARY KEY,
    seen_at    timestamptz NOT NULL
);

-- +goose Down
DROP TABLE listeners;
