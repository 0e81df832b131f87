package pool_test

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/arke-institute/orchestrator/db"
	"github.com/arke-institute/orchestrator/executor/pool"
	"github.com/arke-institute/orchestrator/internal/fakes/fakefly"
	"github.com/arke-institute/orchestrator/internal/harness/eventually"
	"github.com/arke-institute/orchestrator/internal/harness/testenv"
	"github.com/arke-institute/orchestrator/phases"
	"github.com/arke-institute/orchestrator/problem"
	"github.com/arke-institute/orchestrator/status"
	"github.com/arke-institute/orchestrator/tasktoken"
)

// poolLaunches are the fake's launches of pool machines (not tasks'
// leases).
func poolLaunches(env *testenv.Env) []fakefly.Launch {
	var out []fakefly.Launch
	for _, l := range env.Fly.Launches() {
		if l.Env["POOL_LEASE_URL"] != "" {
			out = append(out, l)
		}
	}
	return out
}

// hangPools makes pool machines that never lease: the test leases itself.
func hangPools(l fakefly.Launch) fakefly.Behavior {
	if l.Env["POOL_LEASE_URL"] != "" {
		return fakefly.Behavior{Hang: true}
	}
	return fakefly.Succeed(l)
}

// TestPoolTakesABatchThrough: pools of 3 machines take 20 TIFFs and their
// 20 JPEGs through both phases: never more than 3 machines a phase, each
// task leased once, and the machines leave when the work is done.
func TestPoolTakesABatchThrough(t *testing.T) {
	t.Parallel()
	env := testenv.New(t, testenv.Options{Settings: testenv.PoolSettings(3, nil)})
	const id = "POOL-THROUGH"
	env.Submit(t, id, testenv.Tiffs(20))
	st := env.AwaitStatus(t, id, testenv.IsDone)
	require.Equal(t, "DONE", st.Status, "error: %v", st.Error)

	launches := poolLaunches(env)
	byApp := map[string]int{}
	for _, l := range launches {
		byApp[l.App]++
		require.Empty(t, l.Env["CALLBACK_TOKEN"], "a pool machine holds its pool credential only")
		require.NotEmpty(t, l.Env["POOL_TOKEN"])
		require.NotContains(t, l.Env, "INPUT_URL")
	}
	require.Equal(t, map[string]int{testenv.TiffApp: 3, testenv.ImageApp: 3}, byApp)
	require.Equal(t, 40, env.Fly.Counts().Leases, "each task leased once")
	var attempts int
	require.NoError(t, env.Pool.QueryRow(context.Background(), `SELECT max(attempt) FROM tasks WHERE batch_id = $1`, id).Scan(&attempts))
	require.Equal(t, 1, attempts)
	tiff, ok := testenv.PhaseOf(st, phases.TIFFConversion)
	require.True(t, ok)
	require.Equal(t, status.PhaseProgress{Phase: "TIFF_CONVERSION", Executor: pool.Kind, Unit: "tasks", TasksTotal: 20, TasksCompleted: 20,
		Detail: tiff.Detail}, tiff)
	require.EqualValues(t, 3, tiff.Detail["machines"])
	require.EqualValues(t, 20, tiff.Detail["leases"])
	// The pools' machines exit when their pool has no work left: told so
	// at their next lease request.
	eventually.True(t, 10*time.Second, "the pool machines to exit", func() bool { return env.Fly.Counts().Live == 0 })
}

// TestPoolMachineDiesMidTask: a pool machine that dies in the middle of a
// task loses its lease to the sweep once its heartbeats stop, well before
// the task's deadline; the task is retried on another machine, once, and
// the batch ends DONE.
func TestPoolMachineDiesMidTask(t *testing.T) {
	t.Parallel()
	var crashed atomic.Bool
	env := testenv.New(t, testenv.Options{
		// A task timeout of 6 s: heartbeats every 1 s, a lease of 3 s.
		Settings: testenv.PoolSettings(2, map[string]string{"TASK_TIMEOUT_TIFF_CONVERSION": "6000", "TASK_TIMEOUT_PER_GB_TIFF_CONVERSION": "0"}),
		Behave: func(l fakefly.Launch) fakefly.Behavior {
			if l.PoolMachine != "" && strings.HasSuffix(l.Env["INPUT_R2_KEY"], "/t002.tif") && crashed.CompareAndSwap(false, true) {
				return fakefly.Behavior{Crash: true, Delay: 100 * time.Millisecond}
			}
			return fakefly.Succeed(l)
		},
	})
	const id = "POOL-CRASH"
	env.Submit(t, id, testenv.Tiffs(6))
	st := env.AwaitStatus(t, id, testenv.IsDone)
	require.Equal(t, "DONE", st.Status, "error: %v", st.Error)
	require.True(t, crashed.Load())
	require.Equal(t, 1, env.Fly.Counts().Crashed)

	task := env.TaskOf(t, id, "t002.tif")
	var attempt, failures int
	var taskStatus string
	require.NoError(t, env.Pool.QueryRow(context.Background(), `SELECT attempt, failures, status FROM tasks WHERE id = $1`, task).
		Scan(&attempt, &failures, &taskStatus))
	require.Equal(t, []any{2, 1, "completed"}, []any{attempt, failures, taskStatus}, "retried once on another lease")
	var msg string
	require.NoError(t, env.Pool.QueryRow(context.Background(),
		`SELECT data->>'error' FROM batch_events WHERE batch_id = $1 AND task_id = $2 AND type = 'task.timed_out'`, id, task).Scan(&msg))
	require.Contains(t, msg, "Lease lost: no heartbeat from its machine for")
}

