package machine_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/arke-institute/orchestrator/executor/machine"
	"github.com/arke-institute/orchestrator/internal/fakes/fakefly"
	"github.com/arke-institute/orchestrator/internal/harness/testenv"
	"github.com/arke-institute/orchestrator/status"
)

func TestCallbackRejections(t *testing.T) {
	t.Parallel()
	env := testenv.New(t, testenv.Options{Behave: func(fakefly.Launch) fakefly.Behavior { return fakefly.Behavior{Hang: true} }})
	const id = "CB-REJECT"
	env.Submit(t, id, testenv.Tiffs(1))
	l := env.AwaitBatchLaunches(t, id, 1)[0]
	token := l.Env["CALLBACK_TOKEN"]
	good := `{"status": "success", "output_r2_key": "staging/CB-REJECT/t000.jpg", "output_file_name": "t000.jpg", "output_file_size": 3}`

	tests := []struct {
		name     string
		path     string
		token    string
		body     string
		wantCode int
		wantMsg  string
	}{
		// A token opens its own task only: presented for another batch or
		// task, it is refused on its seal, before the database is read.
		{"UnknownBatch", "/callback/NOPE/" + l.TaskID, token, good, http.StatusUnauthorized, "not issued for this task"},
		{"UnknownTask", "/callback/" + id + "/tiff_nope", token, good, http.StatusUnauthorized, "not issued for this task"},
		{"MissingToken", "/callback/" + id + "/" + l.TaskID, "", good, http.StatusUnauthorized, "missing bearer token"},
		{"WrongToken", "/callback/" + id + "/" + l.TaskID, "not-the-token", good, http.StatusUnauthorized, "not issued for this task"},
		{"MalformedJSON", "/callback/" + id + "/" + l.TaskID, token, `{"status": `, http.StatusBadRequest, "invalid callback"},
		{"NotAnObject", "/callback/" + id + "/" + l.TaskID, token, `["success"]`, http.StatusBadRequest, "JSON object"},
		{"NoStatus", "/callback/" + id + "/" + l.TaskID, token, `{"output_r2_key": "x"}`, http.StatusBadRequest, "status is required"},
		{"UnknownStatus", "/callback/" + id + "/" + l.TaskID, token, `{"status": "done"}`, http.StatusBadRequest, `status must be "success" or "error", got "done"`},
		{"SuccessWithoutOutput", "/callback/" + id + "/" + l.TaskID, token, `{"status": "success"}`, http.StatusBadRequest, "output_r2_key"},
		{"OtherTaskID", "/callback/" + id + "/" + l.TaskID, token, `{"status": "error", "task_id": "tiff_other"}`, http.StatusBadRequest, "does not match"},
		{"TooLarge", "/callback/" + id + "/" + l.TaskID, token, `{"status": "error", "error": "` + strings.Repeat("x", 1<<20) + `"}`, http.StatusRequestEntityTooLarge, "larger than"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			code, body := env.DoAuth(t, http.MethodPost, tt.path, tt.token, strings.NewReader(tt.body))
			require.Equal(t, tt.wantCode, code, "%s", body)
			var out map[string]string
			require.NoError(t, json.Unmarshal(body, &out), "error bodies are JSON: %s", body)
			require.Contains(t, out["error"], tt.wantMsg)
		})
	}
	// None of them changed the task.
	require.Equal(t, int64(1), env.Status(t, id).Phases[0].TasksProcessing)

	// The right token and body apply; a repeat answers 200 and changes nothing.
	for range 2 {
		code, body := env.DoAuth(t, http.MethodPost, "/callback/"+id+"/"+l.TaskID, token, strings.NewReader(good))
		require.Equal(t, http.StatusOK, code, "%s", body)
	}
	require.Equal(t, 1, env.CountEvents(t, id, "task.completed"))
}

