package machine_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/arke-institute/orchestrator/internal/fakes/fakefly"
	"github.com/arke-institute/orchestrator/internal/harness/eventually"
	"github.com/arke-institute/orchestrator/internal/harness/metricstest"
	"github.com/arke-institute/orchestrator/internal/harness/testenv"
)

// workerError is a worker's error callback for l, retryable or not.
func workerError(l fakefly.Launch, msg string, retryable bool) fakefly.Behavior {
	return fakefly.Behavior{Body: fmt.Sprintf(`{"task_id": %q, "batch_id": %q, "status": "error", "error": %q, "retryable": %t}`,
		l.TaskID, l.BatchID, msg, retryable)}
}

// isFile tells whether l is the launch of the task of the TIFF named name
// (tiffs' /tNNN.tif).
func isFile(l fakefly.Launch, name string) bool {
	return l.App == testenv.TiffApp && strings.HasSuffix(l.Env["INPUT_R2_KEY"], "/"+name)
}

// taskState is a task's status, error and failed attempts.
func taskState(t *testing.T, env *testenv.Env, taskID string) (status, msg string, failures int) {
	t.Helper()
	require.NoError(t, env.Pool.QueryRow(context.Background(), `SELECT status, coalesce(error, ''), failures FROM tasks WHERE id = $1`, taskID).
		Scan(&status, &msg, &failures))
	return status, msg, failures
}

// launchesOf lists the launches that made a machine for a task.
func launchesOf(env *testenv.Env, taskID string) []fakefly.Launch {
	var out []fakefly.Launch
	for _, l := range env.Fly.Launches() {
		if l.TaskID == taskID && l.MachineID != "" {
			out = append(out, l)
		}
	}
	return out
}

// TestTimedOutTaskIsRetriedOnAFreshMachine: a task's first machine hangs
// past the timeout. The task is launched again on a fresh machine with a
// new token, only once the first machine has been destroyed, and
// completes; the first attempt's token is then refused (409).
func TestTimedOutTaskIsRetriedOnAFreshMachine(t *testing.T) {
	t.Parallel()
	var fly atomic.Pointer[fakefly.Server]
	var aliveAtRelaunch atomic.Int32 // the task's machines alive when its second machine was asked for
	env := testenv.New(t, testenv.Options{Behave: func(l fakefly.Launch) fakefly.Behavior {
		switch {
		case !isFile(l, "t000.tif"):
			return testenv.Succeed(l)
		case l.Attempt == 1:
			return fakefly.Behavior{Hang: true}
		}
		for _, m := range fly.Load().Machines(testenv.TiffApp) {
			if m.TaskID == l.TaskID {
				aliveAtRelaunch.Add(1)
			}
		}
		return testenv.Succeed(l)
	}, Settings: map[string]string{"TASK_TIMEOUT_TIFF_CONVERSION": "1000"}})
	fly.Store(env.Fly)
	const id = "TIMEOUT-RETRY"
	env.Submit(t, id, testenv.Tiffs(2))
	st := env.AwaitStatus(t, id, testenv.IsDone)
	require.Equal(t, "DONE", st.Status, "error: %v", st.Error)
	require.Equal(t, int64(2), st.Phases[0].TasksCompleted, "%+v", st.Phases)

	taskID := env.TaskOf(t, id, "t000.tif")
	status, _, failures := taskState(t, env, taskID)
	require.Equal(t, "completed", status)
	require.Equal(t, 1, failures)
	ls := launchesOf(env, taskID)
	require.Len(t, ls, 2)
	require.Equal(t, []string{"1", "2"}, []string{ls[0].Metadata["attempt"], ls[1].Metadata["attempt"]})
	require.NotEqual(t, ls[0].Env["CALLBACK_TOKEN"], ls[1].Env["CALLBACK_TOKEN"], "each attempt has its own token")
	require.Contains(t, env.Fly.Destroyed(), ls[0].MachineID)
	require.Zero(t, aliveAtRelaunch.Load(), "the first machine was destroyed before the second launch")
	require.Equal(t, 1, env.CountEvents(t, id, "task.timed_out"))
	require.Equal(t, 1, env.CountEvents(t, id, "task.retrying"))
	metricstest.Await(t, env.Metrics.Registry(), metricstest.S("orchestrator_task_retries_total", 1, "phase", "TIFF_CONVERSION", "reason", "timeout"))
	require.Zero(t, metricstest.Value(t, env.Metrics.Registry(), "orchestrator_tasks_finished_total",
		map[string]string{"phase": "TIFF_CONVERSION", "outcome": "timed_out"}), "a retried attempt does not finish its task")

	// The superseded attempt's late callback.
	late, _ := json.Marshal(map[string]any{"status": "success", "output_r2_key": "staging/" + id + "/x.jpg", "output_file_name": "x.jpg", "output_file_size": 1})
	code, body := env.DoAuth(t, http.MethodPost, "/callback/"+id+"/"+taskID, ls[0].Env["CALLBACK_TOKEN"], bytes.NewReader(late))
	require.Equal(t, http.StatusConflict, code, string(body))
	require.Contains(t, string(body), "completed by another attempt")
}

