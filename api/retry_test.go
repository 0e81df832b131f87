package api_test

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/arke-institute/orchestrator/internal/fakes/fakefly"
	"github.com/arke-institute/orchestrator/internal/harness/eventually"
	"github.com/arke-institute/orchestrator/internal/harness/testenv"
	"github.com/arke-institute/orchestrator/status"
)

// taskRow is what a retry must leave alone (completed tasks) or renew
// (failed ones).
type taskRow struct {
	Status     string
	Attempt    int
	Result     string
	FinishedAt *time.Time
}

func readTask(t *testing.T, env *testenv.Env, id string) taskRow {
	t.Helper()
	var r taskRow
	require.NoError(t, env.Pool.QueryRow(context.Background(),
		`SELECT status, attempt, coalesce(result::text, ''), finished_at FROM tasks WHERE id = $1`, id).
		Scan(&r.Status, &r.Attempt, &r.Result, &r.FinishedAt))
	return r
}

func retry(t *testing.T, env *testenv.Env, id, token string) (int, []byte) {
	t.Helper()
	return env.DoAuth(t, http.MethodPost, "/admin/retry/"+id, token, nil)
}

func errorMessage(t *testing.T, body []byte) string {
	t.Helper()
	var out map[string]string
	require.NoError(t, json.Unmarshal(body, &out), "body: %s", body)
	return out["error"]
}

func countEvents(t *testing.T, env *testenv.Env, batchID, typ, taskID string) int {
	t.Helper()
	var n int
	require.NoError(t, env.Pool.QueryRow(context.Background(), `SELECT count(*) FROM batch_events
		WHERE batch_id = $1 AND type = $2 AND ($3 = '' OR task_id = $3)`, batchID, typ, taskID).Scan(&n))
	return n
}

func errorBody(l fakefly.Launch) string {
	b, _ := json.Marshal(map[string]any{"task_id": l.TaskID, "batch_id": l.BatchID, "status": "error", "error": "Failed to decode TIFF"})
	return string(b)
}

// finishAll plays every worker launched from now on with success until the
// batch ends, and returns its final status.
func finishAll(t *testing.T, env *testenv.Env, id string, launches <-chan fakefly.Launch) status.Status {
	t.Helper()
	var st status.Status
	if !eventually.Within(60*time.Second, func() bool {
		for drained := false; !drained; {
			select {
			case l := <-launches:
				postCallback(t, env, l, callbackBody(l))
			default:
				drained = true
			}
		}
		st = env.Status(t, id)
		return st.Status == "DONE" || st.Status == "ERROR"
	}) {
		t.Fatalf("batch %s did not finish: %+v", id, st)
	}
	return st
}