// machineToken makes a pool machine's credential for the pool of a
// batch's phase, as the pool's manager does, and returns it.
func machineToken(t *testing.T, env *testenv.Env, poolID int64) string {
	t.Helper()
	nonce := fmt.Sprintf("test-token-%d-%d", poolID, time.Now().UnixNano())
	token, err := tasktoken.New(env.Pool).Seal(context.Background(), tasktoken.PoolMachine(poolID), nonce)
	require.NoError(t, err)
	_, err = db.New(env.Pool).PoolMachineInsert(context.Background(), db.PoolMachineInsertParams{PoolID: poolID, App: testenv.TiffApp, TokenHash: tasktoken.Record(nonce)})
	require.NoError(t, err)
	return token
}

// openPool is the id of the open pool of a phase for a batch ("" for the
// phase's shared pool), once the batch has entered the phase.
func openPool(t *testing.T, env *testenv.Env, batchID string, phase phases.Name) int64 {
	t.Helper()
	var id int64
	eventually.True(t, 10*time.Second, "the pool to open", func() bool {
		err := env.Pool.QueryRow(context.Background(),
			`SELECT id FROM pools WHERE phase = $1 AND coalesce(batch_id, '') = $2 AND closed_at IS NULL`, string(phase), batchID).Scan(&id)
		return err == nil
	})
	return id
}

// executorOf is the pool executor of the env.
func executorOf(t *testing.T, env *testenv.Env) *pool.Executor {
	t.Helper()
	ex, _, ok := env.Deps.Executors.Of(string(phases.TIFFConversion))
	require.True(t, ok)
	p, ok := ex.(*pool.Executor)
	require.True(t, ok, "TIFF_CONVERSION runs on %s", ex.Kind())
	return p
}

// leaseWithin leases with a bounded wait: nil when no task came.
func leaseWithin(t *testing.T, e *pool.Executor, poolID int64, token string, d time.Duration) *pool.LeasedTask {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	l, err := e.Lease(ctx, poolID, token, nil)
	if ctx.Err() != nil {
		return nil
	}
	require.NoError(t, err)
	return l.Task
}

// TestSharedPoolServesBatchesInTurn: a pool shared by the batches of a
// phase (POOL_SCOPE=phase) leases to the batch with the fewest tasks
// leased: two batches get two each of four leases, whichever came first.
func TestSharedPoolServesBatchesInTurn(t *testing.T) {
	t.Parallel()
	env := testenv.New(t, testenv.Options{Settings: testenv.PoolSettings(1, map[string]string{"POOL_SCOPE": "phase"}), Behave: hangPools})
	env.Submit(t, "SHARED-A", testenv.Tiffs(6))
	env.Submit(t, "SHARED-B", testenv.Tiffs(6))
	for _, id := range []string{"SHARED-A", "SHARED-B"} {
		env.AwaitStatus(t, id, func(st status.Status) bool {
			p, ok := testenv.PhaseOf(st, phases.TIFFConversion)
			return ok && p.TasksPending == 6
		})
	}
	poolID := openPool(t, env, "", phases.TIFFConversion)
	e := executorOf(t, env)
	token := machineToken(t, env, poolID)
	got := map[string]int{}
	for range 4 {
		task := leaseWithin(t, e, poolID, token, 5*time.Second)
		require.NotNil(t, task)
		got[task.Env["BATCH_ID"]]++
	}
	require.Equal(t, map[string]int{"SHARED-A": 2, "SHARED-B": 2}, got)
}

