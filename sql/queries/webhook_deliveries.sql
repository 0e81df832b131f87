-- WebhookDeliveryGetByID is one delivery.
-- name: WebhookDeliveryGetByID :one
SELECT * FROM webhook_deliveries WHERE id = @id;

-- WebhookDeliveryInsertFromOutbox claims up to max_events events of the
-- outbox (others' claims skipped) and makes a delivery of each for every
-- enabled subscription that wants it; an event no subscription wants any
-- more is dropped. The body is the event's payload as it will be signed
-- and sent, the same on every attempt.
-- name: WebhookDeliveryInsertFromOutbox :many
WITH claimed AS (
    DELETE FROM webhook_outbox
    WHERE webhook_outbox.id IN (SELECT o.id FROM webhook_outbox o ORDER BY o.id LIMIT @max_events::int FOR UPDATE SKIP LOCKED)
    RETURNING webhook_outbox.id, webhook_outbox.type, webhook_outbox.batch_id, webhook_outbox.payload
)
INSERT INTO webhook_deliveries (id, subscription_id, event_type, batch_id, body)
SELECT 'msg_' || replace(gen_random_uuid()::text, '-', ''), s.id, c.type, c.batch_id, c.payload::text
FROM claimed c
JOIN webhook_subscriptions s
  ON s.enabled AND c.type = ANY (s.event_types) AND (s.batch_id IS NULL OR s.batch_id = c.batch_id)
ORDER BY c.id, s.id
RETURNING webhook_deliveries.id;

-- WebhookDeliveryListBySubscription is a subscription's deliveries, newest
-- first; an empty status is any.
-- name: WebhookDeliveryListBySubscription :many
SELECT * FROM webhook_deliveries
WHERE subscription_id = @subscription_id AND (@status::text = '' OR status = @status::text)
ORDER BY created_at DESC, id DESC
LIMIT @max_rows::int;

-- WebhookDeliveryRecord records the outcome of an attempt.
-- name: WebhookDeliveryRecord :one
UPDATE webhook_deliveries
SET attempts = @attempts, status = @status, last_error = @last_error, next_attempt_at = @next_attempt_at, updated_at = now()
WHERE id = @id
RETURNING *;

-- WebhookDeliveryReplay makes a finished delivery pending again, its retry
-- window starting now; nil when it is still pending.
-- name: WebhookDeliveryReplay :one
UPDATE webhook_deliveries
SET status = 'pending', window_start = now(), next_attempt_at = now(), updated_at = now()
WHERE id = @id AND status <> 'pending'
RETURNING *;
