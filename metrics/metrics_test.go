package metrics_test

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/require"

	"github.com/arke-institute/orchestrator/cost"
	"github.com/arke-institute/orchestrator/internal/harness/dbtest"
	"github.com/arke-institute/orchestrator/metrics"
)

// TestNilMetricsRecordNothing holds that code given no metrics runs as if
// it had some.
func TestNilMetricsRecordNothing(t *testing.T) {
	t.Parallel()
	var m *metrics.Metrics
	m.BatchStarted()
	m.BatchFinished("DONE", time.Second)
	m.TasksFinished("TIFF_CONVERSION", metrics.TaskCompleted, 3)
	m.MachineLaunched("TIFF_CONVERSION")
	m.LaunchFailed("TIFF_CONVERSION", metrics.Launch5xx)
	m.PhaseRetried("TIFF_CONVERSION")
	m.TasksRetried("TIFF_CONVERSION", metrics.RetryTimeout, 1)
	m.CallbackHandled(metrics.CallbackApplied, time.Millisecond)
	m.CallbackRejected(metrics.RejectedBadToken)
	m.IngestAttempted(true)
	m.DocumentStep("embeddings", metrics.StepDone, time.Millisecond)
	m.DocumentFinished(metrics.DocumentCompleted, time.Second)
	m.RetentionRemoved("tasks", 3)
	rec := httptest.NewRecorder()
	m.Handler().ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/metrics", nil))
	require.Equal(t, http.StatusOK, rec.Code)
}

// TestTextFormat holds the names, labels and types a scraper sees.
func TestTextFormat(t *testing.T) {
	t.Parallel()
	m := metrics.New(metrics.Config{})
	m.BatchStarted()
	m.BatchFinished("DONE", 90*time.Second)
	m.TasksFinished("IMAGE_PROCESSING", metrics.TaskTimedOut, 2)
	m.TasksFinished("IMAGE_PROCESSING", metrics.TaskTimedOut, 0) // counts nothing
	m.LaunchFailed("IMAGE_PROCESSING", metrics.LaunchRateLimited)
	m.CallbackRejected(metrics.RejectedMalformed)
	m.IngestAttempted(false)
	m.IngestAttempted(true)

	require.NoError(t, testutil.GatherAndCompare(m.Registry(), strings.NewReader(`
# HELP orchestrator_batches_started_total Batches that began running: accepted at intake, or resumed from ERROR by an admin retry.
# TYPE orchestrator_batches_started_total counter
orchestrator_batches_started_total 1
# HELP orchestrator_batches_finished_total Batches that ended, by final status (DONE or ERROR).
# TYPE orchestrator_batches_finished_total counter
orchestrator_batches_finished_total{status="DONE"} 1
# HELP orchestrator_tasks_finished_total Tasks that ended, by phase and outcome (completed, failed, timed_out, cancelled).
# TYPE orchestrator_tasks_finished_total counter
orchestrator_tasks_finished_total{outcome="timed_out",phase="IMAGE_PROCESSING"} 2
# HELP orchestrator_machine_launch_failures_total Failed machine launch requests, by phase and reason (rate_limited, 4xx, 5xx, network, other).
# TYPE orchestrator_machine_launch_failures_total counter
orchestrator_machine_launch_failures_total{phase="IMAGE_PROCESSING",reason="rate_limited"} 1
# HELP orchestrator_callbacks_rejected_total Callbacks refused, by reason (bad_token, unknown_task, malformed, too_large, task_ended).
# TYPE orchestrator_callbacks_rejected_total counter
orchestrator_callbacks_rejected_total{reason="malformed"} 1
# HELP orchestrator_ingest_attempts_total Attempts to deliver a finished batch's manifest to ingest.
# TYPE orchestrator_ingest_attempts_total counter
orchestrator_ingest_attempts_total 2
# HELP orchestrator_ingest_failures_total Failed attempts to deliver a finished batch's manifest to ingest (each is retried with backoff).
# TYPE orchestrator_ingest_failures_total counter
orchestrator_ingest_failures_total 1
`), "orchestrator_batches_started_total", "orchestrator_batches_finished_total", "orchestrator_tasks_finished_total",
		"orchestrator_machine_launch_failures_total", "orchestrator_callbacks_rejected_total",
		"orchestrator_ingest_attempts_total", "orchestrator_ingest_failures_total"))

	// The 90 s batch lands in the 128 s bucket and above.
	body := scrape(t, m)
	require.Contains(t, body, `orchestrator_batch_duration_seconds_bucket{status="DONE",le="64"} 0`)
	require.Contains(t, body, `orchestrator_batch_duration_seconds_bucket{status="DONE",le="128"} 1`)
	require.Contains(t, body, `orchestrator_batch_duration_seconds_sum{status="DONE"} 90`)
	require.NotContains(t, body, "go_goroutines", "runtime collectors only when asked for")
	require.Contains(t, scrape(t, metrics.New(metrics.Config{Runtime: true})), "go_goroutines")
}

