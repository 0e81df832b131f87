-- +goose Up

-- failing_since is when a task's worker first reported a transient error
-- ("retryable": true: storage out, say) in a row of them: such errors are
-- retried for TRANSIENT_RETRY_WINDOW from then, beyond TASK_MAX_ATTEMPTS,
-- so an outage of a few minutes fails no file.
ALTER TABLE tasks ADD COLUMN failing_since timestamptz;

-- +goose Down
ALTER TABLE tasks DROP COLUMN failing_since;
