-- +goose Up

-- A batch's priority (the queue message's "priority"): -10 (lowest) to 10
-- (highest), 0 by default. Launches, pool leases and the batch's River
-- jobs go to higher priorities first (docs/architecture.md, Priorities).
ALTER TABLE batches ADD COLUMN priority smallint NOT NULL DEFAULT 0
    CONSTRAINT batches_priority_range CHECK (priority BETWEEN -10 AND 10);

-- river_priority is the River priority (1 first .. 4 last) of the jobs of
-- a batch of priority p: 5 to 10 run at 1, with the jobs that belong to no
-- batch (the sweep, machine destruction); 0 to 4 at 2; -5 to -1 at 3;
-- -10 to -6 at 4.
-- +goose StatementBegin
CREATE FUNCTION river_priority(p smallint) RETURNS smallint
LANGUAGE sql IMMUTABLE AS $$
    SELECT (CASE WHEN p >= 5 THEN 1 WHEN p >= 0 THEN 2 WHEN p >= -5 THEN 3 ELSE 4 END)::smallint
$$;
-- +goose StatementEnd

-- Every River job of a batch takes its batch's priority as it is
-- inserted, whichever code inserts it: a job whose arguments name a batch
-- (batch_id), a document of a batch (document_id) or a batch's pool
-- (pool_id). A job that asked for a priority of its own (other than
-- River's default, 1) keeps it. In the inserting transaction, so a job
-- inserted with its batch sees it.
-- +goose StatementBegin
CREATE FUNCTION river_job_batch_priority() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE
    p smallint;
BEGIN
    IF NEW.priority <> 1 THEN
        RETURN NEW;
    END IF;
    IF NEW.args ? 'batch_id' THEN
        SELECT b.priority INTO p FROM batches b WHERE b.id = NEW.args->>'batch_id';
    ELSIF jsonb_typeof(NEW.args->'document_id') = 'number' THEN
        -- A document posted on its own (no batch) counts as priority 0.
        SELECT coalesce(b.priority, 0) INTO p FROM documents d LEFT JOIN batches b ON b.id = d.batch_id
        WHERE d.id = (NEW.args->>'document_id')::bigint;
    ELSIF jsonb_typeof(NEW.args->'pool_id') = 'number' THEN
        SELECT b.priority INTO p FROM pools pl JOIN batches b ON b.id = pl.batch_id
        WHERE pl.id = (NEW.args->>'pool_id')::bigint;
    END IF;
    IF p IS NOT NULL THEN
        NEW.priority := river_priority(p);
    END IF;
    RETURN NEW;
END
$$;
-- +goose StatementEnd

CREATE TRIGGER river_job_batch_priority BEFORE INSERT ON river_job
    FOR EACH ROW EXECUTE FUNCTION river_job_batch_priority();

-- +goose Down
DROP TRIGGER river_job_batch_priority ON river_job;
DROP FUNCTION river_job_batch_priority();
DROP FUNCTION river_priority(smallint);
ALTER TABLE batches DROP COLUMN priority;
