-- +goose Up

-- Retention (RETENTION_DAYS, jobs/retention.go) removes the processing state
-- of batches that finished long enough ago: tasks, chunks and their items,
-- events and every file generation but the batch's final one. The batch row
-- stays, and says what happened:
--
--   pruned_counts  the batch's task counts per phase and status (as
--                  task_counts held them), written when the removal begins;
--                  from then on the status document reads them instead of
--                  the tasks, which are going. NULL: nothing was removed.
--   pruned_at      when the removal ended. A removal that was interrupted
--                  (pruned_counts set, pruned_at NULL) is taken up again by
--                  the next run.
ALTER TABLE batches
    ADD COLUMN pruned_counts jsonb,
    ADD COLUMN pruned_at     timestamptz,
    ADD CONSTRAINT batches_pruned_counted CHECK (pruned_at IS NULL OR pruned_counts IS NOT NULL);

-- Finished batches not yet pruned, oldest first: the retention job's
-- candidates. Pruned batches leave the index, so it holds about
-- RETENTION_DAYS of batches.
CREATE INDEX batches_prunable_idx ON batches (completed_at) WHERE completed_at IS NOT NULL AND pruned_at IS NULL;

-- +goose Down
DROP INDEX batches_prunable_idx;
ALTER TABLE batches
    DROP CONSTRAINT batches_pruned_counted,
    DROP COLUMN pruned_at,
    DROP COLUMN pruned_counts;