// TestRetryRerunsOnlyFailedTasks: in a running phase with one task
// completed, one failed and one still out, a retry relaunches the failed
// task alone; the completed one is never touched or relaunched, and the
// batch finishes with every task completed.
func TestRetryRerunsOnlyFailedTasks(t *testing.T) {
	t.Parallel()
	opts, launches := heldLaunches()
	env := testenv.New(t, opts)
	const id = "RETRY-RUNNING"
	env.Submit(t, id, []testenv.File{
		{LogicalPath: "/scans/a.tif", Size: 100, ContentType: "image/tiff"},
		{LogicalPath: "/scans/b.tif", Size: 100, ContentType: "image/tiff"},
		{LogicalPath: "/scans/c.tif", Size: 100, ContentType: "image/tiff"},
	})
	byFile := map[string]fakefly.Launch{}
	for range 3 {
		l := nextLaunch(t, launches)
		byFile[l.Env["INPUT_R2_KEY"][strings.LastIndex(l.Env["INPUT_R2_KEY"], "/")+1:]] = l
	}
	a, b, c := byFile["a.tif"], byFile["b.tif"], byFile["c.tif"]
	postCallback(t, env, a, callbackBody(a))
	postCallback(t, env, b, errorBody(b))
	before := readTask(t, env, a.TaskID)
	require.Equal(t, "completed", before.Status)
	require.Equal(t, "failed", readTask(t, env, b.TaskID).Status)

	code, body := retry(t, env, id, "")
	require.Equal(t, http.StatusUnauthorized, code, "body: %s", body)
	code, body = retry(t, env, id, "wrong-token")
	require.Equal(t, http.StatusUnauthorized, code, "body: %s", body)
	require.Equal(t, "failed", readTask(t, env, b.TaskID).Status, "a refused retry changes nothing")

	code, body = retry(t, env, id, testenv.AdminToken)
	require.Equal(t, http.StatusOK, code, "body: %s", body)
	var st status.Status
	require.NoError(t, json.Unmarshal(body, &st))
	require.Equal(t, "TIFF_CONVERSION", st.Status)
	require.Equal(t, int64(0), st.Progress.TasksFailed)

	// Only b is launched again, with a fresh token.
	b2 := nextLaunch(t, launches)
	require.Equal(t, b.TaskID, b2.TaskID)
	require.NotEqual(t, b.Env["CALLBACK_TOKEN"], b2.Env["CALLBACK_TOKEN"])
	require.Equal(t, before, readTask(t, env, a.TaskID), "the completed task is untouched")
	require.Equal(t, 1, countEvents(t, env, id, "task.requeued", b.TaskID))
	require.Equal(t, 0, countEvents(t, env, id, "task.requeued", a.TaskID))
	require.Equal(t, 1, countEvents(t, env, id, "admin.retry", ""))

	// b's first worker is too late now: its token was retired.
	code, _ = env.DoAuth(t, http.MethodPost, "/callback/"+id+"/"+b.TaskID, b.Env["CALLBACK_TOKEN"], strings.NewReader(callbackBody(b)))
	require.Equal(t, http.StatusUnauthorized, code)

	// Nothing failed any more: a second retry has nothing to do.
	code, body = retry(t, env, id, testenv.AdminToken)
	require.Equal(t, http.StatusConflict, code)
	require.Contains(t, errorMessage(t, body), "is running TIFF_CONVERSION with no failed work")

	postCallback(t, env, b2, callbackBody(b2))
	postCallback(t, env, c, callbackBody(c))
	st = finishAll(t, env, id, launches)
	require.Equal(t, "DONE", st.Status, "error: %v", st.Error)
	require.Equal(t, status.PhaseProgress{Phase: "TIFF_CONVERSION", Executor: "machine", Unit: "tasks", TasksTotal: 3, TasksCompleted: 3}, st.Phases[0])
	require.Equal(t, before, readTask(t, env, a.TaskID))
	require.Equal(t, 1, countEvents(t, env, id, "task.launched", a.TaskID), "completed work is never redone")
	require.Equal(t, 2, countEvents(t, env, id, "task.launched", b.TaskID))

	code, body = retry(t, env, id, testenv.AdminToken)
	require.Equal(t, http.StatusConflict, code)
	require.Contains(t, errorMessage(t, body), "is DONE")
}

// TestRetryResumesErrorBatch: a batch reset (ERROR) in its first phase
// resumes there: the task the reset ended runs again, the completed one
// does not, and the batch finishes. A batch that failed before its first
// phase starts again once its manifest is fixed.
func TestRetryResumesErrorBatch(t *testing.T) {
	t.Parallel()
	opts, launches := heldLaunches()
	env := testenv.New(t, opts)

	t.Run("InPhase", func(t *testing.T) {
		const id = "RETRY-ERROR"
		env.Submit(t, id, []testenv.File{
			{LogicalPath: "/scans/a.tif", Size: 100, ContentType: "image/tiff"},
			{LogicalPath: "/scans/b.tif", Size: 100, ContentType: "image/tiff"},
		})
		first, second := nextLaunch(t, launches), nextLaunch(t, launches)
		postCallback(t, env, first, callbackBody(first))
		before := readTask(t, env, first.TaskID)

		code, body := env.DoAuth(t, http.MethodPost, "/admin/reset/"+id, testenv.AdminToken, nil)
		require.Equal(t, http.StatusOK, code, "body: %s", body)
		require.Equal(t, "failed", readTask(t, env, second.TaskID).Status)

		code, body = retry(t, env, id, testenv.AdminToken)
		require.Equal(t, http.StatusOK, code, "body: %s", body)
		var st status.Status
		require.NoError(t, json.Unmarshal(body, &st))
		require.Equal(t, "TIFF_CONVERSION", st.Status)
		require.Nil(t, st.Error)
		require.Nil(t, st.CompletedAt)

		again := nextLaunch(t, launches)
		require.Equal(t, second.TaskID, again.TaskID)
		require.Equal(t, before, readTask(t, env, first.TaskID))
		postCallback(t, env, again, callbackBody(again))
		st = finishAll(t, env, id, launches)
		require.Equal(t, "DONE", st.Status, "error: %v", st.Error)
		require.Equal(t, status.PhaseProgress{Phase: "TIFF_CONVERSION", Executor: "machine", Unit: "tasks", TasksTotal: 2, TasksCompleted: 2}, st.Phases[0])
		require.Equal(t, 1, countEvents(t, env, id, "task.launched", first.TaskID))

		var data string
		require.NoError(t, env.Pool.QueryRow(context.Background(),
			`SELECT data::text FROM batch_events WHERE batch_id = $1 AND type = 'admin.retry'`, id).Scan(&data))
		require.JSONEq(t, `{"previous_status": "ERROR", "previous_error": "Manually reset by admin", "resumed_status": "TIFF_CONVERSION",
			"phase": "TIFF_CONVERSION", "tasks_requeued": 1}`, data)
	})

	t.Run("BeforeFirstPhase", func(t *testing.T) {
		const id = "RETRY-NOMANIFEST"
		msg := strings.ReplaceAll(exampleMessage, exampleBatchID, id)
		code, _ := postBatch(t, env, msg)
		require.Equal(t, http.StatusAccepted, code)
		st := env.AwaitStatus(t, id, notPending)
		require.Equal(t, "ERROR", st.Status)
		require.Nil(t, st.Phase)

		env.PutObject(t, "staging/"+id+"/_manifest.json", []byte(strings.ReplaceAll(exampleManifest, exampleBatchID, id)))
		code, body := retry(t, env, id, testenv.AdminToken)
		require.Equal(t, http.StatusOK, code, "body: %s", body)
		st = env.AwaitStatus(t, id, func(st status.Status) bool { return st.Status != "PENDING" })
		require.Equal(t, "PDF_PAGES", st.Status, "error: %v", st.Error)
	})

	t.Run("Refused", func(t *testing.T) {
		code, body := retry(t, env, "NO-SUCH-BATCH", testenv.AdminToken)
		require.Equal(t, http.StatusNotFound, code)
		require.Equal(t, "batch NO-SUCH-BATCH: not found", errorMessage(t, body))
		code, _ = retry(t, env, "NO-SUCH-BATCH", "")
		require.Equal(t, http.StatusUnauthorized, code, "the credential is checked before anything else")
	})
}

