package pool_test

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/arke-institute/orchestrator/executor/pool"
	"github.com/arke-institute/orchestrator/internal/fakes/fakefly"
	"github.com/arke-institute/orchestrator/internal/harness/eventually"
	"github.com/arke-institute/orchestrator/internal/harness/testenv"
	"github.com/arke-institute/orchestrator/phases"
	"github.com/arke-institute/orchestrator/status"
	"github.com/arke-institute/orchestrator/worker/protocol"
)

// TestWorkerProtocolVersions: the orchestrator names its protocol version
// in a pool machine's and a leased task's environment; it takes the
// leases, heartbeats, requests for URLs and callbacks of workers of
// version 1 (no header, the previous release's) and 2, and refuses those
// of version 3 with 400, applying nothing.
func TestWorkerProtocolVersions(t *testing.T) {
	t.Parallel()
	env := testenv.New(t, testenv.Options{Settings: testenv.PoolSettings(1, nil), Behave: hangPools})
	const id = "PROTOCOL"
	env.Submit(t, id, testenv.Tiffs(2))
	env.AwaitStatus(t, id, func(st status.Status) bool {
		p, ok := testenv.PhaseOf(st, phases.TIFFConversion)
		return ok && p.TasksPending == 2
	})
	poolID := openPool(t, env, id, phases.TIFFConversion)
	eventually.True(t, 10*time.Second, "a pool machine's launch", func() bool { return len(poolLaunches(env)) > 0 })
	require.Equal(t, "2", poolLaunches(env)[0].Env[protocol.EnvVar], "a pool machine's environment")
	token := machineToken(t, env, poolID)
	leaseURL := fmt.Sprintf("/pools/%d/lease", poolID)

	code, body := send(t, env, leaseURL, token, "3", `{}`)
	require.Equal(t, http.StatusBadRequest, code, "%s", body)
	require.Contains(t, body, "worker protocol 3 is newer than this orchestrator's (1-2)")

	// One task leased by a worker of version 1, one by version 2.
	var tasks [2]*pool.LeasedTask
	for i, version := range []string{"", "2"} {
		code, body := send(t, env, leaseURL, token, version, `{}`)
		require.Equal(t, http.StatusOK, code, "%s", body)
		var l pool.Lease
		require.NoError(t, json.Unmarshal([]byte(body), &l))
		require.NotNil(t, l.Task, "version %q leased nothing: %s", version, body)
		require.Equal(t, "2", l.Task.Env[protocol.EnvVar], "a task's environment")
		tasks[i] = l.Task
	}

	for i, version := range []string{"", "2"} {
		task := tasks[i].Env
		path := "/callback/" + id + "/" + task["TASK_ID"]
		for _, route := range []struct{ path, body string }{
			{path + "/heartbeat", `{}`},
			{path + "/urls", `{"objects": [{"method": "GET", "bucket": "` + task["R2_BUCKET"] + `", "key": "` + task["INPUT_R2_KEY"] + `"}]}`},
		} {
			code, body := send(t, env, route.path, task["CALLBACK_TOKEN"], "3", route.body)
			require.Equal(t, http.StatusBadRequest, code, "%s: %s", route.path, body)
			require.Contains(t, body, "worker protocol 3 is newer")
			code, body = send(t, env, route.path, task["CALLBACK_TOKEN"], version, route.body)
			require.Equal(t, http.StatusOK, code, "%s, version %q: %s", route.path, version, body)
		}
		success, err := fakefly.SuccessBody(fakefly.Launch{TaskID: task["TASK_ID"], BatchID: id, Env: task})
		require.NoError(t, err)
		code, body := send(t, env, path, task["CALLBACK_TOKEN"], "3", string(success))
		require.Equal(t, http.StatusBadRequest, code, "%s", body)
		require.Contains(t, body, "worker protocol 3 is newer")
		require.Equal(t, string(phases.TaskProcessing), taskStatus(t, env, task["TASK_ID"]), "a refused callback applies nothing")
		code, body = send(t, env, path, task["CALLBACK_TOKEN"], version, string(success))
		require.Equal(t, http.StatusOK, code, "version %q: %s", version, body)
		require.Equal(t, string(phases.TaskCompleted), taskStatus(t, env, task["TASK_ID"]))
	}
}

// send posts body to path with the bearer token and, unless version is
// "", the worker's protocol version; it returns the status and body.
func send(t *testing.T, env *testenv.Env, path, token, version, body string) (int, string) {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, env.Server.URL+path, strings.NewReader(body))
	require.NoError(t, err)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+token)
	if version != "" {
		req.Header.Set(protocol.Header, version)
	}
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return resp.StatusCode, string(b)
}

// taskStatus is a task's status now.
func taskStatus(t *testing.T, env *testenv.Env, taskID string) string {
	t.Helper()
	var s string
	require.NoError(t, env.Pool.QueryRow(t.Context(), `SELECT status FROM tasks WHERE id = $1`, taskID).Scan(&s))
	return s
}
