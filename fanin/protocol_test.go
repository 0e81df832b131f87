package fanin_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/riverqueue/river"
	"github.com/riverqueue/river/rivertype"
	"github.com/stretchr/testify/require"

	"github.com/arke-institute/orchestrator/db"
	"github.com/arke-institute/orchestrator/fanin"
	"github.com/arke-institute/orchestrator/internal/fakes/fakefly"
	"github.com/arke-institute/orchestrator/internal/harness/eventually"
	"github.com/arke-institute/orchestrator/internal/harness/testenv"
	"github.com/arke-institute/orchestrator/jobs"
	"github.com/arke-institute/orchestrator/status"
)

// fanInReps and fanInTasks size the fan-in race test: every repetition is
// a phase whose tasks all call back at the same instant.
const (
	fanInReps  = 30
	fanInTasks = 8
)

// TestFanInLosesNoWakeUp fires all the callbacks of a phase at once, many
// times over, with the sweep's backstop switched off, and requires every
// phase to transition promptly. (TestLastCallbackDuringCheck shows, every
// time, the interleaving that loses a wake-up without the fan-in's lock.)
func TestFanInLosesNoWakeUp(t *testing.T) {
	if testing.Short() {
		t.Skip("a load test (about 15 s); make test runs it")
	}
	t.Parallel()
	env := testenv.New(t, testenv.Options{
		NoSweep: true,
		// Machines never call back on their own: the test posts the callbacks.
		Behave: testenv.Hang,
		// Widen the race window a little: each check lingers after
		// counting, as a slow database would make it, so callbacks keep
		// arriving while checks run.
		Hooks: &jobs.TestHooks{AfterOpenCount: func(_ string, open int64) {
			if open > 0 {
				time.Sleep(25 * time.Millisecond)
			}
		}},
	})

	for rep := range fanInReps {
		id := fmt.Sprintf("FANIN-%02d", rep)
		files := make([]testenv.File, fanInTasks)
		for i := range files {
			files[i] = testenv.File{LogicalPath: fmt.Sprintf("/scan-%d.tif", i), Size: 10, ContentType: "image/tiff"}
		}
		env.Submit(t, id, files)
		launches := env.AwaitBatchLaunches(t, id, fanInTasks)

		// All callbacks start together.
		start := make(chan struct{})
		var wg sync.WaitGroup
		codes := make([]int, len(launches))
		for i, l := range launches {
			wg.Add(1)
			go func() {
				defer wg.Done()
				body, _ := json.Marshal(map[string]any{
					"status": "success", "output_r2_key": l.Env["INPUT_R2_KEY"] + ".jpg",
					"output_file_name": fmt.Sprintf("scan-%d.jpg", i), "output_file_size": 5,
				})
				req, _ := http.NewRequest(http.MethodPost, l.Env["CALLBACK_URL"], bytes.NewReader(body))
				req.Header.Set("Authorization", "Bearer "+l.Env["CALLBACK_TOKEN"])
				req.Header.Set("Content-Type", "application/json")
				<-start
				// Spread the arrivals over a few checks (River fetches a newly
				// inserted check after its 100 ms fetch cooldown).
				time.Sleep(time.Duration(rand.IntN(300)) * time.Millisecond)
				resp, err := http.DefaultClient.Do(req)
				if err != nil {
					t.Error(err)
					return
				}
				resp.Body.Close()
				codes[i] = resp.StatusCode
			}()
		}
		close(start)
		wg.Wait()
		for _, c := range codes {
			require.Equal(t, http.StatusOK, c)
		}

		// With no sweep running, only the callbacks' own checks can move
		// the batch on. Ten seconds is far beyond a check's latency.
		var st status.Status
		if !eventually.Within(10*time.Second, func() bool {
			st = env.Status(t, id)
			return st.Status != "TIFF_CONVERSION"
		}) {
			t.Fatalf("rep %d: every task of TIFF_CONVERSION ended but the phase never transitioned: a lost wake-up (%+v)", rep, st.Phases)
		}
		require.Equal(t, "IMAGE_PROCESSING", st.Status, "rep %d: error %v", rep, st.Error)
	}
}

