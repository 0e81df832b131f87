package machine_test

import (
	"bytes"
	"context"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/arke-institute/orchestrator/db"
	"github.com/arke-institute/orchestrator/internal/fakes/fakefly"
	"github.com/arke-institute/orchestrator/internal/harness/eventually"
	"github.com/arke-institute/orchestrator/internal/harness/metricstest"
	"github.com/arke-institute/orchestrator/internal/harness/testenv"
	"github.com/arke-institute/orchestrator/phases"
	"github.com/arke-institute/orchestrator/status"
)

func hangAll(fakefly.Launch) fakefly.Behavior { return fakefly.Behavior{Hang: true} }

// batchStatus is the batch's status as its row has it.
func batchStatus(t *testing.T, env *testenv.Env, id string) string {
	t.Helper()
	var s string
	require.NoError(t, env.Pool.QueryRow(context.Background(), `SELECT status FROM batches WHERE id = $1`, id).Scan(&s))
	return s
}

// finishMachine plays a worker that ends: its machine goes, then its
// success callback arrives (so the fake never has more machines alive
// than the orchestrator counts running).
func finishMachine(t *testing.T, env *testenv.Env, l fakefly.Launch) {
	t.Helper()
	ctx := context.Background()
	require.NoError(t, env.Deps.Compute.Destroy(ctx, l.App, l.MachineID))
	body, err := fakefly.SuccessBody(l)
	require.NoError(t, err)
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, l.Env["CALLBACK_URL"], bytes.NewReader(body))
	require.NoError(t, err)
	req.Header.Set("Authorization", "Bearer "+l.Env["CALLBACK_TOKEN"])
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	require.NoError(t, resp.Body.Close())
	require.Equal(t, http.StatusOK, resp.StatusCode, "callback of %s", l.TaskID)
}

// TestMaxMachinesBoundsLaunches: with MAX_MACHINES=2, a batch of 3 TIFFs
// (then their 3 JPEGs) never has more than 2 machines alive: the third
// task waits, visibly (an event once per phase, the status's detail, the
// gauge), costs no attempt, and is launched as machines end; the batch
// completes.
func TestMaxMachinesBoundsLaunches(t *testing.T) {
	t.Parallel()
	env := testenv.New(t, testenv.Options{Behave: hangAll, Settings: map[string]string{"MAX_MACHINES": "2"}})
	const id = "BOUND-MACHINES"
	env.Submit(t, id, testenv.Tiffs(3))

	eventually.True(t, 30*time.Second, "the TIFF phase's launches to be held back", func() bool {
		return env.CountEvents(t, id, db.EventLaunchBounded) == 1
	})
	require.Equal(t, 2, env.Fly.Counts().Created, "two machines, the third task held back")
	st := env.AwaitStatus(t, id, func(st status.Status) bool {
		p, ok := testenv.PhaseOf(st, phases.TIFFConversion)
		_, held := p.Detail["launch_bounded_max_machines"]
		return ok && held
	})
	tiff, _ := testenv.PhaseOf(st, phases.TIFFConversion)
	require.EqualValues(t, 1, tiff.TasksPending)
	require.EqualValues(t, 2, tiff.TasksProcessing)
	metricstest.Await(t, env.Metrics.Registry(), metricstest.S("orchestrator_launch_bound_reached", 1, "bound", "max_machines"))

	handled := map[string]bool{}
	ended := func() bool { s := batchStatus(t, env, id); return s == "DONE" || s == "ERROR" }
	for !ended() {
		var todo []fakefly.Launch
		eventually.True(t, 30*time.Second, "a machine to finish, or the batch's end", func() bool {
			todo = todo[:0]
			for _, l := range env.Fly.Launches() {
				if l.MachineID != "" && !handled[l.MachineID] {
					todo = append(todo, l)
				}
			}
			return len(todo) > 0 || ended()
		})
		for _, l := range todo {
			handled[l.MachineID] = true
			finishMachine(t, env, l)
		}
	}

	st = env.AwaitStatus(t, id, testenv.IsDone)
	require.Equal(t, "DONE", st.Status, "error: %v", st.Error)
	c := env.Fly.Counts()
	require.Equal(t, 6, c.Created, "a machine per task")
	require.Equal(t, 2, c.MaxLive, "never more than MAX_MACHINES alive")
	var events int
	require.NoError(t, env.Pool.QueryRow(context.Background(), `SELECT count(DISTINCT phase) FROM batch_events WHERE batch_id = $1 AND type = $2`,
		id, db.EventLaunchBounded).Scan(&events))
	require.Equal(t, 2, events, "one event per phase held back")
	require.Equal(t, 2, env.CountEvents(t, id, db.EventLaunchBounded))
	var attempts, failures int
	require.NoError(t, env.Pool.QueryRow(context.Background(), `SELECT max(attempt), sum(failures) FROM tasks WHERE batch_id = $1`, id).Scan(&attempts, &failures))
	require.Equal(t, 1, attempts, "waiting costs no attempt")
	require.Zero(t, failures)
	metricstest.Await(t, env.Metrics.Registry(), metricstest.S("orchestrator_launch_bound_reached", 0, "bound", "max_machines"))
}

