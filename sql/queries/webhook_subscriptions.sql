-- WebhookSubscriptionAnyEnabled tells whether any subscription is enabled:
-- without one the outbox stays empty and the dispatcher idles.
-- name: WebhookSubscriptionAnyEnabled :one
SELECT EXISTS (SELECT 1 FROM webhook_subscriptions WHERE enabled)::boolean;

-- WebhookSubscriptionDelete deletes a subscription, its deliveries and
-- their attempts.
-- name: WebhookSubscriptionDelete :execrows
DELETE FROM webhook_subscriptions WHERE id = @id;

-- WebhookSubscriptionGetByID is one subscription.
-- name: WebhookSubscriptionGetByID :one
SELECT * FROM webhook_subscriptions WHERE id = @id;

-- WebhookSubscriptionGetForUpdate is one subscription, locked until the
-- transaction ends: a delivery's outcome and its subscription's failing
-- clock change together.
-- name: WebhookSubscriptionGetForUpdate :one
SELECT * FROM webhook_subscriptions WHERE id = @id FOR UPDATE;

-- WebhookSubscriptionInsert adds a subscription.
-- name: WebhookSubscriptionInsert :one
INSERT INTO webhook_subscriptions (id, url, event_types, batch_id, description, secret_sealed, key_id)
VALUES (@id, @url, @event_types, @batch_id, @description, @secret_sealed, @key_id)
RETURNING *;

-- WebhookSubscriptionList is every subscription, oldest first.
-- name: WebhookSubscriptionList :many
SELECT * FROM webhook_subscriptions ORDER BY created_at, id;

-- WebhookSubscriptionSetEnabled enables a subscription (clearing its
-- reason and failing clock) or disables it with a reason.
-- name: WebhookSubscriptionSetEnabled :one
UPDATE webhook_subscriptions
SET enabled = @enabled,
    disabled_reason = CASE WHEN @enabled::boolean THEN NULL ELSE @reason::text END,
    failing_since = CASE WHEN @enabled::boolean THEN NULL ELSE failing_since END,
    updated_at = now()
WHERE id = @id
RETURNING *;

-- WebhookSubscriptionSetFailing sets (or, null, clears) the start of a
-- subscription's run of failures.
-- name: WebhookSubscriptionSetFailing :exec
UPDATE webhook_subscriptions SET failing_since = @failing_since, updated_at = now() WHERE id = @id;