// TestAnEarlierAttemptsSuccessIsTaken: a task's first machine times out
// and is given up on (its destruction answered but the machine still
// posts: as one cut off by a partition), the task is launched again, and
// the first attempt's success arrives while the second runs. It is taken:
// the task completes with it, the second machine is destroyed, and the
// second attempt's callback is refused and changes nothing.
func TestAnEarlierAttemptsSuccessIsTaken(t *testing.T) {
	t.Parallel()
	env := testenv.New(t, testenv.Options{Behave: func(l fakefly.Launch) fakefly.Behavior {
		if isFile(l, "t000.tif") {
			return fakefly.Behavior{Hang: true}
		}
		return testenv.Succeed(l)
	}, Settings: map[string]string{"TASK_TIMEOUT_TIFF_CONVERSION": "1000"}})
	const id = "OVERTAKEN"
	env.Submit(t, id, testenv.Tiffs(2))
	var ls []fakefly.Launch
	eventually.True(t, 30*time.Second, "a second attempt's machine", func() bool {
		ls = ls[:0]
		for _, l := range env.Fly.Launches() {
			if isFile(l, "t000.tif") && l.MachineID != "" {
				ls = append(ls, l)
			}
		}
		return len(ls) == 2
	})
	first, second, taskID := ls[0], ls[1], ls[0].TaskID

	code, body := env.DoAuth(t, http.MethodPost, "/callback/"+id+"/"+taskID, first.Env["CALLBACK_TOKEN"], bytes.NewReader(testenv.WorkerResult(first)))
	require.Equal(t, http.StatusOK, code, string(body))
	st := env.AwaitStatus(t, id, testenv.IsDone)
	require.Equal(t, "DONE", st.Status, "error: %v", st.Error)
	require.Equal(t, int64(2), st.Phases[0].TasksCompleted, "%+v", st.Phases)
	eventually.True(t, 10*time.Second, "the second machine destroyed", func() bool {
		return slices.Contains(env.Fly.Destroyed(), second.MachineID)
	})
	status, _, _ := taskState(t, env, taskID)
	require.Equal(t, "completed", status)
	var completions int
	require.NoError(t, env.Pool.QueryRow(context.Background(), `SELECT count(*) FROM batch_events WHERE task_id = $1 AND type = 'task.completed'`, taskID).Scan(&completions))
	require.Equal(t, 1, completions)

	// The first attempt's repeat is a repeat; the second's success is refused.
	code, body = env.DoAuth(t, http.MethodPost, "/callback/"+id+"/"+taskID, first.Env["CALLBACK_TOKEN"], bytes.NewReader(testenv.WorkerResult(first)))
	require.Equal(t, http.StatusOK, code, string(body))
	code, body = env.DoAuth(t, http.MethodPost, "/callback/"+id+"/"+taskID, second.Env["CALLBACK_TOKEN"], bytes.NewReader(testenv.WorkerResult(second)))
	require.Equal(t, http.StatusConflict, code, string(body))
	require.Contains(t, string(body), "completed by another attempt")
}

