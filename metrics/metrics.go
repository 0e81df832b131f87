// Package metrics holds the orchestrator's Prometheus metrics: a registry of
// its own (tests make fresh ones; nothing goes to the global default
// registry), typed helpers that the jobs, the service and the API call where
// things happen, and a collector that reports River's queue depth at scrape
// time.
//
// Every name starts with orchestrator_. Labels are few-valued on purpose
// (phase, status, outcome, reason, HTTP code, queue, job state): never a
// batch or task id, which would make a series per batch.
//
// A nil *Metrics is valid and records nothing, so code and tests that do not
// care about metrics pass none.
package metrics

import (
	"context"
	"log/slog"
	"net/http"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/arke-institute/orchestrator/cost"
	"github.com/arke-institute/orchestrator/provider"
)

// Task outcomes (the outcome label of orchestrator_tasks_finished_total).
const (
	// TaskCompleted: the worker's success callback was applied.
	TaskCompleted = "completed"
	// TaskFailed: the worker's error callback was applied (a permanent
	// error, or a transient one in the last attempt), or no machine could
	// be launched for the task in maxUnlaunched tries.
	TaskFailed = "failed"
	// TaskTimedOut: the task's last attempt was still processing at its
	// deadline. A late success taken afterwards also counts completed.
	TaskTimedOut = "timed_out"
	// TaskCancelled: the task was still open when its batch was reset by
	// an admin or failed.
	TaskCancelled = "cancelled"
)

// Task retry reasons (the reason label of orchestrator_task_retries_total):
// why an attempt failed and the task was sent back for another.
const (
	// RetryTimeout: the attempt was still processing at its deadline.
	RetryTimeout = "timeout"
	// RetryTransientError: the worker reported an error it calls retryable.
	RetryTransientError = "transient_error"
	// RetryNoMachine: the attempt's launch made no machine (not counted
	// as a failed attempt).
	RetryNoMachine = "no_machine"
)

// Launch failure reasons (the reason label of
// orchestrator_machine_launch_failures_total).
const (
	// LaunchRateLimited: the provider answered 429.
	LaunchRateLimited = "rate_limited"
	// Launch4xx: the provider refused the request with another 4xx.
	Launch4xx = "4xx"
	// Launch5xx: the provider answered 5xx.
	Launch5xx = "5xx"
	// LaunchNetwork: no answer came (a transport error or a timeout).
	LaunchNetwork = "network"
	// LaunchOther: a failure before any request was made (say, an invalid
	// app name refused by the backend itself).
	LaunchOther = "other"
)

// Callback rejection reasons (the reason label of
// orchestrator_callbacks_rejected_total).
const (
	// RejectedBadToken: the bearer token is missing or wrong (401).
	RejectedBadToken = "bad_token"
	// RejectedUnknownTask: no such batch or task (404).
	RejectedUnknownTask = "unknown_task"
	// RejectedMalformed: the body is not a valid callback (400).
	RejectedMalformed = "malformed"
	// RejectedTooLarge: the body is over the size limit (413).
	RejectedTooLarge = "too_large"
	// RejectedTaskEnded: the task had already timed out or its batch was
	// reset (409).
	RejectedTaskEnded = "task_ended"
)

// Callback results (the result label of
// orchestrator_callback_duration_seconds).
const (
	// CallbackApplied: the callback ended its task.
	CallbackApplied = "applied"
	// CallbackDuplicate: a repeat of the callback that ended its task;
	// nothing changed.
	CallbackDuplicate = "duplicate"
	// CallbackRejected: refused (see the rejection reasons).
	CallbackRejected = "rejected"
	// CallbackError: the orchestrator failed to handle it (5xx, or the
	// caller hung up first).
	CallbackError = "error"
)

// riverJobStates are every state a River job can be in, so that the queue
// depth reports 0 for empty states instead of dropping their series.
var riverJobStates = []string{"available", "cancelled", "completed", "discarded", "pending", "retryable", "running", "scheduled"}

// DefaultQueueQueryTimeout bounds the queue depth query of one scrape.
const DefaultQueueQueryTimeout = 2 * time.Second