func TestAdminReset(t *testing.T) {
	t.Parallel()
	env := testenv.New(t, testenv.Options{Behave: func(fakefly.Launch) fakefly.Behavior { return fakefly.Behavior{Hang: true} }})
	const id = "RESET-ME"
	env.Submit(t, id, testenv.Tiffs(3))
	launches := env.AwaitBatchLaunches(t, id, 3)

	code, _ := env.DoAuth(t, http.MethodPost, "/admin/reset/"+id, "", nil)
	require.Equal(t, http.StatusUnauthorized, code)
	code, _ = env.DoAuth(t, http.MethodPost, "/admin/reset/"+id, "wrong", nil)
	require.Equal(t, http.StatusUnauthorized, code)
	code, _ = env.DoAuth(t, http.MethodPost, "/admin/reset/NO-SUCH-BATCH", testenv.AdminToken, nil)
	require.Equal(t, http.StatusNotFound, code)

	code, body := env.DoAuth(t, http.MethodPost, "/admin/reset/"+id, testenv.AdminToken, nil)
	require.Equal(t, http.StatusOK, code, "%s", body)
	var st status.Status
	require.NoError(t, json.Unmarshal(body, &st))
	require.Equal(t, "ERROR", st.Status)
	require.Equal(t, "Manually reset by admin", *st.Error)
	require.Equal(t, int64(3), st.Phases[0].TasksFailed)

	// The running machines are destroyed.
	env.Fly.Await(t, 30*time.Second, "machines destroyed", func() bool { return len(env.Fly.Machines("arke-tiff-worker")) == 0 })
	require.Len(t, env.Fly.Destroyed(), 3)

	// No job of the batch is left to run.
	var open int
	require.NoError(t, env.Pool.QueryRow(context.Background(), `SELECT count(*) FROM river_job
		WHERE args->>'batch_id' = $1 AND state IN ('available', 'scheduled', 'retryable', 'pending')`, id).Scan(&open))
	require.Zero(t, open)

	// A worker calling back after the reset gets 409, recorded.
	code, body = env.DoAuth(t, http.MethodPost, "/callback/"+id+"/"+launches[0].TaskID, launches[0].Env["CALLBACK_TOKEN"],
		strings.NewReader(`{"status": "error", "error": "too late"}`))
	require.Equal(t, http.StatusConflict, code, "%s", body)
	require.Contains(t, string(body), "was reset")
	require.Equal(t, 1, env.CountEvents(t, id, "callback.rejected"))

	// Resetting again changes nothing.
	code, _ = env.DoAuth(t, http.MethodPost, "/admin/reset/"+id, testenv.AdminToken, nil)
	require.Equal(t, http.StatusOK, code)
	require.Equal(t, 1, env.CountEvents(t, id, "admin.reset"))
}

func TestResetOfFinishedBatchConflicts(t *testing.T) {
	t.Parallel()
	env := testenv.New(t, testenv.Options{Behave: testenv.Succeed})
	const id = "RESET-DONE"
	env.Submit(t, id, []testenv.File{{LogicalPath: "/a.csv", Size: 1, ContentType: "text/csv"}})
	require.Equal(t, "DONE", env.AwaitStatus(t, id, testenv.IsDone).Status)
	code, body := env.DoAuth(t, http.MethodPost, "/admin/reset/"+id, testenv.AdminToken, nil)
	require.Equal(t, http.StatusConflict, code, "%s", body)
}

// TestFly429IsBackPressure: Fly refuses launches with 429 for a while; the
// tasks wait and launch later, none fails, and no phase retry is spent.
func TestFly429IsBackPressure(t *testing.T) {
	t.Parallel()
	env := testenv.New(t, testenv.Options{Behave: testenv.Succeed})
	env.Fly.Fail(http.StatusTooManyRequests, 6)
	const id = "FLY-429"
	env.Submit(t, id, testenv.Tiffs(4))
	st := env.AwaitStatus(t, id, testenv.IsDone)
	require.Equal(t, "DONE", st.Status, "error: %v", st.Error)
	require.Equal(t, int64(4), st.Phases[0].TasksCompleted)
	require.Zero(t, env.CountEvents(t, id, "phase.retry"))
	require.Zero(t, env.CountEvents(t, id, "task.failed"))
}