// TestSweepWaitsOutARestart: within SWEEP_RESTART_GRACE of a start (of
// this process here; of Postgres alike) the sweep times out nothing, so a
// machine whose callback comes after its deadline, as one retrying through
// an outage does, completes its task on its one attempt.
func TestSweepWaitsOutARestart(t *testing.T) {
	t.Parallel()
	env := testenv.New(t, testenv.Options{Behave: func(l fakefly.Launch) fakefly.Behavior {
		if isFile(l, "t000.tif") {
			return fakefly.Behavior{Delay: 3 * time.Second}
		}
		return testenv.Succeed(l)
	}, Settings: map[string]string{"TASK_TIMEOUT_TIFF_CONVERSION": "300", "SWEEP_RESTART_GRACE": "3600000"}})
	const id = "SWEEP-GRACE"
	env.Submit(t, id, testenv.Tiffs(2))
	st := env.AwaitStatus(t, id, testenv.IsDone)
	require.Equal(t, "DONE", st.Status, "error: %v", st.Error)
	taskID := env.TaskOf(t, id, "t000.tif")
	status, _, failures := taskState(t, env, taskID)
	require.Equal(t, []any{"completed", 0}, []any{status, failures}, "the late success was taken, no attempt spent")
	require.Len(t, launchesOf(env, taskID), 1)
	require.Zero(t, env.CountEvents(t, id, "task.timed_out"))
}

// TestRelaunchWaitsForTheDestruction: the timed-out machine's destruction
// fails for a while (Fly answers 503 to its DELETE); the task is launched
// again only once the destruction went through.
func TestRelaunchWaitsForTheDestruction(t *testing.T) {
	t.Parallel()
	var fly atomic.Pointer[fakefly.Server]
	var aliveAtRelaunch atomic.Int32
	env := testenv.New(t, testenv.Options{Behave: func(l fakefly.Launch) fakefly.Behavior {
		switch {
		case !isFile(l, "t000.tif"):
			return testenv.Succeed(l)
		case l.Attempt == 1:
			// Hangs; its destruction will fail for a while.
			fly.Load().FailDestroys(http.StatusServiceUnavailable, 8)
			return fakefly.Behavior{Hang: true}
		}
		for _, m := range fly.Load().Machines(testenv.TiffApp) {
			if m.TaskID == l.TaskID {
				aliveAtRelaunch.Add(1)
			}
		}
		return testenv.Succeed(l)
	}, Settings: map[string]string{"TASK_TIMEOUT_TIFF_CONVERSION": "1000"}})
	fly.Store(env.Fly)
	const id = "RETIRE-WAITS"
	env.Submit(t, id, testenv.Tiffs(1))
	st := env.AwaitStatus(t, id, testenv.IsDone)
	require.Equal(t, "DONE", st.Status, "error: %v", st.Error)
	taskID := env.TaskOf(t, id, "t000.tif")
	ls := launchesOf(env, taskID)
	require.Len(t, ls, 2)
	require.Zero(t, aliveAtRelaunch.Load(), "no second machine while the first was alive")
	require.Contains(t, env.Fly.Destroyed(), ls[0].MachineID)
}

// TestAnIndestructibleMachineIsNeverRelaunchedOver: when Fly keeps
// refusing to destroy a timed-out attempt's machine, the task is never
// launched again while that machine may live (one task, one live
// machine). Past TASK_RETIRE_LIMIT the refusals count as an outage of the
// Machines API, which LAUNCH_OUTAGE_BUDGET bounds: the batch ends in
// ERROR with the reason instead of waiting for ever.
func TestAnIndestructibleMachineIsNeverRelaunchedOver(t *testing.T) {
	t.Parallel()
	var fly atomic.Pointer[fakefly.Server]
	env := testenv.New(t, testenv.Options{Behave: func(l fakefly.Launch) fakefly.Behavior {
		if isFile(l, "t000.tif") && l.Attempt == 1 {
			fly.Load().FailDestroys(http.StatusServiceUnavailable, 1_000_000)
			return fakefly.Behavior{Hang: true}
		}
		return testenv.Succeed(l)
	}, Settings: map[string]string{"TASK_TIMEOUT_TIFF_CONVERSION": "500", "TASK_RETIRE_LIMIT": "1000", "LAUNCH_OUTAGE_BUDGET": "3000"}})
	fly.Store(env.Fly)
	const id = "RETIRE-NEVER-OVER"
	env.Submit(t, id, testenv.Tiffs(2))
	st := env.AwaitStatus(t, id, testenv.IsDone)
	require.Equal(t, "ERROR", st.Status)
	require.NotNil(t, st.Error)
	require.Contains(t, *st.Error, "failed transiently")
	require.Contains(t, *st.Error, "destroying machine")
	taskID := env.TaskOf(t, id, "t000.tif")
	require.Len(t, launchesOf(env, taskID), 1, "never launched again while its machine may live")
}

