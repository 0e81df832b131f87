package jobs_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/arke-institute/orchestrator/internal/fakes/fakefly"
	"github.com/arke-institute/orchestrator/internal/harness/eventually"
	"github.com/arke-institute/orchestrator/internal/harness/testenv"
	"github.com/arke-institute/orchestrator/jobs"
	"github.com/arke-institute/orchestrator/phases"
	"github.com/arke-institute/orchestrator/status"
)

// hang: every machine runs and never calls back.
func hang(fakefly.Launch) fakefly.Behavior { return fakefly.Behavior{Hang: true} }

// submitRunning submits a batch of n TIFFs and waits until all n tasks
// are processing.
func submitRunning(t *testing.T, env *testenv.Env, batchID string, n int) {
	t.Helper()
	env.Submit(t, batchID, testenv.Tiffs(n))
	env.AwaitStatus(t, batchID, func(st status.Status) bool {
		p, ok := testenv.PhaseOf(st, phases.TIFFConversion)
		return ok && p.TasksProcessing == int64(n)
	})
}

// deadlines are the processing tasks' deadlines of a batch, by task.
func deadlines(t *testing.T, env *testenv.Env, batchID string) map[string]time.Time {
	t.Helper()
	rows, err := env.Pool.Query(context.Background(), `SELECT id, deadline FROM tasks WHERE batch_id = $1 AND status = 'processing'`, batchID)
	require.NoError(t, err)
	defer rows.Close()
	out := map[string]time.Time{}
	for rows.Next() {
		var id string
		var d time.Time
		require.NoError(t, rows.Scan(&id, &d))
		out[id] = d
	}
	require.NoError(t, rows.Err())
	return out
}

// TestSilenceMovesDeadlines: a silence of every listener of ShortestSilence or
// more is made up for once, by the first beat after it, whichever process
// beats: the running tasks' deadlines move later by the silence plus the
// allowance. A shorter one moves nothing.
func TestSilenceMovesDeadlines(t *testing.T) {
	t.Parallel()
	env := testenv.New(t, testenv.Options{Behave: hang, NoSweep: true})
	const id = "SILENCE"
	submitRunning(t, env, id, 3)
	ctx := context.Background()
	a := jobs.Listener{Pool: env.Pool, ProcessID: "a", Allowance: 10 * time.Second}
	b := jobs.Listener{Pool: env.Pool, ProcessID: "b", Allowance: 10 * time.Second}
	before := deadlines(t, env, id)
	silence, err := a.Beat(ctx)
	require.NoError(t, err)
	require.Zero(t, silence, "the first beat ever: no silence")
	require.Equal(t, before, deadlines(t, env, id))

	// A short silence is a slow beat.
	_, err = env.Pool.Exec(ctx, `UPDATE listeners SET seen_at = seen_at - interval '3 seconds'`)
	require.NoError(t, err)
	silence, err = b.Beat(ctx)
	require.NoError(t, err)
	require.Zero(t, silence)
	require.Equal(t, before, deadlines(t, env, id))

	// Nobody heard for a minute: two processes beat at once, and the
	// minute is made up for once.
	_, err = env.Pool.Exec(ctx, `UPDATE listeners SET seen_at = seen_at - interval '60 seconds'`)
	require.NoError(t, err)
	var wg sync.WaitGroup
	silences := make([]time.Duration, 2)
	for i, l := range []jobs.Listener{a, b} {
		wg.Go(func() {
			s, err := l.Beat(ctx)
			require.NoError(t, err)
			silences[i] = s
		})
	}
	wg.Wait()
	made := max(silences[0], silences[1])
	require.Zero(t, min(silences[0], silences[1]), "one of the two made up for it: %v", silences)
	require.GreaterOrEqual(t, made, 60*time.Second)
	require.Less(t, made, 70*time.Second)
	after := deadlines(t, env, id)
	require.Len(t, after, 3)
	for task, d := range after {
		require.Equal(t, (made + 10*time.Second).Round(time.Millisecond), d.Sub(before[task]).Round(time.Millisecond), task)
	}
}