// TestDocumentMetrics holds the document steps' names and labels: runs
// counted by step and outcome, the durations of runs that did work, and
// documents by final status.
func TestDocumentMetrics(t *testing.T) {
	t.Parallel()
	m := metrics.New(metrics.Config{})
	m.DocumentStep("embeddings", metrics.StepDone, 20*time.Millisecond)
	m.DocumentStep("embeddings", metrics.StepDone, 30*time.Millisecond)
	m.DocumentStep("embeddings", metrics.StepWaited, time.Millisecond) // counted, not timed
	m.DocumentStep("tags", metrics.StepRetried, 2*time.Second)
	m.DocumentFinished(metrics.DocumentCompleted, 3*time.Second)
	m.DocumentFinished(metrics.DocumentFailed, 40*time.Second)

	require.NoError(t, testutil.GatherAndCompare(m.Registry(), strings.NewReader(`
# HELP orchestrator_document_steps_total Runs of document steps (download, embeddings, tags, store), by step and outcome (done, retried, failed, waited).
# TYPE orchestrator_document_steps_total counter
orchestrator_document_steps_total{outcome="done",step="embeddings"} 2
orchestrator_document_steps_total{outcome="waited",step="embeddings"} 1
orchestrator_document_steps_total{outcome="retried",step="tags"} 1
# HELP orchestrator_documents_finished_total Document versions that ended, by final status (completed, failed).
# TYPE orchestrator_documents_finished_total counter
orchestrator_documents_finished_total{status="completed"} 1
orchestrator_documents_finished_total{status="failed"} 1
`), "orchestrator_document_steps_total", "orchestrator_documents_finished_total"))

	body := scrape(t, m)
	for _, want := range []string{
		`orchestrator_document_step_duration_seconds_count{step="embeddings"} 2`,
		`orchestrator_document_step_duration_seconds_bucket{step="embeddings",le="0.025"} 1`,
		`orchestrator_document_step_duration_seconds_bucket{step="embeddings",le="0.05"} 2`,
		`orchestrator_document_step_duration_seconds_sum{step="embeddings"} 0.05`,
		`orchestrator_document_step_duration_seconds_bucket{step="tags",le="2.5"} 1`,
		`orchestrator_document_duration_seconds_bucket{status="completed",le="3.2"} 1`,
		`orchestrator_document_duration_seconds_bucket{status="failed",le="25.6"} 0`,
		`orchestrator_document_duration_seconds_bucket{status="failed",le="51.2"} 1`,
	} {
		require.Contains(t, body, want)
	}
}