// TestWorkerErrorsRetriedOnlyWhenTransient: a worker that reports a
// transient error ("retryable": true) gets another machine and completes,
// the error costing no attempt within TRANSIENT_RETRY_WINDOW (1 ms here:
// only the first); one that reports a permanent error fails at once; one
// whose every attempt fails transiently fails once past the window
// TASK_MAX_ATTEMPTS attempts failed, with its last error.
func TestWorkerErrorsRetriedOnlyWhenTransient(t *testing.T) {
	t.Parallel()
	env := testenv.New(t, testenv.Options{Behave: func(l fakefly.Launch) fakefly.Behavior {
		switch {
		case isFile(l, "t000.tif") && l.Attempt == 1:
			return workerError(l, "reading input: store answered 503 Service Unavailable", true)
		case isFile(l, "t001.tif"):
			return workerError(l, "decoding TIFF: unsupported compression", false)
		case isFile(l, "t002.tif"):
			return workerError(l, fmt.Sprintf("reading input: timeout (attempt %d)", l.Attempt), true)
		}
		return testenv.Succeed(l)
	}, Settings: map[string]string{"TASK_MAX_ATTEMPTS": "2", "TRANSIENT_RETRY_WINDOW": "1"}})
	const id = "WORKER-RETRY"
	env.Submit(t, id, testenv.Tiffs(3))
	st := env.AwaitStatus(t, id, testenv.IsDone)
	require.Equal(t, "DONE", st.Status, "error: %v", st.Error)

	transient, permanent, exhausted := env.TaskOf(t, id, "t000.tif"), env.TaskOf(t, id, "t001.tif"), env.TaskOf(t, id, "t002.tif")
	status, _, failures := taskState(t, env, transient)
	require.Equal(t, []any{"completed", 0}, []any{status, failures})
	require.Len(t, launchesOf(env, transient), 2)

	status, msg, failures := taskState(t, env, permanent)
	require.Equal(t, []any{"failed", "decoding TIFF: unsupported compression", 0}, []any{status, msg, failures})
	require.Len(t, launchesOf(env, permanent), 1, "a permanent error is final")

	status, msg, failures = taskState(t, env, exhausted)
	require.Equal(t, []any{"failed", "reading input: timeout (attempt 3)", 2}, []any{status, msg, failures})
	require.Len(t, launchesOf(env, exhausted), 3, "the first error within the window, then TASK_MAX_ATTEMPTS")

	require.Equal(t, 3, env.CountEvents(t, id, "task.retrying"))
	metricstest.Await(t, env.Metrics.Registry(), metricstest.S("orchestrator_task_retries_total", 3, "phase", "TIFF_CONVERSION", "reason", "transient_error"))
	requireOneMachinePerAttempt(t, env, id)
}

// requireOneMachinePerAttempt checks that no launch attempt of a task made
// two machines.
func requireOneMachinePerAttempt(t *testing.T, env *testenv.Env, batchID string) {
	t.Helper()
	created := map[string]int{}
	for _, l := range env.Fly.Launches() {
		if l.BatchID == batchID && l.MachineID != "" {
			created[l.TaskID+" attempt "+l.Metadata["attempt"]]++
		}
	}
	for k, n := range created {
		require.Equal(t, 1, n, "task %s got %d machines", k, n)
	}
}