// Config says what a Metrics reports besides the orchestrator's own counters.
type Config struct {
	// Pool, when set, is queried at each scrape for River's queue depth
	// (orchestrator_river_jobs).
	Pool *pgxpool.Pool
	// QueueQueryTimeout bounds that query, so a slow database cannot hang a
	// scrape; default DefaultQueueQueryTimeout.
	QueueQueryTimeout time.Duration
	// Runtime adds the Go runtime and process collectors (go_*, process_*).
	Runtime bool
	// Logger receives failures of the queue depth query; nil discards them.
	Logger *slog.Logger
	// RateFloors are the adaptive rate limits' least refill rates by bucket
	// name (the part of a rate_limits key before its first ':'), for
	// orchestrator_provider_rate_limit_at_floor.
	RateFloors map[string]float64
	// Prices price orchestrator_estimated_cost_usd_total.
	Prices cost.Prices
}

// Metrics is the orchestrator's set of metrics and their registry. Its
// methods are safe for concurrent use, and do nothing on a nil *Metrics.
type Metrics struct {
	reg *prometheus.Registry

	batchesStarted    prometheus.Counter
	batchesFinished   *prometheus.CounterVec
	batchDuration     *prometheus.HistogramVec
	tasksFinished     *prometheus.CounterVec
	launches          *prometheus.CounterVec
	launchFailures    *prometheus.CounterVec
	phaseRetries      *prometheus.CounterVec
	taskRetries       *prometheus.CounterVec
	infraFailures     *prometheus.CounterVec
	callbackDuration  *prometheus.HistogramVec
	callbacksRejected *prometheus.CounterVec
	ingestAttempts    prometheus.Counter
	ingestFailures    prometheus.Counter
	providerRequests  *prometheus.CounterVec
	providerRate      *prometheus.GaugeVec
	providerTokens    *prometheus.GaugeVec
	chunkItems        *prometheus.CounterVec
	documentSteps     *prometheus.CounterVec
	documentStepTime  *prometheus.HistogramVec
	documentsFinished *prometheus.CounterVec
	documentDuration  *prometheus.HistogramVec
	retentionRemoved  *prometheus.CounterVec
	poolLeases        *prometheus.CounterVec
	poolLaunches      *prometheus.CounterVec
	intakeRefused     *prometheus.CounterVec
	// The orphan reaper's and the spend bounds' (fleet.go).
	orphansFound     *prometheus.CounterVec
	orphansDestroyed *prometheus.CounterVec
	boundReached     *prometheus.GaugeVec
	// The webhooks' (webhooks.go).
	webhookAttempts *prometheus.CounterVec
	webhookDisabled prometheus.Counter
}

// Outcomes of a call to an external provider (ProviderRequest).
const (
	ProviderSuccess     = "success"
	ProviderRateLimited = "rate_limited" // a 429
	ProviderTransient   = "transient"
	ProviderPermanent   = "permanent"
	ProviderAuth        = "auth"
)

// Outcomes of a chunk item (ChunkItemsFinished).
const (
	ItemDone    = "done"
	ItemFailed  = "failed"
	ItemSkipped = "skipped"
)

// Outcomes of a run of a document's step (DocumentStep).
const (
	// StepDone: the run committed its piece of the step (a batch of
	// chunks, or the whole step).
	StepDone = "done"
	// StepRetried: the run failed and the step is tried again: a
	// transient failure (one of the document's retries), or a run River
	// stopped.
	StepRetried = "retried"
	// StepFailed: the run failed the document.
	StepFailed = "failed"
	// StepWaited: the provider's shared rate limit had no token, or the
	// provider answered 429; the step waits, with no retry used.
	StepWaited = "waited"
)

// Final statuses of a document (DocumentFinished).
const (
	DocumentCompleted = "completed"
	DocumentFailed    = "failed"
)

