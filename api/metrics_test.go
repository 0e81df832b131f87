package api_test

import (
	"net/http"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/arke-institute/orchestrator/internal/harness/metricstest"
	"github.com/arke-institute/orchestrator/internal/harness/testenv"
	"github.com/arke-institute/orchestrator/status"
)

// TestBatchEndMetrics: a reset counts the batch as ended in ERROR and its
// open task as cancelled, once however often it is repeated; a retry counts
// the batch as started again; a batch whose manifest is missing ends in
// ERROR without a phase.
func TestBatchEndMetrics(t *testing.T) {
	t.Parallel()
	opts, launches := heldLaunches()
	env := testenv.New(t, opts)
	reg := env.Metrics.Registry()
	const (
		started  = "orchestrator_batches_started_total"
		finished = "orchestrator_batches_finished_total"
		duration = "orchestrator_batch_duration_seconds"
		tasks    = "orchestrator_tasks_finished_total"
		tiff     = "TIFF_CONVERSION"
	)
	S := metricstest.S

	const id = "METRICS-RESET"
	env.Submit(t, id, []testenv.File{
		{LogicalPath: "/scans/a.tif", Size: 100, ContentType: "image/tiff"},
		{LogicalPath: "/scans/b.tif", Size: 100, ContentType: "image/tiff"},
	})
	first, second := nextLaunch(t, launches), nextLaunch(t, launches)
	postCallback(t, env, first, callbackBody(first))
	afterReset := []metricstest.Series{
		S(started, 1), S(finished, 1, "status", "ERROR"), S(duration, 1, "status", "ERROR"),
		S(tasks, 1, "phase", tiff, "outcome", "completed"), S(tasks, 1, "phase", tiff, "outcome", "cancelled"),
	}
	for range 2 {
		code, body := env.DoAuth(t, http.MethodPost, "/admin/reset/"+id, testenv.AdminToken, nil)
		require.Equal(t, http.StatusOK, code, "body: %s", body)
		metricstest.Await(t, reg, afterReset...)
	}

	code, body := retry(t, env, id, testenv.AdminToken)
	require.Equal(t, http.StatusOK, code, "body: %s", body)
	again := nextLaunch(t, launches)
	require.Equal(t, second.TaskID, again.TaskID)
	postCallback(t, env, again, callbackBody(again))
	st := finishAll(t, env, id, launches)
	require.Equal(t, "DONE", st.Status, "error: %v", st.Error)
	metricstest.Await(t, reg,
		S(started, 2), S(finished, 1, "status", "ERROR"), S(finished, 1, "status", "DONE"),
		S(tasks, 2, "phase", tiff, "outcome", "completed"), S(tasks, 1, "phase", tiff, "outcome", "cancelled"),
		S(tasks, 2, "phase", "IMAGE_PROCESSING", "outcome", "completed"))

	const noManifest = "METRICS-NOMANIFEST"
	code, _ = postBatch(t, env, strings.ReplaceAll(exampleMessage, exampleBatchID, noManifest))
	require.Equal(t, http.StatusAccepted, code)
	st = env.AwaitStatus(t, noManifest, func(st status.Status) bool { return st.Status == "ERROR" })
	require.Nil(t, st.Phase)
	metricstest.Await(t, reg, S(started, 3), S(finished, 2, "status", "ERROR"), S(finished, 1, "status", "DONE"))
}
