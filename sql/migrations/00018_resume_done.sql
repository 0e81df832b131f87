-- +goose Up

-- kept marks a file that keeps the results of an earlier pass of its
-- batch: an admin retry of a DONE batch reruns only what failed, so it
-- marks its final generation's files (jobs.ResumeBatch), and no phase
-- works on a kept file again. Transforms pass the mark on to a file's
-- outputs; a file made by a rerun is not kept, and flows through the
-- phases after it.
ALTER TABLE files ADD COLUMN kept boolean NOT NULL DEFAULT false;

-- +goose Down
ALTER TABLE files DROP COLUMN kept;