// New returns a Metrics with a fresh registry.
func New(cfg Config) *Metrics {
	m := &Metrics{
		reg: prometheus.NewRegistry(),
		batchesStarted: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "orchestrator_batches_started_total",
			Help: "Batches that began running: accepted at intake, or resumed from ERROR by an admin retry.",
		}),
		batchesFinished: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "orchestrator_batches_finished_total",
			Help: "Batches that ended, by final status (DONE or ERROR).",
		}, []string{"status"}),
		batchDuration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "orchestrator_batch_duration_seconds",
			Help: "Time from a batch's acceptance to its end, by final status.",
			// 1 s to about 18 hours.
			Buckets: prometheus.ExponentialBuckets(1, 2, 17),
		}, []string{"status"}),
		tasksFinished: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "orchestrator_tasks_finished_total",
			Help: "Tasks that ended, by phase and outcome (completed, failed, timed_out, cancelled).",
		}, []string{"phase", "outcome"}),
		launches: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "orchestrator_machine_launches_total",
			Help: "Machines launched for tasks, by phase (including those found after an ambiguous launch failure).",
		}, []string{"phase"}),
		launchFailures: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "orchestrator_machine_launch_failures_total",
			Help: "Failed machine launch requests, by phase and reason (rate_limited, 4xx, 5xx, network, other).",
		}, []string{"phase", "reason"}),
		phaseRetries: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "orchestrator_phase_retries_total",
			Help: "Phase-level launch retries scheduled after a launch error, by phase.",
		}, []string{"phase"}),
		taskRetries: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "orchestrator_task_retries_total",
			Help: "Task attempts that failed and were retried on a fresh machine, by phase and reason (timeout, transient_error, no_machine).",
		}, []string{"phase", "reason"}),
		infraFailures: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "orchestrator_infrastructure_failures_total",
			Help: "Units of a phase's work (tasks, OCR refs) that failed for infrastructure reasons (attempts or retries spent by timeouts, dead machines, outages, a spent quota), counted as the phase ends, by phase.",
		}, []string{"phase"}),
		callbackDuration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "orchestrator_callback_duration_seconds",
			Help:    "Time to handle a worker's callback (POST /callback/...), by result (applied, duplicate, rejected, error).",
			Buckets: []float64{.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30},
		}, []string{"result"}),
		callbacksRejected: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "orchestrator_callbacks_rejected_total",
			Help: "Callbacks refused, by reason (bad_token, unknown_task, malformed, too_large, task_ended).",
		}, []string{"reason"}),
		ingestAttempts: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "orchestrator_ingest_attempts_total",
			Help: "Attempts to deliver a finished batch's manifest to ingest.",
		}),
		ingestFailures: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "orchestrator_ingest_failures_total",
			Help: "Failed attempts to deliver a finished batch's manifest to ingest (each is retried with backoff).",
		}),
	}
	m.providerRequests = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "orchestrator_provider_requests_total",
		Help: "Requests to an external provider (the OCR engine), by provider and outcome (success, rate_limited: a 429, transient, permanent, auth).",
	}, []string{"provider", "outcome"})
	m.providerRate = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "orchestrator_provider_rate_limit_rps",
		Help: "The adaptive rate limit's current refill rate (requests a second), by limiter key, as this process last saw it.",
	}, []string{"key"})
	m.providerTokens = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "orchestrator_provider_rate_limit_max_tokens",
		Help: "The adaptive rate limit's current burst (max tokens), by limiter key, as this process last saw it.",
	}, []string{"key"})
	m.chunkItems = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "orchestrator_chunk_items_finished_total",
		Help: "Items of chunked phases (OCR refs) that ended, by phase and outcome (done, failed, skipped).",
	}, []string{"phase", "outcome"})
	m.documentSteps = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "orchestrator_document_steps_total",
		Help: "Runs of document steps (download, embeddings, tags, store), by step and outcome (done, retried, failed, waited).",
	}, []string{"step", "outcome"})
	m.documentStepTime = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "orchestrator_document_step_duration_seconds",
		Help:    "Time one run of a document step takes (its provider call included), by step; runs that waited for the rate limit are left out.",
		Buckets: []float64{.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60},
	}, []string{"step"})
	m.documentsFinished = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "orchestrator_documents_finished_total",
		Help: "Document versions that ended, by final status (completed, failed).",
	}, []string{"status"})
	m.documentDuration = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name: "orchestrator_document_duration_seconds",
		Help: "Time from a document version's first step to its end, by final status.",
		// 100 ms to about 2 hours.
		Buckets: prometheus.ExponentialBuckets(0.1, 2, 17),
	}, []string{"status"})
	m.reg.MustRegister(m.batchesStarted, m.batchesFinished, m.batchDuration, m.tasksFinished, m.launches,
		m.launchFailures, m.phaseRetries, m.taskRetries, m.infraFailures, m.callbackDuration, m.callbacksRejected, m.ingestAttempts, m.ingestFailures,
		m.providerRequests, m.providerRate, m.providerTokens, m.chunkItems,
		m.documentSteps, m.documentStepTime, m.documentsFinished, m.documentDuration)
	m.retentionRemoved = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "orchestrator_retention_removed_total",
		Help: "Rows (by table) and staging objects (table staging_objects) that retention removed with finished batches' processing state.",
	}, []string{"table"})
	m.poolLeases = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "orchestrator_pool_leases_total",
		Help: "Tasks leased to pool machines, by phase.",
	}, []string{"phase"})
	m.poolLaunches = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "orchestrator_pool_machines_launched_total",
		Help: "Pool machines launched, by phase.",
	}, []string{"phase"})
	m.intakeRefused = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "orchestrator_intake_refused_total",
		Help: "Batches refused by admission control (429), by the limit reached (its setting's name).",
	}, []string{"limit"})
	m.reg.MustRegister(m.retentionRemoved, m.poolLeases, m.poolLaunches, m.intakeRefused)
	m.registerFleet()
	m.registerWebhooks()
	if cfg.Pool != nil {
		timeout := cfg.QueueQueryTimeout
		if timeout <= 0 {
			timeout = DefaultQueueQueryTimeout
		}
		logger := cfg.Logger
		if logger == nil {
			logger = slog.New(slog.DiscardHandler)
		}
		m.reg.MustRegister(newQueueCollector(cfg.Pool, timeout, logger), newHealthCollector(cfg.Pool, timeout, logger, cfg.RateFloors),
			newUsageCollector(cfg.Pool, timeout, logger, cfg.Prices))
	}
	if cfg.Runtime {
		m.reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	}
	return m
}