// TestTransientLaunchErrorRecovers: Fly answers 500 for a while, to the
// launch and to the lookup after it; the phase retries with backoff, a task
// whose machine could not be looked up waits for its deadline and is then
// settled by the sweep, and the batch completes with one machine per task.
func TestTransientLaunchErrorRecovers(t *testing.T) {
	t.Parallel()
	env := testenv.New(t, testenv.Options{Behave: testenv.Succeed, Settings: map[string]string{"TASK_TIMEOUT_TIFF_CONVERSION": "2000"}})
	env.Fly.Fail(http.StatusInternalServerError, 2)
	const id = "FLY-500"
	env.Submit(t, id, testenv.Tiffs(2))
	st := env.AwaitStatus(t, id, testenv.IsDone)
	require.Equal(t, "DONE", st.Status, "error: %v", st.Error)
	require.GreaterOrEqual(t, env.CountEvents(t, id, "phase.retry"), 1)
	env.RequireOneMachinePerTask(t, id)
}

// TestLaunchErrorsExhaustRetries: Fly refuses every launch (422); after
// MAX_RETRY_ATTEMPTS the batch is in ERROR, saying why.
func TestLaunchErrorsExhaustRetries(t *testing.T) {
	t.Parallel()
	env := testenv.New(t, testenv.Options{
		Behave: func(fakefly.Launch) fakefly.Behavior {
			return fakefly.Behavior{LaunchStatus: http.StatusUnprocessableEntity}
		},
		Settings: map[string]string{"MAX_RETRY_ATTEMPTS": "3"},
	})
	const id = "FLY-422"
	env.Submit(t, id, testenv.Tiffs(1))
	st := env.AwaitStatus(t, id, testenv.IsDone)
	require.Equal(t, "ERROR", st.Status)
	require.Contains(t, *st.Error, "Failed after 3 retries: launching TIFF_CONVERSION machines")
	require.Contains(t, *st.Error, "422")
	require.Equal(t, 2, env.CountEvents(t, id, "phase.retry"))
	// Nothing is left open for a batch in ERROR.
	require.Equal(t, []status.PhaseProgress{{Phase: "TIFF_CONVERSION", Executor: "machine", Unit: "tasks", TasksTotal: 1, TasksFailed: 1}}, st.Phases)
}

// TestUnrecordedLaunchIsRelaunched: the launcher died between claiming a
// task and recording its machine, and the machine is gone. At the deadline
// the sweep looks the machine up, finds none, and the task is launched
// again instead of being failed.
func TestUnrecordedLaunchIsRelaunched(t *testing.T) {
	t.Parallel()
	env := testenv.New(t, testenv.Options{Behave: func(l fakefly.Launch) fakefly.Behavior {
		if l.App == testenv.TiffApp && l.Attempt == 1 {
			// Exits without calling back, after its launch was answered.
			return fakefly.Behavior{Crash: true, Delay: 300 * time.Millisecond}
		}
		return testenv.Succeed(l)
	}})
	const id = "UNRECORDED"
	env.Submit(t, id, testenv.Tiffs(1))
	l := env.AwaitBatchLaunches(t, id, 1)[0]
	env.Fly.Await(t, 30*time.Second, "first machine gone", func() bool { return len(env.Fly.Machines(testenv.TiffApp)) == 0 })
	env.Fly.Await(t, 30*time.Second, "launch recorded", func() bool {
		var recorded bool
		require.NoError(t, env.Pool.QueryRow(context.Background(), `SELECT machine_id IS NOT NULL FROM tasks WHERE id = $1`, l.TaskID).Scan(&recorded))
		return recorded
	})
	// Simulate the crash: the machine id was never recorded, and the task's
	// deadline has passed.
	_, err := env.Pool.Exec(context.Background(), `UPDATE tasks SET machine_id = NULL, deadline = now() - interval '1 second' WHERE id = $1`, l.TaskID)
	require.NoError(t, err)

	st := env.AwaitStatus(t, id, testenv.IsDone)
	require.Equal(t, "DONE", st.Status, "error: %v", st.Error)
	require.Equal(t, int64(1), st.Phases[0].TasksCompleted, "%+v", st.Phases)
	var launches int
	for _, x := range env.Fly.Launches() {
		if x.TaskID == l.TaskID {
			launches++
		}
	}
	require.Equal(t, 2, launches)
}

