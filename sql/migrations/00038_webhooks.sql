-- +goose Up

-- Webhooks (package webhook): subscriptions to event types, an outbox the
-- events of interest are copied into by triggers in the transactions that
-- write them, and the deliveries made of them with their attempts.

-- webhook_subscriptions are the receivers. The signing secret is sealed
-- (AES-GCM under WEBHOOK_SECRET_KEY, key_id naming that key); it is never
-- stored in the clear.
CREATE TABLE webhook_subscriptions (
    id              text        PRIMARY KEY,
    url             text        NOT NULL,
    event_types     text[]      NOT NULL,
    -- batch_id, when set, limits the subscription to that batch's events.
    batch_id        text,
    description     text        NOT NULL DEFAULT '',
    secret_sealed   bytea       NOT NULL,
    key_id          text        NOT NULL,
    enabled         boolean     NOT NULL DEFAULT true,
    disabled_reason text,
    -- failing_since is the first failed attempt of the current run of
    -- failures; a success clears it.
    failing_since   timestamptz,
    created_at      timestamptz NOT NULL DEFAULT now(),
    updated_at      timestamptz NOT NULL DEFAULT now()
);

-- webhook_outbox holds the events some enabled subscription wanted when
-- they were written, until the dispatcher turns them into deliveries.
CREATE TABLE webhook_outbox (
    id         bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    type       text        NOT NULL,
    batch_id   text,
    -- payload is the delivery's body: {"type", "timestamp", "data"}.
    payload    jsonb       NOT NULL,
    created_at timestamptz NOT NULL DEFAULT now()
);

-- webhook_deliveries are one event for one subscription; id is the
-- webhook-id header, the same on every attempt and replay.
CREATE TABLE webhook_deliveries (
    id              text        PRIMARY KEY,
    subscription_id text        NOT NULL REFERENCES webhook_subscriptions (id) ON DELETE CASCADE,
    event_type      text        NOT NULL,
    batch_id        text,
    -- body is the exact bytes signed and sent.
    body            text        NOT NULL,
    status          text        NOT NULL DEFAULT 'pending'
                    CHECK (status IN ('pending', 'succeeded', 'failed')),
    attempts        integer     NOT NULL DEFAULT 0,
    last_error      text,
    -- window_start is when the current run of attempts began (creation or
    -- the last replay): retries stop WEBHOOK_RETRY_WINDOW after it.
    window_start    timestamptz NOT NULL DEFAULT now(),
    next_attempt_at timestamptz,
    created_at      timestamptz NOT NULL DEFAULT now(),
    updated_at      timestamptz NOT NULL DEFAULT now()
);

CREATE INDEX webhook_deliveries_subscription_idx ON webhook_deliveries (subscription_id, created_at DESC, id);

-- webhook_attempts record each request of a delivery.
CREATE TABLE webhook_attempts (
    delivery_id     text        NOT NULL REFERENCES webhook_deliveries (id) ON DELETE CASCADE,
    attempt         integer     NOT NULL,
    status_code     integer,
    error           text,
    duration_ms     integer     NOT NULL,
    response_excerpt text       NOT NULL DEFAULT '',
    attempted_at    timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (delivery_id, attempt)
);

-- The triggers copy into the outbox only the rows some enabled
-- subscription wants: with no subscription they stop at one probe of
-- webhook_subscriptions, and the task events of a 100,000-file batch are
-- never copied unless a subscription names their type. The batch events'
-- trigger is per statement, over the statement's rows (a callback group
-- inserts hundreds at once).
-- +goose StatementBegin
CREATE FUNCTION batch_events_webhook_outbox() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    IF NOT EXISTS (SELECT 1 FROM webhook_subscriptions WHERE enabled) THEN
        RETURN NULL;
    END IF;
    INSERT INTO webhook_outbox (type, batch_id, payload)
    SELECT n.type, n.batch_id, jsonb_build_object(
        'type', n.type,
        'timestamp', to_char(n.created_at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"'),
        'data', n.data || jsonb_strip_nulls(jsonb_build_object(
            'batch_id', n.batch_id, 'phase', n.phase, 'task_id', n.task_id, 'event_id', n.id)))
    FROM new_rows n
    WHERE EXISTS (SELECT 1 FROM webhook_subscriptions s
                  WHERE s.enabled AND n.type = ANY (s.event_types)
                    AND (s.batch_id IS NULL OR s.batch_id = n.batch_id))
    ORDER BY n.id;
    RETURN NULL;
END
$$;
-- +goose StatementEnd

CREATE TRIGGER batch_events_webhook_outbox
    AFTER INSERT ON batch_events
    REFERENCING NEW TABLE AS new_rows
    FOR EACH STATEMENT EXECUTE FUNCTION batch_events_webhook_outbox();

-- Documents are no batch events: a document's move to completed or failed
-- is copied by a row trigger, in the transaction that moves it.
-- +goose StatementBegin
CREATE FUNCTION documents_webhook_outbox() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE
    event text := 'document.' || NEW.status;
BEGIN
    INSERT INTO webhook_outbox (type, batch_id, payload)
    SELECT event, NEW.batch_id, jsonb_build_object(
        'type', event,
        'timestamp', to_char(clock_timestamp() AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"'),
        'data', jsonb_strip_nulls(jsonb_build_object(
            'document_id', NEW.id, 'r2_key', NEW.r2_key, 'version', NEW.version,
            'batch_id', NEW.batch_id, 'status', NEW.status, 'total_chunks', NEW.total_chunks,
            'error', CASE WHEN NEW.status = 'failed' THEN NEW.errors -> -1 ->> 'error' END)))
    WHERE EXISTS (SELECT 1 FROM webhook_subscriptions s
                  WHERE s.enabled AND event = ANY (s.event_types)
                    AND (s.batch_id IS NULL OR s.batch_id = NEW.batch_id));
    RETURN NULL;
END
$$;
-- +goose StatementEnd

CREATE TRIGGER documents_webhook_outbox
    AFTER UPDATE OF status ON documents
    FOR EACH ROW
    WHEN (NEW.status IN ('completed', 'failed') AND OLD.status IS DISTINCT FROM NEW.status)
    EXECUTE FUNCTION documents_webhook_outbox();

-- +goose Down
DROP TRIGGER documents_webhook_outbox ON documents;
DROP FUNCTION documents_webhook_outbox();
DROP TRIGGER batch_events_webhook_outbox ON batch_events;
DROP FUNCTION batch_events_webhook_outbox();
DROP TABLE webhook_attempts;
DROP TABLE webhook_deliveries;
DROP TABLE webhook_outbox;
DROP TABLE webhook_subscriptions;
