-- +goose Up

-- unlaunched counts a task's launches that made no machine (Fly's outage
-- answering 503 to the launch and the lookup, a launcher killed between
-- claiming and recording). They cost none of TASK_MAX_ATTEMPTS, since no
-- worker ran; this bounds them apart, so that a task whose launches never
-- make a machine ends instead of being launched for ever.
ALTER TABLE tasks ADD COLUMN unlaunched integer NOT NULL DEFAULT 0;

-- +goose Down
ALTER TABLE tasks DROP COLUMN unlaunched;
