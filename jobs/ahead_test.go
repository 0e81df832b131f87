package jobs_test

import (
	"context"
	"fmt"
	"net/http"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/arke-institute/orchestrator/internal/fakes/fakefly"
	"github.com/arke-institute/orchestrator/internal/harness/eventually"
	"github.com/arke-institute/orchestrator/internal/harness/testenv"
	"github.com/arke-institute/orchestrator/jobs"
	"github.com/arke-institute/orchestrator/manifest"
	"github.com/arke-institute/orchestrator/phases"
)

// TestWrittenAheadMatchesWhole writes IMAGE_PROCESSING's next generation
// (the batch's last) ahead while one task of the phase hangs, in stretches
// of 7 files, and compares the outcome with the same batch written whole
// by its transition: the same manifest, generations and lineage. On the way:
//   - nothing is written ahead while an older release's process is heard;
//   - writing ahead stops before a failed task's file (a failed task may
//     yet complete), so it stops there for good, however often it looks;
//   - a reset and a retry keep what was written ahead, and the transition
//     writes only the rest.
//
// Through OCR, the files written ahead may be OCR's work: the transition
// reads the generation back to enter OCR with it.
func TestWrittenAheadMatchesWhole(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name   string
		config manifest.ProcessingConfig
		shown  int // phases in the batch's status
	}{{"ToDone", manifest.ProcessingConfig{}, 2}, {"ThroughOCR", manifest.ProcessingConfig{OCR: true}, 3}} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			files := buildFiles(60)
			for i := range files {
				files[i].Config = c.config
			}
			writtenAhead(t, files, c.shown)
		})
	}
}

// writtenAhead is TestWrittenAheadMatchesWhole with files, whose status
// shows that many phases.
func writtenAhead(t *testing.T, files []testenv.File, shown int) {
	const failing, hanging = "p012.jpg", "p031.jpg" // in /d0, then /d1
	behave := func(hang *atomic.Bool) func(fakefly.Launch) fakefly.Behavior {
		return func(l fakefly.Launch) fakefly.Behavior {
			if phases.OfTask(l.TaskID) == "IMAGE_PROCESSING" {
				switch l.Env["INPUT_FILE_NAME"] {
				case failing:
					return fakefly.Behavior{Body: fmt.Sprintf(`{"task_id":%q,"batch_id":%q,"status":"error","error":"a bad file"}`, l.TaskID, l.BatchID)}
				case hanging:
					if hang != nil && hang.CompareAndSwap(true, false) {
						return fakefly.Behavior{Hang: true}
					}
				}
			}
			return testenv.Succeed(l)
		}
	}
	whole := runBuildBatch(t, testenv.New(t, testenv.Options{Behave: behave(nil), NoSweep: true, Build: jobs.BuildSizes{FirstFiles: -1}}), "WHOLE", files)
	require.Len(t, whole.phases, shown)

	const id = "AHEAD"
	var hang atomic.Bool
	hang.Store(true)
	var checks atomic.Int64 // waited-out checks of IMAGE_PROCESSING, each of which writes ahead after counting
	e := testenv.New(t, testenv.Options{Behave: behave(&hang), NoSweep: true, Build: jobs.BuildSizes{FirstFiles: -1, ChunkFiles: 7},
		Hooks: &jobs.TestHooks{WaitOutAbove: -1, AfterWaitOutCount: func(batchID string, open int64) {
			if batchID == id && open > 0 {
				checks.Add(1)
			}
		}}})
	ctx := context.Background()
	// An older release's orchestrator, heard a moment ago.
	_, err := e.Pool.Exec(ctx, `INSERT INTO listeners (process_id, seen_at) VALUES ('older-release', clock_timestamp())`)
	require.NoError(t, err)
	e.Submit(t, id, files)

	ordinal := func(name string) int32 {
		var o int32
		require.NoError(t, e.Pool.QueryRow(ctx, `SELECT ordinal FROM files WHERE batch_id = $1 AND generation = 1 AND file_name = $2`, id, name).Scan(&o))
		return o
	}
	ahead := func() (lastInput, files int32) {
		lastInput = -1
		err := e.Pool.QueryRow(ctx, `SELECT last_input, files FROM generation_ahead WHERE batch_id = $1`, id).Scan(&lastInput, &files)
		if err != nil {
			require.ErrorContains(t, err, "no rows")
		}
		return lastInput, files
	}
	// settled waits until only the hanging task is open, then for two
	// more checks: the second began after the first had written ahead
	// what it could.
	settled := func() {
		eventually.True(t, 30*time.Second, "only the hanging task to be open", func() bool {
			n, err := openTasks(ctx, e, id, "IMAGE_PROCESSING")
			require.NoError(t, err)
			return n == 1
		})
		seen := checks.Load()
		eventually.True(t, 30*time.Second, "two more checks", func() bool { return checks.Load() >= seen+2 })
	}
	settled()
	last, _ := ahead()
	require.Equal(t, int32(-1), last, "written ahead while an older release is heard")

	_, err = e.Pool.Exec(ctx, `DELETE FROM listeners WHERE process_id = 'older-release'`)
	require.NoError(t, err)
	eventually.True(t, 30*time.Second, "the generation to be written ahead up to the failed task's file", func() bool {
		last, _ := ahead()
		return last == ordinal(failing)-1
	})
	settled()
	last, written := ahead()
	require.Equal(t, ordinal(failing)-1, last, "written ahead past a failed task's file")
	require.Positive(t, written)

	// A reset ends the hanging task; the retry runs it (and the failed
	// one) again, and the phase ends.
	code, body := e.DoAuth(t, http.MethodPost, "/admin/reset/"+id, testenv.AdminToken, nil)
	require.Equal(t, http.StatusOK, code, string(body))
	require.Equal(t, "ERROR", e.AwaitStatus(t, id, testenv.IsDone).Status)
	last, _ = ahead()
	require.Equal(t, ordinal(failing)-1, last, "the reset kept what was written ahead")
	eventually.True(t, 20*time.Second, "the reset's jobs to stop", func() bool {
		code, body := e.DoAuth(t, http.MethodPost, "/admin/retry/"+id, testenv.AdminToken, nil)
		if code == http.StatusOK {
			return true
		}
		require.Equal(t, http.StatusConflict, code, string(body))
		return false
	})
	resumed := runBuildBatch(t, e, id, nil)
	require.Equal(t, whole, resumed)

	var data map[string]any
	require.NoError(t, e.Pool.QueryRow(ctx, `SELECT data FROM batch_events WHERE batch_id = $1 AND type = 'phase.completed' AND phase = 'IMAGE_PROCESSING'`, id).Scan(&data))
	require.Equal(t, float64(written), data["files_written_ahead"])
	require.Equal(t, float64(66), data["files_out"]) // 60 files, and the JPEGs of 6 TIFFs
	n, err := e.Pool.Exec(ctx, `SELECT 1 FROM generation_ahead WHERE batch_id = $1`, id)
	require.NoError(t, err)
	require.Zero(t, n.RowsAffected(), "the transition forgets what it took over")
}

// openTasks is how many tasks of the batch's phase are pending or
// processing, by the counters.
func openTasks(ctx context.Context, env *testenv.Env, id, phase string) (int64, error) {
	var n int64
	err := env.Pool.QueryRow(ctx, `SELECT coalesce(sum(n), 0) FROM task_counts
		WHERE batch_id = $1 AND phase = $2 AND status IN ('pending', 'processing')`, id, phase).Scan(&n)
	return n, err
}
