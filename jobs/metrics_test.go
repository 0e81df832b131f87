package jobs_test

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"path"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/arke-institute/orchestrator/internal/fakes/fakefly"
	"github.com/arke-institute/orchestrator/internal/harness/metricstest"
	"github.com/arke-institute/orchestrator/internal/harness/syncbuf"
	"github.com/arke-institute/orchestrator/internal/harness/testenv"
	"github.com/arke-institute/orchestrator/tasktoken"
)

// TestMetricsAndLogsOfABatch runs a batch whose tasks end every way a task
// can, through launch failures, a duplicate, a late callback, rejected
// callbacks and a failed delivery to ingest, and holds that the metrics
// moved by exactly what happened, that GET /metrics shows them, and that
// the logs name the batch, task and phase of every line about a task and
// carry no token or key.
func TestMetricsAndLogsOfABatch(t *testing.T) {
	t.Parallel()
	behave := func(l fakefly.Launch) fakefly.Behavior {
		switch path.Base(l.Env["INPUT_R2_KEY"]) {
		case "b.tif":
			return fakefly.Behavior{Body: map[string]any{"task_id": l.TaskID, "batch_id": l.BatchID, "status": "error", "error": "Failed to decode TIFF"}}
		case "c.tif":
			return fakefly.Behavior{Hang: true}
		case "d.jpg":
			return fakefly.Behavior{Body: testenv.WorkerResult(l), Duplicate: 1}
		case "e.png":
			if l.Attempt == 1 {
				return fakefly.Behavior{LaunchStatus: http.StatusTooManyRequests, RetryAfter: -1}
			}
		case "f.png":
			if l.Attempt == 1 {
				return fakefly.Behavior{LaunchStatus: http.StatusUnprocessableEntity}
			}
		}
		return testenv.Succeed(l)
	}
	logs := &syncbuf.Buffer{}
	env := testenv.New(t, testenv.Options{
		Behave:   behave,
		Settings: map[string]string{"TASK_TIMEOUT_TIFF_CONVERSION": "1500", "TASK_MAX_ATTEMPTS": "1"},
		Logger:   slog.New(slog.NewJSONHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug})),
	})
	env.Ingest.FailFirst.Store(1)
	const id = "METRICS"
	env.Submit(t, id, []testenv.File{
		{LogicalPath: "/scans/a.tif", Size: 1000, ContentType: "image/tiff"},
		{LogicalPath: "/scans/b.tif", Size: 1000, ContentType: "image/tiff"},
		{LogicalPath: "/scans/c.tif", Size: 1000, ContentType: "image/tiff"},
		{LogicalPath: "/photos/d.jpg", Size: 400, ContentType: "image/jpeg"},
		{LogicalPath: "/photos/e.png", Size: 500, ContentType: "image/png"},
		{LogicalPath: "/photos/f.png", Size: 500, ContentType: "image/png"},
		{LogicalPath: "/meta.json", Size: 70, ContentType: "application/json"},
	})
	st := env.AwaitStatus(t, id, testenv.IsDone)
	require.Equal(t, "DONE", st.Status, "error: %v", st.Error)
	// 6 applied callbacks (a, b; a.jpg, d, e, f) and d's duplicate.
	env.Fly.AwaitCallbacks(t, 7, 30*time.Second)

	// Rejected callbacks, one per reason.
	aTIFF, hung := env.LaunchOf(t, "a.tif"), env.LaunchOf(t, "c.tif")
	env.Fly.Await(t, 30*time.Second, "hung machine destroyed", func() bool { return len(env.Fly.Destroyed()) > 0 })
	success := `{"status": "success", "output_r2_key": "staging/` + id + `/x.jpg", "output_file_name": "x.jpg", "output_file_size": 1}`
	// A token sealed for a task the batch does not have.
	unknown, err := tasktoken.New(env.Pool).Seal(context.Background(), tasktoken.Task(id, "image_01unknown"), "whatever")
	require.NoError(t, err)
	for _, c := range []struct {
		task, token, body string
		want              int
	}{
		{hung.TaskID, hung.Env["CALLBACK_TOKEN"], success, http.StatusConflict},
		{aTIFF.TaskID, "not-the-token", success, http.StatusUnauthorized},
		{"image_01unknown", unknown, success, http.StatusNotFound},
		{aTIFF.TaskID, aTIFF.Env["CALLBACK_TOKEN"], `{"status": "maybe"}`, http.StatusBadRequest},
		{aTIFF.TaskID, aTIFF.Env["CALLBACK_TOKEN"], `{"status": "error", "error": "` + strings.Repeat("x", 1<<20) + `"}`, http.StatusRequestEntityTooLarge},
	} {
		code, body := env.DoAuth(t, http.MethodPost, "/callback/"+id+"/"+c.task, c.token, strings.NewReader(c.body))
		require.Equal(t, c.want, code, string(body))
	}

	// Every counter moves by exactly what happened.
	const tiff, image = "TIFF_CONVERSION", "IMAGE_PROCESSING"
	want := []metricstest.Series{
		metricstest.S("orchestrator_batches_started_total", 1),
		metricstest.S("orchestrator_batches_finished_total", 1, "status", "DONE"),
		metricstest.S("orchestrator_batch_duration_seconds", 1, "status", "DONE"), // observations
		metricstest.S("orchestrator_tasks_finished_total", 1, "phase", tiff, "outcome", "completed"),
		metricstest.S("orchestrator_tasks_finished_total", 1, "phase", tiff, "outcome", "failed"),
		metricstest.S("orchestrator_tasks_finished_total", 1, "phase", tiff, "outcome", "timed_out"),
		metricstest.S("orchestrator_tasks_finished_total", 4, "phase", image, "outcome", "completed"),
		metricstest.S("orchestrator_machine_launches_total", 3, "phase", tiff),
		metricstest.S("orchestrator_machine_launches_total", 4, "phase", image),
		metricstest.S("orchestrator_machine_launch_failures_total", 1, "phase", image, "reason", "rate_limited"),
		metricstest.S("orchestrator_machine_launch_failures_total", 1, "phase", image, "reason", "4xx"),
		metricstest.S("orchestrator_phase_retries_total", 1, "phase", image),
		metricstest.S("orchestrator_callback_duration_seconds", 6, "result", "applied"),
		metricstest.S("orchestrator_callback_duration_seconds", 1, "result", "duplicate"),
		metricstest.S("orchestrator_callback_duration_seconds", 5, "result", "rejected"),
		metricstest.S("orchestrator_callbacks_rejected_total", 1, "reason", "task_ended"),
		metricstest.S("orchestrator_callbacks_rejected_total", 1, "reason", "bad_token"),
		metricstest.S("orchestrator_callbacks_rejected_total", 1, "reason", "unknown_task"),
		metricstest.S("orchestrator_callbacks_rejected_total", 1, "reason", "malformed"),
		metricstest.S("orchestrator_callbacks_rejected_total", 1, "reason", "too_large"),
		metricstest.S("orchestrator_ingest_attempts_total", 2),
		metricstest.S("orchestrator_ingest_failures_total", 1),
	}
	reg := env.Metrics.Registry()
	metricstest.Await(t, reg, want...)
	for _, name := range []string{"orchestrator_tasks_finished_total", "orchestrator_machine_launch_failures_total",
		"orchestrator_phase_retries_total", "orchestrator_batches_finished_total", "orchestrator_callbacks_rejected_total"} {
		n := 0
		for _, w := range want {
			if w.Name == name {
				n++
			}
		}
		require.Equal(t, n, metricstest.Count(t, reg, name), "no other %s series", name)
	}

	// GET /metrics shows them in the text format, with River's queue.
	srv := httptest.NewServer(env.Metrics.Handler())
	t.Cleanup(srv.Close)
	resp, err := http.Get(srv.URL + "/metrics")
	require.NoError(t, err)
	text, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	require.NoError(t, resp.Body.Close())
	require.Equal(t, http.StatusOK, resp.StatusCode)
	require.True(t, strings.HasPrefix(resp.Header.Get("Content-Type"), "text/plain"))
	for _, line := range []string{
		`orchestrator_batches_finished_total{status="DONE"} 1`,
		`orchestrator_tasks_finished_total{outcome="timed_out",phase="TIFF_CONVERSION"} 1`,
		`orchestrator_tasks_finished_total{outcome="completed",phase="IMAGE_PROCESSING"} 4`,
		`orchestrator_callbacks_rejected_total{reason="bad_token"} 1`,
		`orchestrator_callback_duration_seconds_count{result="applied"} 6`,
		`orchestrator_ingest_attempts_total 2`,
		`orchestrator_river_jobs{queue="default",state="running"}`,
	} {
		require.Contains(t, string(text), line)
	}
	require.Regexp(t, `orchestrator_river_jobs\{queue="default",state="completed"\} [1-9]`, string(text))

	// The logs: every line about a task names its batch and phase too, and
	// no secret appears anywhere.
	secrets := []string{env.Config.R2SecretAccessKey, env.Config.FlyAPIToken, env.Config.AdminToken}
	for _, l := range env.Fly.Launches() {
		secrets = append(secrets, l.Env["CALLBACK_TOKEN"])
	}
	out := logs.String()
	for _, s := range secrets {
		require.NotEmpty(t, s)
		require.NotContains(t, out, s)
	}
	tasks, lines := 0, 0
	sc := bufio.NewScanner(strings.NewReader(out))
	sc.Buffer(nil, 1<<22)
	for sc.Scan() {
		lines++
		var rec map[string]any
		require.NoError(t, json.Unmarshal(sc.Bytes(), &rec), sc.Text())
		if _, ok := rec["task_id"]; !ok {
			continue
		}
		tasks++
		require.NotEmpty(t, rec["batch_id"], "a line about a task names its batch: %s", sc.Text())
		require.NotEmpty(t, rec["phase"], "a line about a task names its phase: %s", sc.Text())
	}
	require.NoError(t, sc.Err())
	require.Greater(t, tasks, 10, "callbacks and requests are logged with their task (%d lines)", lines)
}
