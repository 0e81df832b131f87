-- +goose Up

-- How many tasks of each batch and phase are in each status, kept by
-- statement-level triggers on tasks, so that a status document or a phase's
-- end reads a handful of rows instead of counting 100,000 tasks. Counting
-- was an index-only scan in name only: the rows had just been updated, so
-- every count visited the heap, and a client polling the status of a
-- 100,000-file batch kept a core of Postgres busy.
--
-- Every statement that inserts, updates or deletes tasks adds its net change
-- per (batch, phase, status) in one upsert, whatever path it took (the
-- launcher, callbacks, the sweep, reset, retry, a COPY, an operator's psql).
-- A callback group changes two or three rows per (batch, phase):
-- processing down, completed and failed up; a few HOT updates per group.
-- Within a statement rows are upserted in key order, so no two statements
-- deadlock on the counters alone.
--
-- This reverses 00001's choice of no per-callback counters. The row
-- (batch, phase, processing) is hot: every transaction that ends or claims
-- tasks of the phase holds it from its statement to its commit, so such
-- transactions of one batch commit one after the other. Callbacks already
-- do (one committer, CALLBACK_COMMITTERS=1, is the fastest setting), and a
-- status read no longer costs a scan of the batch's tasks, which it did on
-- every poll.
CREATE TABLE task_counts (
    batch_id text   NOT NULL REFERENCES batches (id) ON DELETE CASCADE,
    phase    text   NOT NULL,
    status   text   NOT NULL,
    n        bigint NOT NULL,
    PRIMARY KEY (batch_id, phase, status)
);

-- No task may change between the count and the triggers' creation (an
-- older instance still running during a deploy): writers wait until this
-- migration commits.
LOCK TABLE tasks IN SHARE ROW EXCLUSIVE MODE;

INSERT INTO task_counts (batch_id, phase, status, n)
SELECT batch_id, phase, status, count(*) FROM tasks GROUP BY 1, 2, 3;

-- +goose StatementBegin
CREATE FUNCTION task_counts_insert() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO task_counts AS c (batch_id, phase, status, n)
    SELECT batch_id, phase, status, count(*) FROM new_rows
    GROUP BY 1, 2, 3 ORDER BY 1, 2, 3
    ON CONFLICT (batch_id, phase, status) DO UPDATE SET n = c.n + excluded.n;
    RETURN NULL;
END
$$;
-- +goose StatementEnd

-- +goose StatementBegin
CREATE FUNCTION task_counts_update() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO task_counts AS c (batch_id, phase, status, n)
    SELECT batch_id, phase, status, sum(d) FROM (
        SELECT batch_id, phase, status, 1 AS d FROM new_rows
        UNION ALL
        SELECT batch_id, phase, status, -1 FROM old_rows
    ) changes
    GROUP BY 1, 2, 3 HAVING sum(d) <> 0 ORDER BY 1, 2, 3
    ON CONFLICT (batch_id, phase, status) DO UPDATE SET n = c.n + excluded.n;
    RETURN NULL;
END
$$;
-- +goose StatementEnd

-- Deletes only decrement: when a batch is deleted its counters go with it
-- (ON DELETE CASCADE), and an insert here could race that cascade.
-- +goose StatementBegin
CREATE FUNCTION task_counts_delete() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    UPDATE task_counts c SET n = c.n - gone.n
    FROM (SELECT batch_id, phase, status, count(*) AS n FROM old_rows GROUP BY 1, 2, 3 ORDER BY 1, 2, 3) gone
    WHERE c.batch_id = gone.batch_id AND c.phase = gone.phase AND c.status = gone.status;
    RETURN NULL;
END
$$;
-- +goose StatementEnd

-- +goose StatementBegin
CREATE FUNCTION task_counts_truncate() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    DELETE FROM task_counts;
    RETURN NULL;
END
$$;
-- +goose StatementEnd

CREATE TRIGGER task_counts_insert
    AFTER INSERT ON tasks
    REFERENCING NEW TABLE AS new_rows
    FOR EACH STATEMENT EXECUTE FUNCTION task_counts_insert();

CREATE TRIGGER task_counts_update
    AFTER UPDATE ON tasks
    REFERENCING OLD TABLE AS old_rows NEW TABLE AS new_rows
    FOR EACH STATEMENT EXECUTE FUNCTION task_counts_update();

CREATE TRIGGER task_counts_delete
    AFTER DELETE ON tasks
    REFERENCING OLD TABLE AS old_rows
    FOR EACH STATEMENT EXECUTE FUNCTION task_counts_delete();

CREATE TRIGGER task_counts_truncate
    AFTER TRUNCATE ON tasks
    FOR EACH STATEMENT EXECUTE FUNCTION task_counts_truncate();

-- The launcher claims a phase's pending tasks in creation order. One index
-- now serves that and every lookup by (batch, phase, status): with two, the
-- planner, right after a transition's COPY and before any ANALYZE, took the
-- one without the order and sorted every pending task of the phase to claim
-- 256 of them (90 ms a claim at 100,000 files, and quadratic overall).
CREATE INDEX tasks_batch_phase_status_created_idx ON tasks (batch_id, phase, status, created_at, id);
DROP INDEX tasks_batch_phase_status_idx;
DROP INDEX tasks_pending_idx;

-- +goose Down
CREATE INDEX tasks_pending_idx ON tasks (batch_id, phase, created_at, id) WHERE status = 'pending';
CREATE INDEX tasks_batch_phase_status_idx ON tasks (batch_id, phase, status);
DROP INDEX tasks_batch_phase_status_created_idx;
DROP TRIGGER task_counts_truncate ON tasks;
DROP TRIGGER task_counts_delete ON tasks;
DROP TRIGGER task_counts_update ON tasks;
DROP TRIGGER task_counts_insert ON tasks;
DROP FUNCTION task_counts_truncate();
DROP FUNCTION task_counts_delete();
DROP FUNCTION task_counts_update();
DROP FUNCTION task_counts_insert();
DROP TABLE task_counts;