// TestLeaseNeverTwice: many machines leasing at once take every task of
// the pool once, and no task twice.
func TestLeaseNeverTwice(t *testing.T) {
	t.Parallel()
	env := testenv.New(t, testenv.Options{Settings: testenv.PoolSettings(1, nil), Behave: hangPools})
	const id, tasks, leasers = "LEASE-RACE", 120, 12
	env.Submit(t, id, testenv.Tiffs(tasks))
	env.AwaitStatus(t, id, func(st status.Status) bool {
		p, ok := testenv.PhaseOf(st, phases.TIFFConversion)
		return ok && p.TasksPending == tasks
	})
	poolID := openPool(t, env, id, phases.TIFFConversion)
	e := executorOf(t, env)
	var (
		mu     sync.Mutex
		leased = map[string]int{}
		wg     sync.WaitGroup
	)
	for range leasers {
		token := machineToken(t, env, poolID)
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				// A deadline that cannot cut a lease's commit short (a
				// lease committed but never answered is reclaimed by the
				// sweep, not counted here).
				ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
				l, err := e.Lease(ctx, poolID, token, nil)
				cancel()
				if err != nil || l.Task == nil {
					return // none left: every task is leased
				}
				mu.Lock()
				leased[l.Task.Env["TASK_ID"]]++
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	require.Len(t, leased, tasks)
	for task, n := range leased {
		require.Equal(t, 1, n, "task %s leased %d times", task, n)
	}
	var processing, maxAttempt int
	require.NoError(t, env.Pool.QueryRow(context.Background(),
		`SELECT count(*) FILTER (WHERE status = 'processing'), max(attempt) FROM tasks WHERE batch_id = $1`, id).Scan(&processing, &maxAttempt))
	require.Equal(t, []int{tasks, 1}, []int{processing, maxAttempt})
}

// TestPoolCredentials: a pool credential leases from its own pool only,
// opens no task's callback, and ends with its machine.
func TestPoolCredentials(t *testing.T) {
	t.Parallel()
	env := testenv.New(t, testenv.Options{Settings: testenv.PoolSettings(1, nil), Behave: hangPools})
	env.Submit(t, "CRED-A", testenv.Tiffs(2))
	env.Submit(t, "CRED-B", testenv.Tiffs(2))
	poolA, poolB := openPool(t, env, "CRED-A", phases.TIFFConversion), openPool(t, env, "CRED-B", phases.TIFFConversion)
	e := executorOf(t, env)
	tokenA := machineToken(t, env, poolA)

	_, err := e.Lease(context.Background(), poolB, tokenA, nil)
	require.ErrorIs(t, err, problem.ErrUnauthorized, "another pool's credential")
	_, err = e.Lease(context.Background(), poolA, "not-a-token", nil)
	require.ErrorIs(t, err, problem.ErrUnauthorized)

	task := leaseWithin(t, e, poolA, tokenA, 5*time.Second)
	require.NotNil(t, task)
	require.Equal(t, "CRED-A", task.Env["BATCH_ID"])
	// The pool credential opens no callback, of its task or another's.
	code, body := env.DoAuth(t, http.MethodPost, "/callback/CRED-A/"+task.Env["TASK_ID"], tokenA,
		strings.NewReader(`{"status": "error", "error": "x"}`))
	require.Equal(t, http.StatusUnauthorized, code, "%s", body)
	code, body = env.DoAuth(t, http.MethodPost, "/callback/CRED-A/"+task.Env["TASK_ID"]+"/heartbeat", tokenA, strings.NewReader(`{}`))
	require.Equal(t, http.StatusUnauthorized, code, "%s", body)
	// The task's own token heartbeats, through the API.
	code, body = env.DoAuth(t, http.MethodPost, "/callback/CRED-A/"+task.Env["TASK_ID"]+"/heartbeat", task.Env["CALLBACK_TOKEN"], strings.NewReader(`{}`))
	require.Equal(t, http.StatusOK, code, "%s", body)
	require.Contains(t, string(body), "lease_until")
	// Through the API too, a lease needs a pool credential.
	code, _ = env.DoAuth(t, http.MethodPost, fmt.Sprintf("/pools/%d/lease", poolA), task.Env["CALLBACK_TOKEN"], strings.NewReader(`{}`))
	require.Equal(t, http.StatusUnauthorized, code)

	// A machine told "done" is ended: its credential leases nothing more.
	err = db.New(env.Pool).PoolMachineEnd(context.Background(), db.PoolMachineEndParams{ID: machineID(t, env, tokenA), Reason: "test"})
	require.NoError(t, err)
	_, err = e.Lease(context.Background(), poolA, tokenA, nil)
	require.ErrorIs(t, err, problem.ErrUnauthorized)
}

// machineID is the pool machine row of a credential.
func machineID(t *testing.T, env *testenv.Env, token string) int64 {
	t.Helper()
	var id int64
	require.NoError(t, env.Pool.QueryRow(context.Background(), `SELECT id FROM pool_machines WHERE token_hash = $1`, tasktoken.RecordOf(token)).Scan(&id))
	return id
}

// TestResetDestroysThePool: resetting a batch closes its pools and
// destroys their machines.
func TestResetDestroysThePool(t *testing.T) {
	t.Parallel()
	env := testenv.New(t, testenv.Options{Settings: testenv.PoolSettings(3, nil), Behave: hangPools})
	const id = "POOL-RESET"
	env.Submit(t, id, testenv.Tiffs(5))
	eventually.True(t, 10*time.Second, "the pool's 3 machines", func() bool { return env.Fly.Counts().Live == 3 })
	_, err := env.Client.Reset(context.Background(), id)
	require.NoError(t, err)
	eventually.True(t, 30*time.Second, "the pool's machines destroyed", func() bool { return env.Fly.Counts().Live == 0 })
	require.Equal(t, 3, env.Fly.Counts().Destroyed)
	var open int
	require.NoError(t, env.Pool.QueryRow(context.Background(), `SELECT count(*) FROM pools WHERE batch_id = $1 AND closed_at IS NULL`, id).Scan(&open))
	require.Zero(t, open)
}