// Registry is where every metric is registered, for tests and for adding
// collectors.
func (m *Metrics) Registry() *prometheus.Registry {
	if m == nil {
		return prometheus.NewRegistry()
	}
	return m.reg
}

// Handler serves the registry in Prometheus' text (or OpenMetrics) format.
// A collector that fails is reported in the answer's log and left out; the
// rest is still served.
func (m *Metrics) Handler() http.Handler {
	return promhttp.HandlerFor(m.Registry(), promhttp.HandlerOpts{ErrorHandling: promhttp.ContinueOnError})
}

// BatchStarted counts a batch that began running.
func (m *Metrics) BatchStarted() {
	if m == nil {
		return
	}
	m.batchesStarted.Inc()
}

// BatchFinished counts a batch that ended with status (DONE or ERROR) and
// observes how long it ran since it was accepted.
func (m *Metrics) BatchFinished(status string, took time.Duration) {
	if m == nil {
		return
	}
	m.batchesFinished.WithLabelValues(status).Inc()
	m.batchDuration.WithLabelValues(status).Observe(max(took, 0).Seconds())
}

// ProviderRequest counts a request to provider that ended with outcome
// (ProviderSuccess, ProviderRateLimited, ...).
func (m *Metrics) ProviderRequest(name, outcome string) {
	if m == nil {
		return
	}
	m.providerRequests.WithLabelValues(name, outcome).Inc()
}

// ProviderOutcomeOf is the outcome of a call to a provider that ended with
// err, classified by provider.ClassOf: ProviderSuccess for nil.
func ProviderOutcomeOf(err error) string {
	switch provider.ClassOf(err) {
	case 0:
		return ProviderSuccess
	case provider.RateLimited:
		return ProviderRateLimited
	case provider.Auth:
		return ProviderAuth
	case provider.Permanent:
		return ProviderPermanent
	default:
		return ProviderTransient
	}
}

// RateLimitShape records an adaptive limit's current shape.
func (m *Metrics) RateLimitShape(key string, rps, maxTokens float64) {
	if m == nil {
		return
	}
	m.providerRate.WithLabelValues(key).Set(rps)
	m.providerTokens.WithLabelValues(key).Set(maxTokens)
}

// ChunkItemsFinished counts n items of phase that ended with outcome
// (ItemDone, ItemFailed, ItemSkipped).
func (m *Metrics) ChunkItemsFinished(phase, outcome string, n int) {
	if m == nil || n <= 0 {
		return
	}
	m.chunkItems.WithLabelValues(phase, outcome).Add(float64(n))
}

// DocumentStep counts a run of a document's step that ended with outcome
// (StepDone, StepRetried, StepFailed or StepWaited) and, but for a run
// that waited, observes how long it took.
func (m *Metrics) DocumentStep(step, outcome string, took time.Duration) {
	if m == nil {
		return
	}
	m.documentSteps.WithLabelValues(step, outcome).Inc()
	if outcome != StepWaited {
		m.documentStepTime.WithLabelValues(step).Observe(max(took, 0).Seconds())
	}
}

