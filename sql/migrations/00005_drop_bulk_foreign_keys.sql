-- +goose Up

-- Foreign keys off the tables written in bulk. Each checked row ran a query
-- and, for files and tasks, locked the row it referred to (FOR KEY SHARE
-- writes that row's header, so a 110,000-file generation also rewrote the
-- 110,000 rows of the one before). At 100,000 files these checks were about
-- half of a phase transition: writing the next generation (batch and parent)
-- and its tasks (batch and file). batch_events lost its check because every
-- callback group inserted a row per callback, each checking the batch again.
--
-- Integrity does not rest on them: files, tasks and events are only written
-- by the orchestrator's own transactions, which hold the batch (its row or
-- its lock) and write a parent before what refers to it. Nothing deletes a
-- batch; removing one means deleting its rows from files, tasks, chunks and
-- batch_events too (task_counts still follows batches by cascade).
ALTER TABLE files DROP CONSTRAINT files_batch_id_fkey;
ALTER TABLE files DROP CONSTRAINT files_parent_id_fkey;
ALTER TABLE tasks DROP CONSTRAINT tasks_batch_id_fkey;
ALTER TABLE tasks DROP CONSTRAINT tasks_file_id_fkey;
ALTER TABLE batch_events DROP CONSTRAINT batch_events_batch_id_fkey;

-- +goose Down
ALTER TABLE batch_events ADD CONSTRAINT batch_events_batch_id_fkey
    FOREIGN KEY (batch_id) REFERENCES batches (id) ON DELETE CASCADE;
ALTER TABLE tasks ADD CONSTRAINT tasks_file_id_fkey
    FOREIGN KEY (file_id) REFERENCES files (id) ON DELETE CASCADE;
ALTER TABLE tasks ADD CONSTRAINT tasks_batch_id_fkey
    FOREIGN KEY (batch_id) REFERENCES batches (id) ON DELETE CASCADE;
ALTER TABLE files ADD CONSTRAINT files_parent_id_fkey
    FOREIGN KEY (parent_id) REFERENCES files (id) ON DELETE CASCADE;
ALTER TABLE files ADD CONSTRAINT files_batch_id_fkey
    FOREIGN KEY (batch_id) REFERENCES batches (id) ON DELETE CASCADE;