// TestSweepMakesUpForASilenceFirst: tasks whose deadline passed while no
// orchestrator could listen are not timed out by the sweep that runs when
// it can again: their deadlines move first.
func TestSweepMakesUpForASilenceFirst(t *testing.T) {
	t.Parallel()
	env := testenv.New(t, testenv.Options{Behave: hang, Listen: true})
	const id = "SILENCE-SWEEP"
	submitRunning(t, env, id, 2)
	ctx := context.Background()
	eventually.True(t, 10*time.Second, "the listener's first beat", func() bool {
		var n int
		require.NoError(t, env.Pool.QueryRow(ctx, `SELECT count(*) FROM listeners`).Scan(&n))
		return n > 0
	})
	// As after a 30 s outage: the deadlines passed meanwhile, and nobody
	// was heard.
	tx, err := env.Pool.Begin(ctx)
	require.NoError(t, err)
	_, err = tx.Exec(ctx, `LOCK TABLE listeners`)
	require.NoError(t, err)
	_, err = tx.Exec(ctx, `UPDATE listeners SET seen_at = clock_timestamp() - interval '30 seconds'`)
	require.NoError(t, err)
	_, err = tx.Exec(ctx, `UPDATE tasks SET deadline = clock_timestamp() - interval '1 second' WHERE batch_id = $1`, id)
	require.NoError(t, err)
	require.NoError(t, tx.Commit(ctx))
	healed := time.Now()

	// Sweeps run (every 200 ms in tests) after the silence is over.
	eventually.True(t, 30*time.Second, "two sweeps after the silence", func() bool {
		var n int
		require.NoError(t, env.Pool.QueryRow(ctx, `SELECT count(*) FROM river_job WHERE kind = 'task_sweep' AND state = 'completed' AND finalized_at > $1`, healed.Add(time.Second)).Scan(&n))
		return n >= 2
	})
	for task, d := range deadlines(t, env, id) {
		require.True(t, d.After(healed.Add(20*time.Second)), "task %s: deadline %s moved by the silence", task, d)
	}
	var timedOut int
	require.NoError(t, env.Pool.QueryRow(ctx, `SELECT count(*) FROM batch_events WHERE batch_id = $1 AND type = 'task.timed_out'`, id).Scan(&timedOut))
	require.Zero(t, timedOut)
}

// TestTimeoutAfterASilenceCostsNoAttempt: a task whose attempt lived
// through a silence of every orchestrator and then timed out is retried
// without counting the attempt (its worker may have given up calling back
// while nobody could listen); the next attempt, heard throughout, counts.
func TestTimeoutAfterASilenceCostsNoAttempt(t *testing.T) {
	t.Parallel()
	env := testenv.New(t, testenv.Options{Behave: hang, Settings: map[string]string{"TASK_MAX_ATTEMPTS": "1"}})
	const id = "SILENCE-EXCUSED"
	submitRunning(t, env, id, 1)
	ctx := context.Background()
	l := jobs.Listener{Pool: env.Pool, ProcessID: "x"}
	_, err := l.Beat(ctx)
	require.NoError(t, err)
	_, err = env.Pool.Exec(ctx, `UPDATE listeners SET seen_at = seen_at - interval '60 seconds'`)
	require.NoError(t, err)
	silence, err := l.Beat(ctx)
	require.NoError(t, err)
	require.Positive(t, silence)

	// It times out all the same: retried on a new machine, no failure counted.
	_, err = env.Pool.Exec(ctx, `UPDATE tasks SET deadline = clock_timestamp() - interval '1 second' WHERE batch_id = $1`, id)
	require.NoError(t, err)
	var attempt int
	eventually.True(t, 30*time.Second, "a second attempt", func() bool {
		require.NoError(t, env.Pool.QueryRow(ctx, `SELECT CASE WHEN status = 'processing' AND machine_id IS NOT NULL THEN attempt ELSE 0 END FROM tasks WHERE batch_id = $1`, id).Scan(&attempt))
		return attempt == 2
	})
	var failures, excused int
	var unheard bool
	require.NoError(t, env.Pool.QueryRow(ctx, `SELECT failures, excused, unheard FROM tasks WHERE batch_id = $1`, id).Scan(&failures, &excused, &unheard))
	require.Equal(t, []int{0, 1}, []int{failures, excused})
	require.False(t, unheard, "the new attempt has been heard throughout")
	var reason string
	require.NoError(t, env.Pool.QueryRow(ctx, `SELECT data->>'reason' FROM batch_events WHERE batch_id = $1 AND type = 'task.retrying'`, id).Scan(&reason))
	require.Contains(t, reason, "not counted as an attempt")

	// The second attempt times out with the orchestrator listening: with
	// TASK_MAX_ATTEMPTS 1, the task fails.
	_, err = env.Pool.Exec(ctx, `UPDATE tasks SET deadline = clock_timestamp() - interval '1 second' WHERE batch_id = $1 AND status = 'processing'`, id)
	require.NoError(t, err)
	eventually.True(t, 30*time.Second, "the task failed", func() bool {
		var st string
		require.NoError(t, env.Pool.QueryRow(ctx, `SELECT status FROM tasks WHERE batch_id = $1`, id).Scan(&st))
		return st == "failed"
	})
}
