package jobs_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/arke-institute/orchestrator/internal/harness/eventually"
	"github.com/arke-institute/orchestrator/internal/harness/testenv"
	"github.com/arke-institute/orchestrator/jobs"
	"github.com/arke-institute/orchestrator/status"
)

// buildFiles is a batch of n files: one in ten a TIFF, one in ten a CSV
// (no task), the rest JPEGs, over three directories.
func buildFiles(n int) []testenv.File {
	files := make([]testenv.File, 0, n)
	for i := range n {
		f := testenv.File{LogicalPath: fmt.Sprintf("/d%d/p%03d.jpg", i%3, i), Size: int64(100 + i), ContentType: "image/jpeg"}
		switch i % 10 {
		case 0:
			f = testenv.File{LogicalPath: fmt.Sprintf("/d%d/s%03d.tif", i%3, i), Size: int64(100 + i), ContentType: "image/tiff"}
		case 5:
			f = testenv.File{LogicalPath: fmt.Sprintf("/d%d/t%03d.csv", i%3, i), Size: int64(100 + i), ContentType: "text/csv"}
		}
		files = append(files, f)
	}
	return files
}

// buildOutcome is what a batch came to, with its id taken out of keys so
// that two batches can be compared.
type buildOutcome struct {
	phases   []status.PhaseProgress
	manifest string
	gens     []string // per generation: ordinal:logical_path<-parent's logical_path
}

// runBuildBatch submits the files (unless nil: the batch is already
// running) and returns the batch's outcome once it is DONE.
func runBuildBatch(t *testing.T, env *testenv.Env, id string, files []testenv.File) buildOutcome {
	t.Helper()
	if files != nil {
		env.Submit(t, id, files)
	}
	st := env.AwaitStatus(t, id, testenv.IsDone)
	require.Equal(t, "DONE", st.Status, "error: %v", st.Error)
	var out buildOutcome
	out.phases = st.Phases
	var delivered jobs.ProcessedManifest
	require.NoError(t, json.Unmarshal(env.AwaitIngest(t, 1)[0].Body, &delivered))
	m, err := json.Marshal(delivered.Manifest)
	require.NoError(t, err)
	out.manifest = strings.ReplaceAll(string(m), id, "ID")
	rows, err := env.Pool.Query(context.Background(), `SELECT f.generation || ':' || f.ordinal || ':' || f.logical_path || '<-' || coalesce(p.logical_path, '')
		FROM files f LEFT JOIN files p ON p.id = f.parent_id WHERE f.batch_id = $1 ORDER BY f.generation, f.ordinal`, id)
	require.NoError(t, err)
	for rows.Next() {
		var s string
		require.NoError(t, rows.Scan(&s))
		out.gens = append(out.gens, s)
	}
	require.NoError(t, rows.Err())
	return out
}

// openWork is how many tasks of the batch's phase are pending or
// processing (by the counters), plus its fan-in checks not yet finished.
func openWork(ctx context.Context, env *testenv.Env, id, phase string) (int64, error) {
	tasks, err := openTasks(ctx, env, id, phase)
	if err != nil {
		return 0, err
	}
	var checks int64
	err = env.Pool.QueryRow(ctx, `SELECT count(*) FROM river_job WHERE kind = 'phase_check' AND args->>'batch_id' = $1
		AND args->>'phase' = $2 AND state NOT IN ('completed', 'cancelled', 'discarded')`, id, phase).Scan(&checks)
	return tasks + checks, err
}

// TestChunkedGenerationMatchesWhole writes the TIFF_CONVERSION ->
// IMAGE_PROCESSING generation of a batch in chunks of 7 files after a
// first stretch of 5 rows, and compares the outcome with the same batch
// written in one transaction: the same manifest, generations, lineage and
// tasks, and one machine per task. The build is made as hard as it gets:
//   - its third write fails once, as a crash would, so the retry resumes
//     from the last chunk committed;
//   - its last write waits until every task written before it has ended,
//     and every fan-in check they queued has run, and writes no task
//     itself, so the phase ends only if the last write wakes the fan-in up; and the launcher, finding nothing pending while
//     the generation is unfinished, must keep coming back.
//
// The sweep is off: its backstop would hide a lost wake-up.
func TestChunkedGenerationMatchesWhole(t *testing.T) {
	t.Parallel()
	// Eight CSVs at the end: the last write (fewer than 7 files) has no
	// task to write, so only its own wake-up can end the phase.
	files := buildFiles(60)
	for i := range 8 {
		files = append(files, testenv.File{LogicalPath: fmt.Sprintf("/z/end%d.csv", i), Size: 1, ContentType: "text/csv"})
	}
	whole := runBuildBatch(t, testenv.New(t, testenv.Options{Behave: testenv.Succeed, NoSweep: true, Build: jobs.BuildSizes{FirstFiles: -1}}), "WHOLE", files)

	const id = "CHUNKED"
	var (
		env    atomic.Pointer[testenv.Env]
		writes atomic.Int32
		waited atomic.Int64 // tasks open when the last write was reached
	)
	beforeWrite := func(ctx context.Context, _ string, last bool) error {
		if writes.Add(1) == 3 {
			return errors.New("crash before the third write")
		}
		if !last {
			return nil
		}
		for {
			n, err := openWork(ctx, env.Load(), id, "IMAGE_PROCESSING")
			if err != nil || n == 0 {
				return err
			}
			waited.Store(n)
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-time.After(10 * time.Millisecond):
			}
		}
	}
	e := testenv.New(t, testenv.Options{Behave: testenv.Succeed, NoSweep: true, Build: jobs.BuildSizes{FirstFiles: 5, ChunkFiles: 7},
		Hooks: &jobs.TestHooks{BeforeBuildWrite: beforeWrite}})
	env.Store(e)
	chunked := runBuildBatch(t, e, id, files)

	require.Equal(t, whole, chunked)
	e.RequireOneMachinePerTask(t, id)
	require.Positive(t, waited.Load(), "the last write never waited for a task")

	ctx := context.Background()
	// One build job, which failed once; River records its completion a
	// moment after it returns.
	var builds, attempts int
	var state string
	eventually.True(t, 10*time.Second, "River to record the build job's end", func() bool {
		require.NoError(t, e.Pool.QueryRow(ctx, `SELECT count(*), coalesce(max(attempt), 0), coalesce(max(state::text), '') FROM river_job
			WHERE kind = 'phase_build' AND args->>'batch_id' = $1`, id).Scan(&builds, &attempts, &state))
		return state != "running"
	})
	require.Equal(t, 1, builds)
	require.Equal(t, "completed", state)
	require.Equal(t, 2, attempts, "the failed write is retried")
	var built map[string]any
	require.NoError(t, e.Pool.QueryRow(ctx, `SELECT data FROM batch_events WHERE batch_id = $1 AND type = 'generation.built'`, id).Scan(&built))
	require.Equal(t, map[string]any{"from": "TIFF_CONVERSION", "generation": float64(1), "files_in": float64(68),
		"files_out": float64(74), "tasks": float64(54)}, built)
	var building *string
	require.NoError(t, e.Pool.QueryRow(ctx, `SELECT build_from FROM batches WHERE id = $1`, id).Scan(&building))
	require.Nil(t, building)
}