// TestRiverQueueDepth holds that the queue depth is read from river_job at
// each scrape, every state reported, and that a database too slow to answer
// leaves the depth out of the scrape rather than holding it up.
func TestRiverQueueDepth(t *testing.T) {
	t.Parallel()
	pool := dbtest.New(t)
	ctx := context.Background()
	insert := func(queue, state string, n int) {
		t.Helper()
		_, err := pool.Exec(ctx, `INSERT INTO river_job (args, kind, max_attempts, queue, state, finalized_at)
			SELECT '{}', 'test', 1, $1, $2::river_job_state,
				CASE WHEN $2 IN ('completed', 'cancelled', 'discarded') THEN now() END
			FROM generate_series(1, $3)`, queue, state, n)
		require.NoError(t, err)
	}
	insert("default", "available", 3)
	insert("default", "completed", 2)
	insert("other", "scheduled", 1)

	m := metrics.New(metrics.Config{Pool: pool, QueueQueryTimeout: 300 * time.Millisecond})
	body := scrape(t, m)
	for _, want := range []string{
		`orchestrator_river_jobs{queue="default",state="available"} 3`,
		`orchestrator_river_jobs{queue="default",state="completed"} 2`,
		`orchestrator_river_jobs{queue="default",state="running"} 0`,
		`orchestrator_river_jobs{queue="other",state="scheduled"} 1`,
		`orchestrator_river_jobs{queue="other",state="available"} 0`,
		`orchestrator_river_jobs_scrape_errors_total 0`,
	} {
		require.Contains(t, body, want)
	}
	insert("default", "available", 1)
	require.Contains(t, scrape(t, m), `orchestrator_river_jobs{queue="default",state="available"} 4`)

	// A transaction holding river_job locked stands for a database too slow
	// to answer.
	tx, err := pool.Begin(ctx)
	require.NoError(t, err)
	t.Cleanup(func() { _ = tx.Rollback(ctx) })
	_, err = tx.Exec(ctx, `LOCK TABLE river_job IN ACCESS EXCLUSIVE MODE`)
	require.NoError(t, err)
	start := time.Now()
	body = scrape(t, m)
	require.Less(t, time.Since(start), 5*time.Second, "the scrape waited for the database")
	require.NotContains(t, body, "orchestrator_river_jobs{")
	require.Contains(t, body, `orchestrator_river_jobs_scrape_errors_total 1`)
	require.Contains(t, body, `orchestrator_batches_started_total 0`, "the rest is still served")
	require.NoError(t, tx.Rollback(ctx))
	require.Contains(t, scrape(t, m), `orchestrator_river_jobs{queue="default",state="available"} 4`)
}

// scrape GETs /metrics from m's handler in the text format.
func scrape(t *testing.T, m *metrics.Metrics) string {
	t.Helper()
	srv := httptest.NewServer(m.Handler())
	defer srv.Close()
	resp, err := http.Get(srv.URL + "/metrics")
	require.NoError(t, err)
	defer resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)
	require.True(t, strings.HasPrefix(resp.Header.Get("Content-Type"), "text/plain"), resp.Header.Get("Content-Type"))
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return string(b)
}

