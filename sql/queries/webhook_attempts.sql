-- WebhookAttemptInsert records one request of a delivery.
-- name: WebhookAttemptInsert :exec
INSERT INTO webhook_attempts (delivery_id, attempt, status_code, error, duration_ms, response_excerpt)
VALUES (@delivery_id, @attempt, @status_code, @error, @duration_ms, @response_excerpt);

-- WebhookAttemptListByDelivery is a delivery's attempts, first first.
-- name: WebhookAttemptListByDelivery :many
SELECT * FROM webhook_attempts WHERE delivery_id = @delivery_id ORDER BY attempt;
