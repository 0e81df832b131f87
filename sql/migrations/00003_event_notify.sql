-- +goose Up

-- Live event streams (GET /batches/:id/stream) wake on NOTIFY instead of
-- polling. The trigger is per statement, not per row, and notifies once per
-- batch the statement touched: a group of 256 callbacks inserts its
-- task.completed events in one statement, and costs one NOTIFY per batch,
-- not 256. Postgres also folds identical notifications (same channel and
-- payload) within one transaction, so a transaction notifies each batch at
-- most once whatever it inserts. The payload is only the batch id: listeners
-- read the events themselves, after their own cursor, so a notification is
-- a hint and none carries data that could be lost.
-- +goose StatementBegin
CREATE FUNCTION batch_events_notify() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_notify('batch_events', b.batch_id)
    FROM (SELECT DISTINCT batch_id FROM new_rows) b;
    RETURN NULL;
END
$$;
-- +goose StatementEnd

CREATE TRIGGER batch_events_notify
    AFTER INSERT ON batch_events
    REFERENCING NEW TABLE AS new_rows
    FOR EACH STATEMENT EXECUTE FUNCTION batch_events_notify();

-- +goose Down
DROP TRIGGER batch_events_notify ON batch_events;
DROP FUNCTION batch_events_notify();