// TestInfraFailuresEndTheBatchAndRetryOnlyThem: a phase whose work failed
// for infrastructure reasons beyond INFRA_FAILURE_MAX ends the batch in
// ERROR, saying so, instead of handing ingest a thinned batch; the status
// tells the bad file apart from the one infrastructure failed, and a retry
// with mode=infrastructure reruns only the latter.
func TestInfraFailuresEndTheBatchAndRetryOnlyThem(t *testing.T) {
	t.Parallel()
	env := testenv.New(t, testenv.Options{Behave: func(l fakefly.Launch) fakefly.Behavior {
		switch {
		case strings.HasSuffix(l.Env["INPUT_R2_KEY"], "/t000.tif"):
			return fakefly.Behavior{Body: errorBody(l)} // a bad file
		case strings.HasSuffix(l.Env["INPUT_R2_KEY"], "/t001.tif") && l.Attempt == 1:
			return fakefly.Behavior{Hang: true} // infrastructure
		}
		return testenv.Succeed(l)
	}, Settings: map[string]string{"TASK_TIMEOUT_TIFF_CONVERSION": "500", "TASK_MAX_ATTEMPTS": "1", "INFRA_FAILURE_MAX": "0"}})
	const id = "INFRA-MAX"
	env.Submit(t, id, testenv.Tiffs(4))
	st := env.AwaitStatus(t, id, testenv.IsDone)
	require.Equal(t, "ERROR", st.Status)
	require.Equal(t, "TIFF_CONVERSION", *st.Phase)
	require.Contains(t, *st.Error, "1 of 4 tasks failed for infrastructure reasons")
	require.Contains(t, *st.Error, "mode=infrastructure")
	require.Equal(t, status.Failures{Permanent: 1, Infrastructure: 1}, st.Failures)
	require.Equal(t, "none", st.Ingest.Status, "ingest never receives the thinned batch")

	code, body := env.DoAuth(t, http.MethodPost, "/admin/retry/"+id+"?mode=everything", testenv.AdminToken, nil)
	require.Equal(t, http.StatusBadRequest, code, string(body))
	require.Contains(t, errorMessage(t, body), "mode must be all or infrastructure")

	bad, hung := env.TaskOf(t, id, "t000.tif"), env.TaskOf(t, id, "t001.tif")
	code, body = env.DoAuth(t, http.MethodPost, "/admin/retry/"+id+"?mode=infrastructure", testenv.AdminToken, nil)
	require.Equal(t, http.StatusOK, code, string(body))
	st = env.AwaitStatus(t, id, func(s status.Status) bool {
		return s.Status == "DONE" || s.Status == "ERROR" && s.Phase != nil && *s.Phase != "TIFF_CONVERSION"
	})
	require.Equal(t, "DONE", st.Status, "error: %v", st.Error)
	require.Equal(t, "completed", readTask(t, env, hung).Status)
	require.Equal(t, 2, readTask(t, env, hung).Attempt)
	require.Equal(t, taskRow{Status: "failed", Attempt: 1}, func() taskRow { r := readTask(t, env, bad); r.FinishedAt, r.Result = nil, ""; return r }(),
		"the bad file was not tried again")
	require.Equal(t, status.Failures{Permanent: 1}, st.Failures)
}
