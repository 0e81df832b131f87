package metrics

import (
	"context"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/arke-institute/orchestrator/cost"
)

// usageCollector reports, at scrape time, what the fleet consumed since
// the usage table began (migration 00039): machine-seconds, provider
// requests and tokens, and their estimated price. The table is the one
// account every process adds to in the transactions that end the work, so
// every process reports the same fleet-wide totals: aggregate them with
// max, not sum, across processes. They only grow (retention keeps the
// table).
type usageCollector struct {
	pool     *pgxpool.Pool
	timeout  time.Duration
	logger   *slog.Logger
	prices   cost.Prices
	seconds  *prometheus.Desc
	requests *prometheus.Desc
	tokens   *prometheus.Desc
	usd      *prometheus.Desc
	errors   prometheus.Counter
}

func newUsageCollector(pool *pgxpool.Pool, timeout time.Duration, logger *slog.Logger, prices cost.Prices) *usageCollector {
	return &usageCollector{
		pool: pool, timeout: timeout, logger: logger, prices: prices,
		seconds: prometheus.NewDesc("orchestrator_machine_seconds_total",
			"Machine-seconds of the fleet, by phase, guest size and kind: task (attempts on machines of their own), pool_busy (attempts on pools' machines), pool_idle (pools' machines' start-up and idle time). Fleet-wide, read at scrape time: every process reports the same, aggregate with max.",
			[]string{"phase", "guest", "kind"}, nil),
		requests: prometheus.NewDesc("orchestrator_provider_answers_total",
			"Provider requests answered (OCR, embeddings, tags) by role and model, as usage counts them: committed with their work (orchestrator_provider_requests_total counts every call, failed ones too, by provider). Fleet-wide, read at scrape time.",
			[]string{"role", "model"}, nil),
		tokens: prometheus.NewDesc("orchestrator_provider_tokens_total",
			"Tokens the providers' answers reported, by role, model and kind (prompt, completion). Fleet-wide, read at scrape time.",
			[]string{"role", "model", "kind"}, nil),
		usd: prometheus.NewDesc("orchestrator_estimated_cost_usd_total",
			"Estimated price in US dollars of what the fleet consumed, at the configured prices (PRICE_MACHINE_SECOND, PRICE_TOKENS_PER_1K), by kind (machines, tokens); unpriced use is left out. Fleet-wide, read at scrape time.",
			[]string{"kind"}, nil),
		errors: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "orchestrator_usage_scrape_errors_total",
			Help: "Scrapes whose usage query failed or timed out (the usage metrics are then left out).",
		}),
	}
}

// Describe implements prometheus.Collector.
func (c *usageCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.seconds
	ch <- c.requests
	ch <- c.tokens
	ch <- c.usd
	c.errors.Describe(ch)
}

// usageSQL sums the usage table over batches.
const usageSQL = `SELECT phase, kind, role, resource, sum(seconds)::float8, sum(requests)::bigint,
    sum(prompt_tokens)::bigint, sum(completion_tokens)::bigint
FROM usage GROUP BY 1, 2, 3, 4 ORDER BY 1, 2, 3, 4`

// Collect implements prometheus.Collector; a failed query leaves the
// usage metrics out of the scrape and counts the failure.
func (c *usageCollector) Collect(ch chan<- prometheus.Metric) {
	defer func() { ch <- c.errors }()
	ctx, cancel := context.WithTimeout(context.Background(), c.timeout)
	defer cancel()
	rows, err := c.pool.Query(ctx, usageSQL)
	if err != nil {
		c.failed(err)
		return
	}
	defer rows.Close()
	var usage []cost.Usage
	for rows.Next() {
		var u cost.Usage
		if err := rows.Scan(&u.Phase, &u.Kind, &u.Role, &u.Resource, &u.Seconds, &u.Requests, &u.PromptTokens, &u.CompletionTokens); err != nil {
			c.failed(err)
			return
		}
		usage = append(usage, u)
	}
	if err := rows.Err(); err != nil {
		c.failed(err)
		return
	}
	c.emit(usage, ch)
}

// emit sends the usage metrics of the fleet's usage rows (one per phase,
// kind, role and resource), priced at c.prices.
func (c *usageCollector) emit(usage []cost.Usage, ch chan<- prometheus.Metric) {
	emit := func(m prometheus.Metric) { ch <- m }
	seconds, requests, tokens, usd := c.seconds, c.requests, c.tokens, c.usd
	type provider struct{ role, model string }
	reqs, prompt, completion := map[provider]int64{}, map[provider]int64{}, map[provider]int64{}
	var machineUSD, tokenUSD float64
	for _, u := range usage {
		line := cost.Of([]cost.Usage{u}, c.prices, nil)
		if u.Kind != cost.KindProvider {
			emit(prometheus.MustNewConstMetric(seconds, prometheus.CounterValue, u.Seconds, u.Phase, u.Resource, u.Kind))
			machineUSD += line.EstimatedUSD
			continue
		}
		p := provider{u.Role, u.Resource}
		reqs[p] += u.Requests
		prompt[p] += u.PromptTokens
		completion[p] += u.CompletionTokens
		tokenUSD += line.EstimatedUSD
	}
	for p, n := range reqs {
		emit(prometheus.MustNewConstMetric(requests, prometheus.CounterValue, float64(n), p.role, p.model))
		emit(prometheus.MustNewConstMetric(tokens, prometheus.CounterValue, float64(prompt[p]), p.role, p.model, "prompt"))
		emit(prometheus.MustNewConstMetric(tokens, prometheus.CounterValue, float64(completion[p]), p.role, p.model, "completion"))
	}
	emit(prometheus.MustNewConstMetric(usd, prometheus.CounterValue, machineUSD, "machines"))
	emit(prometheus.MustNewConstMetric(usd, prometheus.CounterValue, tokenUSD, "tokens"))
}

func (c *usageCollector) failed(err error) {
	c.errors.Inc()
	c.logger.Warn("reading usage for metrics", "error", err, "timeout_ms", c.timeout.Milliseconds())
}