// TestSweepSettlesUnrecordedLaunches: four tasks of a batch expire with
// no recorded machine. One's machine still runs: the sweep records it and
// the task, in its last attempt, times out. One's machine is gone: it is
// launched again and completes. The third's is gone too, in what would be
// its last attempt: a launch that made no machine ran none of its work and
// costs no attempt, so it too is launched again and completes. The
// fourth's is its maxUnlaunched-th launch without a machine: it fails with
// its own message. The sweep settles the four in one statement.
func TestSweepSettlesUnrecordedLaunches(t *testing.T) {
	t.Parallel()
	var first atomic.Bool
	env := testenv.New(t, testenv.Options{Behave: func(l fakefly.Launch) fakefly.Behavior {
		switch {
		case l.App == testenv.TiffApp && l.Attempt == 1 && first.CompareAndSwap(false, true):
			return fakefly.Behavior{Hang: true}
		case l.App == testenv.TiffApp && l.Attempt == 1:
			return fakefly.Behavior{Crash: true, Delay: 300 * time.Millisecond}
		}
		return testenv.Succeed(l)
	}})
	const id = "SETTLE"
	ctx := context.Background()
	env.Submit(t, id, testenv.Tiffs(4))
	env.AwaitBatchLaunches(t, id, 4)
	env.Fly.Await(t, 30*time.Second, "launches recorded", func() bool {
		var n int
		require.NoError(t, env.Pool.QueryRow(ctx, `SELECT count(*) FROM tasks WHERE batch_id = $1 AND machine_id IS NOT NULL`, id).Scan(&n))
		return n == 4
	})
	env.Fly.Await(t, 30*time.Second, "crashed machines gone", func() bool { return len(env.Fly.Machines(testenv.TiffApp)) == 1 })
	running := env.Fly.Machines(testenv.TiffApp)[0].TaskID
	var gone []string
	require.NoError(t, pgx.BeginFunc(ctx, env.Pool, func(tx pgx.Tx) error {
		rows, err := tx.Query(ctx, `SELECT id FROM tasks WHERE batch_id = $1 AND id <> $2 ORDER BY id`, id, running)
		if err != nil {
			return err
		}
		if gone, err = pgx.CollectRows(rows, pgx.RowTo[string]); err != nil {
			return err
		}
		// The launcher's crash: no machine recorded, deadlines passed; the
		// last task, and the running one, are in their last attempt.
		if _, err := tx.Exec(ctx, `UPDATE tasks SET machine_id = NULL, deadline = now() - interval '1 second' WHERE batch_id = $1`, id); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, `UPDATE tasks SET failures = $3 - 1 WHERE id IN ($1, $2)`, gone[1], running, env.Config.TaskMaxAttempts); err != nil {
			return err
		}
		_, err = tx.Exec(ctx, `UPDATE tasks SET unlaunched = $2 - 1 WHERE id = $1`, gone[2], machine.MaxUnlaunched)
		return err
	}))

	st := env.AwaitStatus(t, id, testenv.IsDone)
	require.Equal(t, "DONE", st.Status, "error: %v", st.Error)
	type task struct {
		status, err string
		machine     bool
	}
	tasks := map[string]task{}
	rows, err := env.Pool.Query(ctx, `SELECT id, status, coalesce(error, ''), machine_id IS NOT NULL FROM tasks WHERE batch_id = $1`, id)
	require.NoError(t, err)
	var tid string
	var tk task
	_, err = pgx.ForEachRow(rows, []any{&tid, &tk.status, &tk.err, &tk.machine}, func() error { tasks[tid] = tk; return nil })
	require.NoError(t, err)
	require.Equal(t, "failed", tasks[running].status)
	require.Contains(t, tasks[running].err, "timed out")
	require.True(t, tasks[running].machine, "the running machine was recorded")
	require.Equal(t, task{status: "completed", machine: true}, tasks[gone[0]])
	require.Equal(t, task{status: "completed", machine: true}, tasks[gone[1]])
	require.Equal(t, task{status: "failed", err: fmt.Sprintf("no machine could be launched in %d tries", machine.MaxUnlaunched)}, tasks[gone[2]])
	launches := map[string]int{}
	for _, l := range env.Fly.Launches() {
		if l.App == testenv.TiffApp {
			launches[l.TaskID]++
		}
	}
	require.Equal(t, map[string]int{running: 1, gone[0]: 2, gone[1]: 2, gone[2]: 1}, launches)
	require.Equal(t, 1, env.CountEvents(t, id, "task.timed_out"))
	require.Equal(t, 2, env.CountEvents(t, id, "task.retrying"))
	require.Equal(t, 1, env.CountEvents(t, id, "task.failed"))
	var failures int
	require.NoError(t, env.Pool.QueryRow(ctx, `SELECT failures FROM tasks WHERE id = $1`, gone[1]).Scan(&failures))
	require.Equal(t, env.Config.TaskMaxAttempts-1, failures, "the launch that made no machine cost no attempt")
}

