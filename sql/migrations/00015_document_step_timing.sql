-- +goose Up

-- step_timing is when each step of a document version ran, as one object
-- per step: {"download": {"startedAt", "completedAt", "runs", "workMs"},
-- ...}: when its first run started, when the run that finished it ended
-- (null until then), how many runs it took (those that committed work or
-- failed; a run that waited for the provider's rate limit is not one), and
-- the time those runs took in all. A step's wall time less workMs is time
-- spent waiting between runs. The step job writes it in each run's
-- transaction, so it agrees with the step's outcome.
ALTER TABLE documents ADD COLUMN step_timing jsonb NOT NULL DEFAULT '{}';

-- +goose Down
ALTER TABLE documents DROP COLUMN step_timing;
