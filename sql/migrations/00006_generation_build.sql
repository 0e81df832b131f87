-- +goose Up

-- A large phase transition writes the next file generation and its tasks in
-- chunks, one transaction each, so that the next phase's machines start on
-- the first chunk instead of after the whole generation (at 100,000 files,
-- writing it all took about 3 s). While a generation is being written the
-- batch is already in its next phase and records where the writing got to:
--
--   build_from    the phase whose transform makes the generation (its tasks
--                 are read back with the previous generation);
--   build_cursor  the ordinal of the last file of the previous generation
--                 whose outputs (files, tasks, problems) are committed.
--
-- Both are NULL when no generation is being written. The fan-in leaves a
-- phase alone while they are set (its tasks are not all written yet), the
-- launcher keeps coming back, and the sweep's backstop restarts a writer
-- that was lost.
ALTER TABLE batches
    ADD COLUMN build_from   text,
    ADD COLUMN build_cursor integer,
    ADD CONSTRAINT batches_build_both CHECK ((build_from IS NULL) = (build_cursor IS NULL));

-- +goose Down
ALTER TABLE batches
    DROP CONSTRAINT batches_build_both,
    DROP COLUMN build_cursor,
    DROP COLUMN build_from;