// DocumentFinished counts a document version that ended with status
// (DocumentCompleted or DocumentFailed) and observes how long it took
// since its first step started.
func (m *Metrics) DocumentFinished(status string, took time.Duration) {
	if m == nil {
		return
	}
	m.documentsFinished.WithLabelValues(status).Inc()
	m.documentDuration.WithLabelValues(status).Observe(max(took, 0).Seconds())
}

// TasksFinished counts n tasks of phase that ended with outcome (TaskCompleted,
// TaskFailed, TaskTimedOut or TaskCancelled).
func (m *Metrics) TasksFinished(phase, outcome string, n int) {
	if m == nil || n <= 0 {
		return
	}
	m.tasksFinished.WithLabelValues(phase, outcome).Add(float64(n))
}

// MachineLaunched counts a machine launched for a task of phase.
func (m *Metrics) MachineLaunched(phase string) {
	if m == nil {
		return
	}
	m.launches.WithLabelValues(phase).Inc()
}

// LaunchFailed counts a failed launch request for a task of phase, with
// reason one of the Launch* constants.
func (m *Metrics) LaunchFailed(phase, reason string) {
	if m == nil {
		return
	}
	m.launchFailures.WithLabelValues(phase, reason).Inc()
}

// PhaseRetried counts a phase-level retry scheduled after a launch error.
func (m *Metrics) PhaseRetried(phase string) {
	if m == nil {
		return
	}
	m.phaseRetries.WithLabelValues(phase).Inc()
}

// InfraFailures counts n units of a phase's work (tasks, OCR refs) that
// failed for infrastructure reasons, counted as the phase ends.
func (m *Metrics) InfraFailures(phase string, n int) {
	if m == nil || n <= 0 {
		return
	}
	m.infraFailures.WithLabelValues(phase).Add(float64(n))
}

// TasksRetried counts n task attempts of phase that failed for reason (a
// Retry* constant) and were sent back for another attempt.
func (m *Metrics) TasksRetried(phase, reason string, n int) {
	if m == nil || n <= 0 {
		return
	}
	m.taskRetries.WithLabelValues(phase, reason).Add(float64(n))
}

// CallbackHandled observes the time taken by one callback request and its
// result (a Callback* constant).
func (m *Metrics) CallbackHandled(result string, took time.Duration) {
	if m == nil {
		return
	}
	m.callbackDuration.WithLabelValues(result).Observe(took.Seconds())
}

// CallbackRejected counts a refused callback, with reason one of the
// Rejected* constants.
func (m *Metrics) CallbackRejected(reason string) {
	if m == nil {
		return
	}
	m.callbacksRejected.WithLabelValues(reason).Inc()
}

// IngestAttempted counts one attempt to deliver a batch to ingest, failed
// or not.
func (m *Metrics) IngestAttempted(failed bool) {
	if m == nil {
		return
	}
	m.ingestAttempts.Inc()
	if failed {
		m.ingestFailures.Inc()
	}
}

// queueCollector reports how many River jobs are in each (queue, state),
// and how many pool machines of each app are in each state, by asking the
// database at scrape time.
type queueCollector struct {
	pool     *pgxpool.Pool
	timeout  time.Duration
	logger   *slog.Logger
	depth    *prometheus.Desc
	machines *prometheus.Desc
	pauses   *prometheus.Desc
	errors   prometheus.Counter
}

func newQueueCollector(pool *pgxpool.Pool, timeout time.Duration, logger *slog.Logger) *queueCollector {
	return &queueCollector{
		pool: pool, timeout: timeout, logger: logger,
		depth: prometheus.NewDesc("orchestrator_river_jobs",
			"River jobs by queue and state, read from river_job at scrape time.", []string{"queue", "state"}, nil),
		machines: prometheus.NewDesc("orchestrator_pool_machines",
			"Live pool machines by app and state (starting: launched, not yet heard from; busy: holding a lease; idle), read at scrape time.", []string{"app", "state"}, nil),
		pauses: prometheus.NewDesc("orchestrator_pauses",
			"Pauses of work in force by scope (global, phase, batch), read at scrape time (POST /admin/pause).", []string{"scope"}, nil),
		errors: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "orchestrator_river_jobs_scrape_errors_total",
			Help: "Scrapes whose River queue depth, pool machines or pauses query failed or timed out (orchestrator_river_jobs, orchestrator_pool_machines or orchestrator_pauses is then left out).",
		}),
	}
}

// Describe implements prometheus.Collector.
func (c *queueCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.depth
	ch <- c.machines
	ch <- c.pauses
	c.errors.Describe(ch)
}