// TestResetDuringBuildThenRetry resets a batch while its generation is
// being written, once every task written so far has completed: the build
// stops where it was, and a retry (with no failed task to requeue) resumes
// it, and launches what it writes, to the same outcome as a batch that was
// never interrupted.
func TestResetDuringBuildThenRetry(t *testing.T) {
	t.Parallel()
	files := buildFiles(40)
	whole := runBuildBatch(t, testenv.New(t, testenv.Options{Behave: testenv.Succeed, NoSweep: true, Build: jobs.BuildSizes{FirstFiles: -1}}), "UNTOUCHED", files)

	const id = "RESET-BUILD"
	var (
		env    atomic.Pointer[testenv.Env]
		resets atomic.Int32
	)
	beforeWrite := func(ctx context.Context, _ string, _ bool) error {
		if resets.Add(1) != 2 {
			return nil
		}
		for {
			n, err := openWork(ctx, env.Load(), id, "IMAGE_PROCESSING")
			if err != nil {
				return err
			}
			if n == 0 {
				break
			}
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-time.After(10 * time.Millisecond):
			}
		}
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, env.Load().Server.URL+"/admin/reset/"+id, nil)
		if err != nil {
			return err
		}
		req.Header.Set("Authorization", "Bearer "+testenv.AdminToken)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return err
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("reset: %s", resp.Status)
		}
		return nil
	}
	e := testenv.New(t, testenv.Options{Behave: testenv.Succeed, NoSweep: true, Build: jobs.BuildSizes{FirstFiles: 5, ChunkFiles: 7},
		Hooks: &jobs.TestHooks{BeforeBuildWrite: beforeWrite}})
	env.Store(e)
	e.Submit(t, id, files)
	st := e.AwaitStatus(t, id, testenv.IsDone)
	require.Equal(t, "ERROR", st.Status)
	var cursor *int32
	require.NoError(t, e.Pool.QueryRow(context.Background(), `SELECT build_cursor FROM batches WHERE id = $1`, id).Scan(&cursor))
	require.NotNil(t, cursor, "the reset kept where the build got to")

	// The reset's jobs may still be stopping: the retry says so (409) until
	// they have.
	eventually.True(t, 20*time.Second, "the reset's jobs to stop", func() bool {
		code, body := e.DoAuth(t, http.MethodPost, "/admin/retry/"+id, testenv.AdminToken, nil)
		if code == http.StatusOK {
			return true
		}
		require.Equal(t, http.StatusConflict, code, string(body))
		require.Contains(t, string(body), "still stopping")
		return false
	})
	resumed := runBuildBatch(t, e, id, nil)
	// Tasks the reset ended were retried: the counts of the phases match,
	// and so does everything written.
	require.Equal(t, whole, resumed)
}

// TestFailingBuildFailsItsBatch: a build that fails its last attempt fails
// its batch, with the reason, and ends the tasks already written, rather
// than leave the phase waiting for ever.
func TestFailingBuildFailsItsBatch(t *testing.T) {
	t.Parallel()
	const id = "BUILD-FAILS"
	fail := func(context.Context, string, bool) error { return errors.New("disk on fire") }
	e := testenv.New(t, testenv.Options{Behave: testenv.Succeed, NoSweep: true, Build: jobs.BuildSizes{FirstFiles: 5, ChunkFiles: 7, MaxAttempts: 2},
		Hooks: &jobs.TestHooks{BeforeBuildWrite: fail}})
	e.Submit(t, id, buildFiles(40))
	st := e.AwaitStatus(t, id, testenv.IsDone)
	require.Equal(t, "ERROR", st.Status)
	require.NotNil(t, st.Error)
	require.Contains(t, *st.Error, "Failed after 2 attempts: writing generation 1 of IMAGE_PROCESSING: disk on fire")
	for _, p := range st.Phases {
		require.Zero(t, p.TasksPending+p.TasksProcessing, "phase %s has open tasks", p.Phase)
	}
}
