package metrics

import (
	"context"
	"log/slog"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
)

// healthCollector reports, at scrape time, what the alerting rules
// (deploy/prometheus/alerts.yml) watch and only the database knows: the
// batches in flight and how long the idlest has gone without progress,
// and the adaptive rate limits held at their floor.
type healthCollector struct {
	pool    *pgxpool.Pool
	timeout time.Duration
	logger  *slog.Logger
	// floors are the adaptive buckets' least refill rates by bucket name
	// (a key's part before its first ':', e.g. "ocr").
	floors   map[string]float64
	inFlight *prometheus.Desc
	idle     *prometheus.Desc
	atFloor  *prometheus.Desc
	errors   prometheus.Counter
}

func newHealthCollector(pool *pgxpool.Pool, timeout time.Duration, logger *slog.Logger, floors map[string]float64) *healthCollector {
	return &healthCollector{
		pool: pool, timeout: timeout, logger: logger, floors: floors,
		inFlight: prometheus.NewDesc("orchestrator_batches_in_flight",
			"Batches accepted and not yet DONE or ERROR, read at scrape time (admission control's MAX_BATCHES_IN_FLIGHT bounds them).", nil, nil),
		idle: prometheus.NewDesc("orchestrator_batch_idle_seconds_max",
			"The longest any running batch that no pause holds has gone without an event or a change (a task, chunk or document ended, a phase began...), read at scrape time.", nil, nil),
		atFloor: prometheus.NewDesc("orchestrator_provider_rate_limit_at_floor",
			"1 when an adaptive rate limit used in the last 10 minutes is at its least refill rate (MIN_REFILL_RATE and the like): the provider keeps answering 429.", []string{"key"}, nil),
		errors: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "orchestrator_health_scrape_errors_total",
			Help: "Scrapes whose batches or rate limits query failed or timed out (their metrics are then left out).",
		}),
	}
}

// Describe implements prometheus.Collector.
func (c *healthCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.inFlight
	ch <- c.idle
	ch <- c.atFloor
	c.errors.Describe(ch)
}

// batchesHealthSQL counts the batches in flight, and the longest a running
// one no pause holds has gone since its last event or change.
const batchesHealthSQL = `SELECT count(*),
    coalesce(max(extract(epoch FROM clock_timestamp() - greatest(b.updated_at,
        (SELECT e.created_at FROM batch_events e WHERE e.batch_id = b.id ORDER BY e.id DESC LIMIT 1))))
        FILTER (WHERE NOT EXISTS (SELECT 1 FROM pauses p WHERE p.scope = 'global'
            OR p.scope = 'phase' AND p.target = b.status OR p.scope = 'batch' AND p.target = b.id)), 0)::float8
FROM batches b WHERE b.completed_at IS NULL`

// rateLimitsSQL reads the adaptive buckets used in the last 10 minutes.
const rateLimitsSQL = `SELECT key, refill_rate FROM rate_limits
WHERE refill_rate IS NOT NULL AND updated_at > clock_timestamp() - interval '10 minutes'`

// Collect implements prometheus.Collector; a query that fails leaves its
// metrics out of the scrape and counts the failure.
func (c *healthCollector) Collect(ch chan<- prometheus.Metric) {
	defer func() { ch <- c.errors }()
	ctx, cancel := context.WithTimeout(context.Background(), c.timeout)
	defer cancel()
	var inFlight int64
	var idle float64
	if err := c.pool.QueryRow(ctx, batchesHealthSQL).Scan(&inFlight, &idle); err != nil {
		c.failed(err)
	} else {
		ch <- prometheus.MustNewConstMetric(c.inFlight, prometheus.GaugeValue, float64(inFlight))
		ch <- prometheus.MustNewConstMetric(c.idle, prometheus.GaugeValue, idle)
	}
	if len(c.floors) == 0 {
		return
	}
	rows, err := c.pool.Query(ctx, rateLimitsSQL)
	if err != nil {
		c.failed(err)
		return
	}
	defer rows.Close()
	for rows.Next() {
		var key string
		var rate float64
		if err := rows.Scan(&key, &rate); err != nil {
			c.failed(err)
			return
		}
		name, _, _ := strings.Cut(key, ":")
		floor, ok := c.floors[name]
		if !ok {
			continue
		}
		at := 0.0
		if rate <= floor*1.001 {
			at = 1
		}
		ch <- prometheus.MustNewConstMetric(c.atFloor, prometheus.GaugeValue, at, key)
	}
	if err := rows.Err(); err != nil {
		c.failed(err)
	}
}

func (c *healthCollector) failed(err error) {
	c.errors.Inc()
	c.logger.Warn("reading batches and rate limits for metrics", "error", err, "timeout_ms", c.timeout.Milliseconds())
}