// TestLastCallbackDuringCheck makes the losing interleaving happen every
// time: a check has counted exactly one open task and is still running when
// that last task's callback arrives.
//
//   - Guarded (as in production): the callback waits for the check's
//     exclusive lock, then finds the check finished and enqueues a new one,
//     which transitions the phase.
//   - Unguarded (TestHooks.NoFanInGuard): the callback commits at once, its
//     enqueue swallowed by the running check, which then completes on its
//     count of one open task: every task has ended, no check is left, and
//     the phase never transitions. This is the lost wake-up the lock
//     prevents; the test fails if the lock is not what prevents it.
func TestLastCallbackDuringCheck(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name  string
		guard bool
	}{{"Guarded", true}, {"Unguarded", false}} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			const id = "FANIN-LAST"
			// Hold the check open (after its count, before it completes)
			// until the last callback has had its chance to run.
			hold, counted, release := testenv.HoldCheck(id, 1, 30*time.Second)
			env := testenv.New(t, testenv.Options{
				NoSweep: true, Behave: testenv.Hang,
				Hooks: &jobs.TestHooks{NoFanInGuard: !tc.guard, AfterOpenCount: hold},
			})
			var once sync.Once
			free := func() { once.Do(func() { close(release) }) }
			t.Cleanup(free) // before the client stops, should the test fail
			ctx := t.Context()
			env.Submit(t, id, testenv.Tiffs(2))
			launches := env.AwaitBatchLaunches(t, id, 2)

			failTask(t, env, id, launches[0]) // its check counts one task open, and is held there
			select {
			case <-counted:
			case <-time.After(30 * time.Second):
				t.Fatal("no check counted the last open task")
			}
			// The last callback, while that check is still running.
			done := make(chan int, 1)
			go func() {
				body, _ := json.Marshal(map[string]any{"status": "error", "error": "test"})
				code, _ := env.DoAuth(t, http.MethodPost, "/callback/"+id+"/"+launches[1].TaskID, launches[1].Env["CALLBACK_TOKEN"], bytes.NewReader(body))
				done <- code
			}()
			// Guarded, it waits for the check's lock; unguarded, it commits.
			code := 0
			eventually.True(t, 30*time.Second, "the last callback to answer or to wait for the batch's lock", func() bool {
				select {
				case code = <-done:
					return true
				default:
					return env.BatchLockAwaited(t, id)
				}
			})
			if tc.guard {
				require.Zero(t, code, "the last callback did not wait for the running check")
			} else {
				require.Equal(t, http.StatusOK, code)
			}
			free()
			if code == 0 {
				select {
				case code = <-done:
				case <-time.After(30 * time.Second):
					t.Fatal("the last callback never answered")
				}
			}
			require.Equal(t, http.StatusOK, code)

			if tc.guard {
				st := env.AwaitStatus(t, id, func(st status.Status) bool { return st.Status != "TIFF_CONVERSION" })
				require.Equal(t, "DONE", st.Status, "both TIFFs failed, so no image phase: done")
				return
			}
			// Unguarded: once the held check has finished, nothing is left
			// that could move the batch on.
			var checks, unfinished int
			eventually.True(t, 30*time.Second, "the held check to finish", func() bool {
				require.NoError(t, env.Pool.QueryRow(ctx, `SELECT count(*), count(*) FILTER (WHERE state NOT IN ('completed', 'cancelled', 'discarded'))
					FROM river_job WHERE kind = 'phase_check' AND args->>'batch_id' = $1`, id).Scan(&checks, &unfinished))
				return unfinished == 0
			})
			require.Equal(t, 1, checks, "the last callback's check was not swallowed")
			st := env.Status(t, id)
			require.Equal(t, "TIFF_CONVERSION", st.Status, "the phase moved on without the guard")
			require.Len(t, st.Phases, 1)
			require.Equal(t, int64(2), st.Phases[0].TasksFailed, "%+v", st.Phases)
			require.Zero(t, st.Phases[0].TasksPending+st.Phases[0].TasksProcessing, "%+v", st.Phases)
		})
	}
}