// TestAmbiguousLaunchIsReconciled: the first launch creates the machine but
// answers 500; the launcher finds the machine by its task id instead of
// launching a second one.
func TestAmbiguousLaunchIsReconciled(t *testing.T) {
	t.Parallel()
	env := testenv.New(t, testenv.Options{Behave: func(l fakefly.Launch) fakefly.Behavior {
		b := testenv.Succeed(l)
		b.CreateThenFail = l.Attempt == 1
		return b
	}})
	const id = "FLY-AMBIGUOUS"
	env.Submit(t, id, testenv.Tiffs(3))
	st := env.AwaitStatus(t, id, testenv.IsDone)
	require.Equal(t, "DONE", st.Status, "error: %v", st.Error)
	require.Equal(t, int64(3), st.Phases[0].TasksCompleted)
	env.RequireOneMachinePerTask(t, id)
	require.Zero(t, env.CountEvents(t, id, "phase.retry"), "a found machine is a success, not a retry")
}

// TestIngestIsRetriedUntilAcknowledged: ingest answers 503 twice; delivery
// is retried, the attempts show in the status, and the key stays the same.
func TestIngestIsRetriedUntilAcknowledged(t *testing.T) {
	t.Parallel()
	env := testenv.New(t, testenv.Options{Behave: testenv.Succeed})
	env.Ingest.FailFirst.Store(2)
	const id = "INGEST-RETRY"
	env.Submit(t, id, []testenv.File{{LogicalPath: "/a.csv", Size: 1, ContentType: "text/csv"}})
	st := env.AwaitStatus(t, id, func(st status.Status) bool { return st.Ingest.Status == "delivered" || st.Status == "ERROR" })
	require.Equal(t, "DONE", st.Status)
	require.Equal(t, int32(3), st.Ingest.Attempts)
	require.NotNil(t, st.Ingest.DeliveredAt)
	calls := env.Ingest.Calls()
	require.Len(t, calls, 3)
	require.Equal(t, []int{503, 503, 200}, []int{calls[0].Status, calls[1].Status, calls[2].Status})
	require.Equal(t, calls[0].IdempotencyKey, calls[2].IdempotencyKey, "a retry repeats the same delivery")
	require.Equal(t, 2, env.CountEvents(t, id, "ingest.failed"))
}

// TestWithoutIngestTheManifestIsWrittenToTheBucket: with no WORKER_URL the
// final manifest lands next to the original one.
func TestWithoutIngestTheManifestIsWrittenToTheBucket(t *testing.T) {
	t.Parallel()
	env := testenv.New(t, testenv.Options{Behave: testenv.Succeed, Settings: map[string]string{"WORKER_URL": ""}})
	const id = "NO-INGEST"
	env.Submit(t, id, []testenv.File{{LogicalPath: "/docs/a.csv", Size: 7, ContentType: "text/csv"}})
	env.AwaitStatus(t, id, func(st status.Status) bool { return st.Ingest.Status == "delivered" })
	data, err := env.Store.Get(context.Background(), env.Bucket, "staging/"+id+"/_manifest.processed.json")
	require.NoError(t, err)
	var got struct {
		BatchID  string `json:"batch_id"`
		Manifest struct {
			TotalFiles  int `json:"total_files"`
			Directories []struct {
				DirectoryPath string `json:"directory_path"`
			} `json:"directories"`
		} `json:"manifest"`
	}
	require.NoError(t, json.Unmarshal(data, &got))
	require.Equal(t, id, got.BatchID)
	require.Equal(t, 1, got.Manifest.TotalFiles)
	require.Equal(t, "/docs", got.Manifest.Directories[0].DirectoryPath)
	require.Empty(t, env.Ingest.Calls())
}