// TestFlyOutageIsNotAnError: Fly answers 503 to launches for longer than
// MAX_RETRY_ATTEMPTS retries take. The batch does not err, the machine
// already running finishes its task meanwhile, and once Fly is back every
// task completes. A permanent 4xx still errs the batch
// (TestLaunchErrorsExhaustRetries).
func TestFlyOutageIsNotAnError(t *testing.T) {
	t.Parallel()
	var outage atomic.Bool
	outage.Store(true)
	env := testenv.New(t, testenv.Options{Behave: func(l fakefly.Launch) fakefly.Behavior {
		switch {
		case isFile(l, "t000.tif"):
			// Launched before the outage, it runs through it.
			b := testenv.Succeed(l)
			b.Delay = 1500 * time.Millisecond
			return b
		case l.App == testenv.TiffApp && outage.Load():
			return fakefly.Behavior{LaunchStatus: http.StatusServiceUnavailable}
		}
		return testenv.Succeed(l)
	}, Settings: map[string]string{"MAX_RETRY_ATTEMPTS": "2", "LAUNCH_OUTAGE_BUDGET": "60000"}})
	const id = "FLY-OUTAGE"
	env.Submit(t, id, testenv.Tiffs(3))
	eventually.True(t, 30*time.Second, "more transient launch failures than MAX_RETRY_ATTEMPTS", func() bool {
		return env.CountEvents(t, id, "phase.retry") >= 5
	})
	running := env.TaskOf(t, id, "t000.tif")
	eventually.True(t, 30*time.Second, "the running machine's task completed during the outage", func() bool {
		status, _, _ := taskState(t, env, running)
		return status == "completed"
	})
	require.Equal(t, "TIFF_CONVERSION", env.Status(t, id).Status)
	var transient bool
	require.NoError(t, env.Pool.QueryRow(context.Background(), `SELECT bool_and((data->>'transient')::bool) FROM batch_events
		WHERE batch_id = $1 AND type = 'phase.retry'`, id).Scan(&transient))
	require.True(t, transient)

	outage.Store(false)
	st := env.AwaitStatus(t, id, testenv.IsDone)
	require.Equal(t, "DONE", st.Status, "error: %v", st.Error)
	require.Equal(t, int64(3), st.Phases[0].TasksCompleted, "%+v", st.Phases)
	env.RequireOneMachinePerTask(t, id)
}

// TestUnresolvedLaunchesCostNoAttempt: Fly answers 503 to a task's launch
// and to the lookup after it, more times than TASK_MAX_ATTEMPTS, so the
// launcher cannot tell whether a machine exists and the sweep settles the
// task at each deadline (no machine found: launch again). No worker ran,
// so none of that is the task's failure: it completes on the machine that
// is finally made, with no failed attempt.
func TestUnresolvedLaunchesCostNoAttempt(t *testing.T) {
	t.Parallel()
	const unresolved = 4 // > TASK_MAX_ATTEMPTS (2 here)
	var fly atomic.Pointer[fakefly.Server]
	env := testenv.New(t, testenv.Options{Behave: func(l fakefly.Launch) fakefly.Behavior {
		if l.App == testenv.TiffApp && l.Attempt <= unresolved {
			// The lookup that follows fails too: its first request and
			// fly-go's 3 retries of a 503.
			fly.Load().Fail(http.StatusServiceUnavailable, 4)
			return fakefly.Behavior{LaunchStatus: http.StatusServiceUnavailable}
		}
		return testenv.Succeed(l)
	}, Settings: map[string]string{
		// The deadline leaves the lookup's retries (up to about 0.7 s) time
		// to fail before the sweep looks for the machine itself.
		"TASK_TIMEOUT_TIFF_CONVERSION": "1500", "TASK_MAX_ATTEMPTS": "2",
	}})
	fly.Store(env.Fly)
	const id = "FLY-UNRESOLVED"
	env.Submit(t, id, testenv.Tiffs(1))
	st := env.AwaitStatus(t, id, testenv.IsDone)
	require.Equal(t, "DONE", st.Status, "error: %v", st.Error)
	require.Equal(t, int64(1), st.Phases[0].TasksCompleted, "%+v", st.Phases)
	task := env.TaskOf(t, id, "t000.tif")
	status, _, failures := taskState(t, env, task)
	require.Equal(t, "completed", status)
	require.Zero(t, failures, "a launch that made no machine cost an attempt")
	var settled int
	require.NoError(t, env.Pool.QueryRow(context.Background(), `SELECT count(*) FROM batch_events
		WHERE task_id = $1 AND type = 'task.retrying' AND data->>'reason' LIKE 'no machine was found%'`, task).Scan(&settled))
	// Each unresolved launch is settled by the sweep, at least as many as
	// the attempts a task has (one whose lookup the sweep itself raced
	// under load may be settled by the launcher instead, costing nothing
	// either way).
	require.GreaterOrEqual(t, settled, 2, "the sweep settled the unresolved launches")
	env.RequireOneMachinePerTask(t, id)
}