// failTask posts a failure callback for l's task, which must be applied.
func failTask(t *testing.T, env *testenv.Env, batchID string, l fakefly.Launch) {
	t.Helper()
	body, _ := json.Marshal(map[string]any{"status": "error", "error": "test"})
	code, resp := env.DoAuth(t, http.MethodPost, "/callback/"+batchID+"/"+l.TaskID, l.Env["CALLBACK_TOKEN"], bytes.NewReader(body))
	require.Equal(t, http.StatusOK, code, string(resp))
}

// TestBackstopRecoversLostWakeUp: a task's callback is applied but its
// wake-up is lost (no phase_check is queued), and nothing touches the batch
// for a while. The sweep's backstop finds the phase with no open task and
// queues its check, and the batch goes on to DONE.
func TestBackstopRecoversLostWakeUp(t *testing.T) {
	t.Parallel()
	env := testenv.New(t, testenv.Options{Behave: func(l fakefly.Launch) fakefly.Behavior {
		if l.App == testenv.TiffApp {
			return fakefly.Behavior{Hang: true} // its callback is made below
		}
		return testenv.Succeed(l)
	}})
	const id = "LOST-WAKE-UP"
	ctx := t.Context()
	env.Submit(t, id, testenv.Tiffs(1))
	l := env.AwaitBatchLaunches(t, id, 1)[0]
	body, err := json.Marshal(testenv.WorkerResult(l))
	require.NoError(t, err)
	_, err = env.Pool.Exec(ctx, `UPDATE tasks SET status = 'completed', ended_by = 'callback', result = $2, finished_at = now()
		WHERE id = $1`, l.TaskID, body)
	require.NoError(t, err)
	_, err = env.Pool.Exec(ctx, `UPDATE batches SET updated_at = now() - interval '1 hour' WHERE id = $1`, id)
	require.NoError(t, err)

	st := env.AwaitStatus(t, id, testenv.IsDone)
	require.Equal(t, "DONE", st.Status, "error: %v", st.Error)
	require.Equal(t, int64(1), st.Phases[0].TasksCompleted, "%+v", st.Phases)
}

// TestCheckWaitsOutOpenPhase: a check that finds more tasks open than the
// wait-out threshold snoozes, without taking the batch's lock, and stays
// unfinished, so task ends meanwhile enqueue no check of their own; once
// few enough are open it looks under the lock as before, and the phase
// still transitions.
func TestCheckWaitsOutOpenPhase(t *testing.T) {
	t.Parallel()
	env := testenv.New(t, testenv.Options{NoSweep: true, Behave: testenv.Hang, Hooks: &jobs.TestHooks{WaitOutAbove: 1}})
	const id = "WAIT-OUT"
	ctx := t.Context()
	env.Submit(t, id, testenv.Tiffs(3))
	launches := env.AwaitBatchLaunches(t, id, 3)
	post := func(l fakefly.Launch) { failTask(t, env, id, l) }
	type checks struct {
		jobs, unfinished int
		snoozes          int64
	}
	read := func() (c checks) {
		require.NoError(t, env.Pool.QueryRow(ctx, `SELECT count(*), count(*) FILTER (WHERE state NOT IN ('completed', 'discarded', 'cancelled')),
			coalesce(max((metadata->>'snoozes')::bigint), 0)
			FROM river_job WHERE kind = 'phase_check' AND args->>'batch_id' = $1`, id).Scan(&c.jobs, &c.unfinished, &c.snoozes))
		return c
	}
	await := func(what string, cond func(checks) bool) checks {
		t.Helper()
		var c checks
		if !eventually.Within(30*time.Second, func() bool { c = read(); return cond(c) }) {
			t.Fatalf("phase checks of %s: waited for %s; last %+v", id, what, c)
		}
		return c
	}

	post(launches[0]) // two left open: its check waits them out
	c := await("a snooze", func(c checks) bool { return c.snoozes >= 1 })
	require.Equal(t, checks{jobs: 1, unfinished: 1, snoozes: c.snoozes}, c)

	// Waiting out takes no lock: with the batch's exclusive lock held
	// elsewhere, the check keeps waking and snoozing.
	tx, err := env.Pool.Begin(ctx)
	require.NoError(t, err)
	require.NoError(t, db.New(tx).BatchLockExclusive(ctx, id))
	await("two more snoozes under a held lock", func(n checks) bool { return n.snoozes >= c.snoozes+2 })
	require.NoError(t, tx.Rollback(ctx))

	// One left open: the waiting check is still unfinished, so this end
	// enqueues nothing; the check then looks under the lock, finds one
	// task open and completes.
	post(launches[1])
	c = await("the check to finish", func(c checks) bool { return c.unfinished == 0 })
	require.Equal(t, 1, c.jobs, "a task end enqueued a check while one was waiting")
	require.Equal(t, "TIFF_CONVERSION", env.Status(t, id).Status)

	post(launches[2]) // the last: its own check moves the batch on
	st := env.AwaitStatus(t, id, func(st status.Status) bool { return st.Status != "TIFF_CONVERSION" })
	require.Equal(t, "DONE", st.Status, "every TIFF failed, so no image phase: done")
	require.Equal(t, 2, read().jobs)
}

