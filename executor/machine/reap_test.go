package machine_test

import (
	"context"
	"encoding/json"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/arke-institute/orchestrator/compute"
	"github.com/arke-institute/orchestrator/db"
	"github.com/arke-institute/orchestrator/executor/machine"
	"github.com/arke-institute/orchestrator/internal/fakes/fakefly"
	"github.com/arke-institute/orchestrator/internal/harness/eventually"
	"github.com/arke-institute/orchestrator/internal/harness/metricstest"
	"github.com/arke-institute/orchestrator/internal/harness/testenv"
	"github.com/arke-institute/orchestrator/status"
)

// TestReaperDestroysOrphans: past ORPHAN_GRACE, the reaper destroys the
// machines nothing wants (a task that is gone, an earlier attempt, a
// batch that no longer exists, an ended pool machine in an app only a
// pool uses) and leaves alone a young one, a live task's machine and a
// live pool machine; each destruction is counted and, when its batch
// exists, an event with its reason.
func TestReaperDestroysOrphans(t *testing.T) {
	t.Parallel()
	env := testenv.New(t, testenv.Options{Behave: func(l fakefly.Launch) fakefly.Behavior {
		if isFile(l, "t001.tif") {
			b := fakefly.Succeed(l)
			b.Linger = true // its machine stays, stopped, after its task completed
			return b
		}
		return fakefly.Behavior{Hang: true}
	}})
	ctx := context.Background()
	const id = "REAP-1"
	env.Submit(t, id, testenv.Tiffs(2))
	env.AwaitStatus(t, id, func(st status.Status) bool { return len(st.Phases) > 0 && st.Phases[0].TasksTotal == 2 })
	liveTask, doneTask := env.TaskOf(t, id, "t000.tif"), env.TaskOf(t, id, "t001.tif")
	var attempt int
	var liveMachine string
	eventually.True(t, 30*time.Second, "a task processing on its machine, the other completed", func() bool {
		var recorded *string
		require.NoError(t, env.Pool.QueryRow(ctx, `SELECT machine_id, attempt FROM tasks WHERE id = $1`, liveTask).Scan(&recorded, &attempt))
		status, _, _ := taskState(t, env, doneTask)
		if recorded != nil {
			liveMachine = *recorded
		}
		return recorded != nil && status == "completed"
	})
	done := env.LaunchOf(t, "t001.tif").MachineID

	launch := func(app, taskID, batchID string, attempt int) string {
		t.Helper()
		m, err := env.Deps.Compute.Launch(ctx, compute.MachineSpec{App: app, Image: "img", Name: taskID + "-x", TaskID: taskID, BatchID: batchID, Attempt: attempt})
		require.NoError(t, err)
		return m.ID
	}
	const poolApp = "arke-pool-only"
	var poolID, liveRow, endedRow int64
	require.NoError(t, env.Pool.QueryRow(ctx, `INSERT INTO pools (phase, batch_id, app) VALUES ('TIFF_CONVERSION', $1, $2) RETURNING id`, id, poolApp).Scan(&poolID))
	row := func(ended bool) int64 {
		var rid int64
		require.NoError(t, env.Pool.QueryRow(ctx, `INSERT INTO pool_machines (pool_id, app, token_hash, ended_at)
			VALUES ($1, $2, sha256(convert_to(random()::text, 'UTF8')), CASE WHEN $3 THEN now() END) RETURNING id`, poolID, poolApp, ended).Scan(&rid))
		return rid
	}
	liveRow, endedRow = row(false), row(true)
	var (
		gone       = launch(testenv.TiffApp, "tiff_gone", id, 1)
		earlier    = launch(testenv.TiffApp, liveTask, id, attempt-1)
		noBatch    = launch(testenv.TiffApp, "tiff_nobatch", "NO-SUCH-BATCH", 1)
		young      = launch(testenv.TiffApp, "tiff_young", id, 1)
		livePool   = launch(poolApp, machine.PoolMachineKey(liveRow), id, 1)
		endedPool  = launch(poolApp, machine.PoolMachineKey(endedRow), id, 1)
		otherApp   = launch(testenv.ImageApp, "img_elsewhere", "", 1)
		oldEnough  = []string{done, gone, earlier, noBatch, livePool, endedPool, liveMachine}
		wantGone   = []string{done, gone, earlier, noBatch, endedPool}
		wantRemain = []string{liveMachine, young, livePool}
	)
	_, err := env.Pool.Exec(ctx, `UPDATE pool_machines SET machine_id = $2 WHERE id = $1`, liveRow, livePool)
	require.NoError(t, err)
	for _, m := range oldEnough {
		require.True(t, env.Fly.Backdate(testenv.TiffApp, m, time.Hour) || env.Fly.Backdate(poolApp, m, time.Hour), m)
	}
	// Every phase's app is listed: the image app's orphan goes too.
	require.True(t, env.Fly.Backdate(testenv.ImageApp, otherApp, time.Hour))
	wantGone = append(wantGone, otherApp)

	_, err = env.River.Insert(ctx, machine.ReapArgs{}, nil)
	require.NoError(t, err)
	eventually.True(t, 30*time.Second, "the reaper to run", func() bool {
		var n int
		require.NoError(t, env.Pool.QueryRow(ctx, `SELECT count(*) FROM river_job WHERE kind = 'machine_reap' AND state = 'completed'`).Scan(&n))
		return n == 1
	})

	var remain []string
	for _, app := range []string{testenv.TiffApp, testenv.ImageApp, poolApp} {
		for _, m := range env.Fly.Machines(app) {
			remain = append(remain, m.ID)
		}
	}
	require.ElementsMatch(t, wantRemain, remain)
	require.ElementsMatch(t, wantGone, env.Fly.Destroyed())

	// Events for the machines of batches that exist, with their reasons.
	rows, err := env.Pool.Query(ctx, `SELECT data FROM batch_events WHERE type = $1 ORDER BY id`, db.EventOrphanDestroyed)
	require.NoError(t, err)
	reasons := map[string]string{}
	for rows.Next() {
		var raw []byte
		require.NoError(t, rows.Scan(&raw))
		var d struct {
			MachineID string `json:"machine_id"`
			App       string `json:"app"`
			Reason    string `json:"reason"`
		}
		require.NoError(t, json.Unmarshal(raw, &d))
		require.NotEmpty(t, d.App)
		reasons[d.MachineID] = d.Reason
	}
	require.NoError(t, rows.Err())
	require.Equal(t, map[string]string{
		done:      "its task is completed",
		gone:      "its task is gone",
		earlier:   "its task is in attempt 1, the machine was launched for attempt 0",
		endedPool: "its pool machine ended",
	}, reasons, "no event for a batch that does not exist or a machine of none")

	metricstest.Await(t, env.Metrics.Registry(),
		metricstest.S("orchestrator_orphan_machines_found_total", 4, "app", testenv.TiffApp),
		metricstest.S("orchestrator_orphan_machines_destroyed_total", 4, "app", testenv.TiffApp),
		metricstest.S("orchestrator_orphan_machines_destroyed_total", 1, "app", testenv.ImageApp),
		metricstest.S("orchestrator_orphan_machines_destroyed_total", 1, "app", poolApp))

	// The live task is untouched, still processing on its machine.
	status, _, _ := taskState(t, env, liveTask)
	require.Equal(t, "processing", status)
	require.False(t, slices.Contains(env.Fly.Destroyed(), liveMachine))
}