// TestHealthMetrics: the batches in flight, the longest a running batch no
// pause holds has gone without progress, the rate limits at their floor,
// and the pauses, as the database has them at the scrape.
func TestHealthMetrics(t *testing.T) {
	t.Parallel()
	pool := dbtest.New(t)
	exec := dbtest.Exec(t, pool)
	batch := func(id, status string, idle time.Duration) {
		exec(`INSERT INTO batches (id, status, phase, uploader, queue_message, updated_at) VALUES ($1, $2, $2, 'u', '{}', now() - make_interval(secs => $3))`,
			id, status, idle.Seconds())
	}
	batch("B-OCR", "OCR", 2*time.Hour)
	batch("B-TIFF", "TIFF_CONVERSION", 10*time.Minute)
	exec(`INSERT INTO batch_events (batch_id, type) VALUES ('B-TIFF', 'task.completed')`) // progress just now
	exec(`INSERT INTO rate_limits (key, tokens, updated_at, max_tokens, refill_rate) VALUES
		('ocr:api.example', 1, now(), 2, 1), ('embeddings:api.example', 1, now(), 10, 8), ('fly-launch:app', 1, now(), NULL, NULL)`)

	m := metrics.New(metrics.Config{Pool: pool, RateFloors: map[string]float64{"ocr": 1, "embeddings": 1}})
	body := scrape(t, m)
	for _, want := range []string{
		`orchestrator_batches_in_flight 2`,
		`orchestrator_provider_rate_limit_at_floor{key="ocr:api.example"} 1`,
		`orchestrator_provider_rate_limit_at_floor{key="embeddings:api.example"} 0`,
		`orchestrator_pauses{scope="phase"} 0`,
		`orchestrator_health_scrape_errors_total 0`,
	} {
		require.Contains(t, body, want)
	}
	require.NotContains(t, body, `key="fly-launch:app"`, "a fixed bucket has no floor")
	idle := func(body string) float64 {
		for line := range strings.SplitSeq(body, "\n") {
			if v, ok := strings.CutPrefix(line, "orchestrator_batch_idle_seconds_max "); ok {
				f, err := strconv.ParseFloat(v, 64)
				require.NoError(t, err)
				return f
			}
		}
		t.Fatal("no orchestrator_batch_idle_seconds_max")
		return 0
	}
	require.InDelta(t, 7200, idle(body), 60, "the idlest is B-OCR")

	// Paused, B-OCR is not idle for want of progress.
	exec(`INSERT INTO pauses (scope, target) VALUES ('phase', 'OCR')`)
	body = scrape(t, m)
	require.Contains(t, body, `orchestrator_pauses{scope="phase"} 1`)
	require.Less(t, idle(body), 60.0, "B-TIFF made progress a moment ago")
}

// TestUsageMetrics: the fleet's usage, summed over batches at scrape time,
// and its estimated price.
func TestUsageMetrics(t *testing.T) {
	t.Parallel()
	pool := dbtest.New(t)
	exec := dbtest.Exec(t, pool)
	exec(`INSERT INTO usage (batch_id, phase, kind, role, resource, attempts, seconds, requests, prompt_tokens, completion_tokens) VALUES
		('b1', 'TIFF_CONVERSION', 'task', '', 'g1', 2, 30, 0, 0, 0),
		('b2', 'TIFF_CONVERSION', 'task', '', 'g1', 1, 12.5, 0, 0, 0),
		('', 'TIFF_CONVERSION', 'pool_idle', '', 'g1', 1, 7.5, 0, 0, 0),
		('b1', 'OCR', 'provider', 'ocr', 'm1', 0, 0, 3, 3000, 60),
		('b2', 'OCR', 'provider', 'ocr', 'm1', 0, 0, 1, 1000, 20)`)
	prices := cost.Prices{Machine: map[string]float64{"g1": 0.001}, Tokens: map[string]cost.TokenPrice{"m1": {Prompt: 0.01, Completion: 0.1}}}
	m := metrics.New(metrics.Config{Pool: pool, Prices: prices})
	body := scrape(t, m)
	for _, want := range []string{
		`orchestrator_machine_seconds_total{guest="g1",kind="task",phase="TIFF_CONVERSION"} 42.5`,
		`orchestrator_machine_seconds_total{guest="g1",kind="pool_idle",phase="TIFF_CONVERSION"} 7.5`,
		`orchestrator_provider_answers_total{model="m1",role="ocr"} 4`,
		`orchestrator_provider_tokens_total{kind="prompt",model="m1",role="ocr"} 4000`,
		`orchestrator_provider_tokens_total{kind="completion",model="m1",role="ocr"} 80`,
		`orchestrator_estimated_cost_usd_total{kind="machines"} 0.05`,
		`orchestrator_estimated_cost_usd_total{kind="tokens"} 0.048`,
		`orchestrator_usage_scrape_errors_total 0`,
	} {
		require.Contains(t, body, want)
	}
}