// queueDepthSQL counts jobs by queue and state. Completed jobs are kept for
// a day, so this scans what River keeps; the timeout bounds it.
const queueDepthSQL = `SELECT queue, state::text, count(*) FROM river_job GROUP BY 1, 2`

// poolMachinesSQL counts the live pool machines by app and state.
const poolMachinesSQL = `SELECT app, CASE WHEN seen_at IS NULL THEN 'starting' WHEN busy_since IS NOT NULL THEN 'busy' ELSE 'idle' END, count(*)
FROM pool_machines WHERE ended_at IS NULL GROUP BY 1, 2`

// pausesSQL counts the pauses in force by scope.
const pausesSQL = `SELECT scope, '', count(*) FROM pauses GROUP BY 1`

// pauseScopes are the scopes of orchestrator_pauses.
var pauseScopes = []string{"global", "phase", "batch"}

// Collect implements prometheus.Collector. A query that fails or takes
// longer than the timeout leaves the depth out of this scrape (and counts
// the failure) rather than failing or holding up the whole scrape.
func (c *queueCollector) Collect(ch chan<- prometheus.Metric) {
	defer func() { ch <- c.errors }()
	ctx, cancel := context.WithTimeout(context.Background(), c.timeout)
	defer cancel()
	counts, err := c.count(ctx, queueDepthSQL)
	if err != nil {
		c.failed(err)
		return
	}
	for queue, byState := range counts {
		for _, s := range riverJobStates {
			ch <- prometheus.MustNewConstMetric(c.depth, prometheus.GaugeValue, float64(byState[s]), queue, s)
			delete(byState, s)
		}
		for s, n := range byState { // a state added by a newer River
			ch <- prometheus.MustNewConstMetric(c.depth, prometheus.GaugeValue, float64(n), queue, s)
		}
	}
	machines, err := c.count(ctx, poolMachinesSQL)
	if err != nil {
		c.failed(err)
		return
	}
	for app, byState := range machines {
		for _, s := range poolMachineStates {
			ch <- prometheus.MustNewConstMetric(c.machines, prometheus.GaugeValue, float64(byState[s]), app, s)
		}
	}
	pauses, err := c.count(ctx, pausesSQL)
	if err != nil {
		c.failed(err)
		return
	}
	for _, s := range pauseScopes {
		ch <- prometheus.MustNewConstMetric(c.pauses, prometheus.GaugeValue, float64(pauses[s][""]), s)
	}
}

// poolMachineStates are the states of orchestrator_pool_machines.
var poolMachineStates = []string{"starting", "busy", "idle"}

// count runs a query of (key, state, count) rows into counts by key and
// state.
func (c *queueCollector) count(ctx context.Context, sql string) (map[string]map[string]int64, error) {
	rows, err := c.pool.Query(ctx, sql)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	counts := map[string]map[string]int64{}
	var (
		key, state string
		n          int64
	)
	for rows.Next() {
		if err := rows.Scan(&key, &state, &n); err != nil {
			return nil, err
		}
		if counts[key] == nil {
			counts[key] = map[string]int64{}
		}
		counts[key][state] = n
	}
	return counts, rows.Err()
}

func (c *queueCollector) failed(err error) {
	c.errors.Inc()
	c.logger.Warn("reading River queue depth and pool machines for metrics", "error", err, "timeout_ms", c.timeout.Milliseconds())
}

// IntakeRefused counts a batch refused by admission control at limit (the
// setting's name).
func (m *Metrics) IntakeRefused(limit string) {
	if m == nil {
		return
	}
	m.intakeRefused.WithLabelValues(limit).Inc()
}

// PoolLeased counts a task of phase leased to a pool machine.
func (m *Metrics) PoolLeased(phase string) {
	if m == nil {
		return
	}
	m.poolLeases.WithLabelValues(phase).Inc()
}

// PoolMachinesLaunched counts n pool machines of phase launched.
func (m *Metrics) PoolMachinesLaunched(phase string, n int) {
	if m == nil || n <= 0 {
		return
	}
	m.poolLaunches.WithLabelValues(phase).Add(float64(n))
}

// RetentionRemoved counts n rows of table (or staging objects, table
// "staging_objects") that retention removed.
func (m *Metrics) RetentionRemoved(table string, n int64) {
	if m == nil || n <= 0 {
		return
	}
	m.retentionRemoved.WithLabelValues(table).Add(float64(n))
}