// TestTaskEndsWhileCheckWaitsOut makes the waiting check's race happen
// every time: the check has counted the phase's tasks open, without a
// lock, when they all end. Those ends find the check running (unfinished)
// and enqueue none, so the phase moves on only because the check, having
// counted them open, snoozes instead of completing, and looks again.
func TestTaskEndsWhileCheckWaitsOut(t *testing.T) {
	t.Parallel()
	const id = "WAIT-OUT-RACE"
	// Hold the check after its count until both remaining tasks have ended.
	hold, counted, release := testenv.HoldCheck(id, 2, 30*time.Second)
	env := testenv.New(t, testenv.Options{NoSweep: true, Behave: testenv.Hang, Hooks: &jobs.TestHooks{WaitOutAbove: 1, AfterWaitOutCount: hold}})
	env.Submit(t, id, testenv.Tiffs(3))
	launches := env.AwaitBatchLaunches(t, id, 3)
	post := func(l fakefly.Launch) { failTask(t, env, id, l) }

	post(launches[0]) // two open: its check counts them, and is held there
	select {
	case <-counted:
	case <-time.After(30 * time.Second):
		t.Fatal("no check counted two open tasks")
	}
	post(launches[1]) // the check holds no lock: these end at once
	post(launches[2])
	close(release)

	st := env.AwaitStatus(t, id, func(st status.Status) bool { return st.Status != "TIFF_CONVERSION" })
	require.Equal(t, "DONE", st.Status, "every TIFF failed, so no image phase: done")
	var jobs int
	var snoozes int64
	require.NoError(t, env.Pool.QueryRow(t.Context(), `SELECT count(*), coalesce(max((metadata->>'snoozes')::bigint), 0)
		FROM river_job WHERE kind = 'phase_check' AND args->>'batch_id' = $1`, id).Scan(&jobs, &snoozes))
	require.Equal(t, 1, jobs, "the ends during the check enqueued a check of their own")
	require.GreaterOrEqual(t, snoozes, int64(1))
}

// TestCheckRetriesSoon: a check that waits out a long phase may gather many
// errors; it still runs again within seconds, not after River's default
// backoff of (errors+1)^4 s, during which the phase's end would go unseen.
func TestCheckRetriesSoon(t *testing.T) {
	t.Parallel()
	var w jobs.PhaseCheckWorker
	for _, errs := range []int{0, 1, 5, 24} {
		job := &river.Job[fanin.PhaseCheckArgs]{JobRow: &rivertype.JobRow{Errors: make([]rivertype.AttemptError, errs)}}
		before := time.Now()
		next := w.NextRetry(job)
		require.True(t, next.After(before), "errors %d: retry at once", errs)
		require.LessOrEqual(t, next.Sub(before), 10*time.Second+time.Second/10, "errors %d", errs)
	}
}
