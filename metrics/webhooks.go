package metrics

import "github.com/prometheus/client_golang/prometheus"

// Results of a webhook delivery's attempt (the result label of
// orchestrator_webhook_attempts_total).
const (
	// WebhookSucceeded: the receiver answered 2xx.
	WebhookSucceeded = "succeeded"
	// WebhookRetrying: the attempt failed and will be retried (no answer,
	// 5xx, 408, 429).
	WebhookRetrying = "retrying"
	// WebhookFailed: the delivery failed for good: refused (another 4xx,
	// a redirect, a forbidden address) or out of retries.
	WebhookFailed = "failed"
)

// registerWebhooks makes and registers the webhooks' metrics.
func (m *Metrics) registerWebhooks() {
	m.webhookAttempts = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "orchestrator_webhook_attempts_total",
		Help: "Attempts to deliver a webhook, by result (succeeded, retrying, failed).",
	}, []string{"result"})
	m.webhookDisabled = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "orchestrator_webhook_subscriptions_disabled_total",
		Help: "Webhook subscriptions disabled after failing for WEBHOOK_DISABLE_AFTER, or when a delivery gave up.",
	})
	m.reg.MustRegister(m.webhookAttempts, m.webhookDisabled)
}

// WebhookAttempt counts an attempt of a webhook delivery with its result.
func (m *Metrics) WebhookAttempt(result string) {
	if m == nil {
		return
	}
	m.webhookAttempts.WithLabelValues(result).Inc()
}

// WebhookDisabled counts a subscription disabled for its failures.
func (m *Metrics) WebhookDisabled() {
	if m == nil {
		return
	}
	m.webhookDisabled.Inc()
}
