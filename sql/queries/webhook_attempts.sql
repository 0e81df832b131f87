-- WebhookAttemptInsert records one request of a delivery.
-- name: WebhookAttemptInsert :exec
INSERT INTO webhook_attempts (delivery_id, attempt, status_code, error, duration_ms, response_excerpt)
VALUES (@delivery_id, @attempt, @status_code, @error, @duration_ms, @response_excerpt);

-- WebhookAttemptListByDelivery is a delivery's attempts, first first.
-- name: WebhookAttemptListByDelivery :many
SELECT * FROM webhook_attempts WHERE delivery_id = @delivery_id ORDER BY attempt;

-- WebhookAttemptSucceededSince tells whether any delivery of a
-- subscription was taken by its receiver since a time.
-- name: WebhookAttemptSucceededSince :one
SELECT EXISTS (
    SELECT 1 FROM webhook_attempts a JOIN webhook_deliveries d ON d.id = a.delivery_id
    WHERE d.subscription_id = @subscription_id AND d.updated_at >= @since::timestamptz
      AND a.attempted_at >= @since::timestamptz AND a.status_code BETWEEN 200 AND 299
)::boolean AS succeeded;