// TestLaunchOutageBudgetSpent: an outage that outlasts
// LAUNCH_OUTAGE_BUDGET errs the batch, saying why.
func TestLaunchOutageBudgetSpent(t *testing.T) {
	t.Parallel()
	env := testenv.New(t, testenv.Options{Behave: func(l fakefly.Launch) fakefly.Behavior {
		return fakefly.Behavior{LaunchStatus: http.StatusServiceUnavailable}
	}, Settings: map[string]string{"LAUNCH_OUTAGE_BUDGET": "1000", "MAX_RETRY_ATTEMPTS": "1000"}})
	const id = "FLY-OUTAGE-LONG"
	env.Submit(t, id, testenv.Tiffs(1))
	st := env.AwaitStatus(t, id, testenv.IsDone)
	require.Equal(t, "ERROR", st.Status)
	require.Contains(t, *st.Error, "Launching TIFF_CONVERSION machines failed transiently for")
	require.Contains(t, *st.Error, "LAUNCH_OUTAGE_BUDGET 1s")
	require.Contains(t, *st.Error, "503")
	require.Equal(t, 1, env.CountEvents(t, id, "batch.error"))
}

// TestAMachineThatEndsWithoutCallingBackIsRetriedSoon: machines that
// crash (vanish, as with auto-destroy) or stop without calling back have
// their tasks retried once the sweep's check of running machines sees
// them gone and MACHINE_GONE_GRACE passed, not at the task's timeout (a
// minute here); the reason says what became of the machine.
func TestAMachineThatEndsWithoutCallingBackIsRetriedSoon(t *testing.T) {
	t.Parallel()
	env := testenv.New(t, testenv.Options{Behave: func(l fakefly.Launch) fakefly.Behavior {
		switch {
		case isFile(l, "t000.tif") && l.Attempt == 1:
			return fakefly.Behavior{Crash: true}
		case isFile(l, "t001.tif") && l.Attempt == 1:
			return fakefly.Behavior{Crash: true, Linger: true}
		}
		return testenv.Succeed(l)
	}, Settings: map[string]string{"TASK_TIMEOUT_TIFF_CONVERSION": "60000", "TASK_MAX_ATTEMPTS": "2"}})
	const id = "GONE"
	env.Submit(t, id, testenv.Tiffs(3))
	st := env.AwaitStatusWithin(t, id, 45*time.Second, testenv.IsDone)
	require.Equal(t, "DONE", st.Status, "error: %v", st.Error)
	require.Equal(t, int64(3), st.Phases[0].TasksCompleted, "%+v", st.Phases)

	rows, err := env.Pool.Query(context.Background(), `SELECT regexp_replace(data->>'error', 'Machine \S+ ', '') FROM batch_events
		WHERE batch_id = $1 AND type = 'task.retrying' ORDER BY 1`, id)
	require.NoError(t, err)
	reasons, err := pgx.CollectRows(rows, pgx.RowTo[string])
	require.NoError(t, err)
	require.Equal(t, []string{"stopped without calling back", "vanished without calling back"}, reasons)
	for _, f := range []string{"t000.tif", "t001.tif"} {
		status, _, failures := taskState(t, env, env.TaskOf(t, id, f))
		require.Equal(t, []any{"completed", 1}, []any{status, failures}, f)
	}
}

// TestTransientErrorsRetriedByTime: a worker that reports a transient
// error ("retryable": true, as when storage is out) more times than
// TASK_MAX_ATTEMPTS is retried for TRANSIENT_RETRY_WINDOW from its first
// such error, none counted as a failed attempt: an outage of a few
// minutes fails no file, and leaves the task its attempts.
func TestTransientErrorsRetriedByTime(t *testing.T) {
	t.Parallel()
	env := testenv.New(t, testenv.Options{Behave: func(l fakefly.Launch) fakefly.Behavior {
		if isFile(l, "t000.tif") && l.Attempt <= 4 {
			return workerError(l, "storage out", true)
		}
		return testenv.Succeed(l)
	}, Settings: map[string]string{"TASK_MAX_ATTEMPTS": "2", "TRANSIENT_RETRY_WINDOW": "600000"}})
	const id = "TRANSIENT-BY-TIME"
	env.Submit(t, id, testenv.Tiffs(2))
	st := env.AwaitStatus(t, id, testenv.IsDone)
	require.Equal(t, "DONE", st.Status, "error: %v", st.Error)
	require.Equal(t, int64(2), st.Phases[0].TasksCompleted, "%+v", st.Phases)
	status, _, failures := taskState(t, env, env.TaskOf(t, id, "t000.tif"))
	require.Equal(t, []any{"completed", 0}, []any{status, failures}, "four transient errors, past TASK_MAX_ATTEMPTS 2, none counted")
}