// TestMachineSecondsBoundPausesLaunches: with more machine-seconds spent
// over the last hour than MAX_MACHINE_SECONDS_PER_HOUR, a batch's tasks
// wait (nothing launched, nothing failed), visibly; once the spend falls
// out of the hour, they are launched and the batch completes.
func TestMachineSecondsBoundPausesLaunches(t *testing.T) {
	t.Parallel()
	env := testenv.New(t, testenv.Options{Behave: testenv.Succeed, Settings: map[string]string{"MAX_MACHINE_SECONDS_PER_HOUR": "1000"}})
	ctx := context.Background()
	// A pool machine that ran 20 minutes, ending 10 minutes ago.
	var pool, spent int64
	require.NoError(t, env.Pool.QueryRow(ctx, `INSERT INTO pools (phase, app, closed_at) VALUES ('TIFF_CONVERSION', 'old-app', now()) RETURNING id`).Scan(&pool))
	require.NoError(t, env.Pool.QueryRow(ctx, `INSERT INTO pool_machines (pool_id, app, token_hash, created_at, ended_at)
		VALUES ($1, 'old-app', sha256('x'), now() - interval '30 minutes', now() - interval '10 minutes') RETURNING id`, pool).Scan(&spent))

	const id = "BOUND-SECONDS"
	env.Submit(t, id, testenv.Tiffs(2))
	eventually.True(t, 30*time.Second, "the launches to be held back", func() bool {
		return env.CountEvents(t, id, db.EventLaunchBounded) == 1
	})
	require.Empty(t, env.Fly.Launches(), "nothing launched past the bound")
	var data string
	require.NoError(t, env.Pool.QueryRow(ctx, `SELECT data->>'bound' FROM batch_events WHERE batch_id = $1 AND type = $2`, id, db.EventLaunchBounded).Scan(&data))
	require.Equal(t, "machine_seconds_per_hour", data)
	st := env.AwaitStatus(t, id, func(st status.Status) bool {
		p, _ := testenv.PhaseOf(st, phases.TIFFConversion)
		_, held := p.Detail["launch_bounded_machine_seconds_per_hour"]
		return held
	})
	tiff, _ := testenv.PhaseOf(st, phases.TIFFConversion)
	require.EqualValues(t, 2, tiff.TasksPending)
	require.Equal(t, string(phases.TIFFConversion), st.Status, "the batch waits, not failed")
	metricstest.Await(t, env.Metrics.Registry(), metricstest.S("orchestrator_launch_bound_reached", 1, "bound", "machine_seconds_per_hour"))

	// The spend leaves the hour: launches resume.
	_, err := env.Pool.Exec(ctx, `UPDATE pool_machines SET created_at = now() - interval '3 hours', ended_at = now() - interval '2 hours' WHERE id = $1`, spent)
	require.NoError(t, err)
	st = env.AwaitStatus(t, id, testenv.IsDone)
	require.Equal(t, "DONE", st.Status, "error: %v", st.Error)
	tiff, _ = testenv.PhaseOf(st, phases.TIFFConversion)
	require.Empty(t, tiff.Detail)
	require.Equal(t, 1, env.CountEvents(t, id, db.EventLaunchBounded), "the image phase was not held back")
}
