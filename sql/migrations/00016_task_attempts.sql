-- +goose Up

-- Task attempts (issue 19). tasks.attempt stays the launch sequence number
-- that fences machines and callbacks; failures counts the attempts that
-- ended in a way worth another machine (a timeout, a transient worker
-- error, a launch that made none). The task fails for good once the next
-- failure would reach TASK_MAX_ATTEMPTS.
--
-- A task to be retried goes back to pending with ended_by 'retry' while it
-- still has its last attempt's machine_id: the launcher destroys that
-- machine (or gives up after deadline, reused as the retirement's limit)
-- before it claims the task again, so a task never has two machines.
-- superseded_token_hashes are the tokens of the attempts before the
-- current one: their late callbacks are answered 409, not 401.
ALTER TABLE tasks
    ADD COLUMN failures integer NOT NULL DEFAULT 0,
    ADD COLUMN superseded_token_hashes bytea[] NOT NULL DEFAULT '{}',
    DROP CONSTRAINT tasks_ended_by_check,
    ADD CONSTRAINT tasks_ended_by_check CHECK (ended_by IN ('callback', 'timeout', 'reset', 'retry'));

-- When the current run of transient launch errors (Fly 5xx, timeouts, no
-- capacity) of the batch's phase began; NULL when there is none. The batch
-- errs once it has lasted LAUNCH_OUTAGE_BUDGET.
ALTER TABLE batches ADD COLUMN launch_outage_since timestamptz;

-- +goose Down
ALTER TABLE batches DROP COLUMN launch_outage_since;
UPDATE tasks SET ended_by = NULL WHERE ended_by = 'retry';
ALTER TABLE tasks
    DROP CONSTRAINT tasks_ended_by_check,
    ADD CONSTRAINT tasks_ended_by_check CHECK (ended_by IN ('callback', 'timeout', 'reset')),
    DROP COLUMN superseded_token_hashes,
    DROP COLUMN failures;
