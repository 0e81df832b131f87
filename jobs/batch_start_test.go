package jobs_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/arke-institute/orchestrator/internal/harness/testenv"
	"github.com/arke-institute/orchestrator/jobs"
)

// TestStartInParts starts batches whose generation 0 is written 7 files
// at a time (the first phase's executor given the first part by Enter and
// the others by Extend) and compares each with the same batch started
// whole: the same generations, tasks and manifest, and a phase.started
// that counts every task. The first part holds no TIFF, so its Enter has
// no work to write. A batch no phase has work in is started whole.
func TestStartInParts(t *testing.T) {
	t.Parallel()
	files := make([]testenv.File, 0, 50)
	for i := range 10 {
		files = append(files, testenv.File{LogicalPath: fmt.Sprintf("/a/t%02d.csv", i), Size: 1, ContentType: "text/csv"})
	}
	files = append(files, buildFiles(40)...) // 4 TIFFs, 4 CSVs, 32 JPEGs
	for _, tt := range []struct {
		name     string
		settings map[string]string
	}{
		{"Machines", nil},
		{"Pools", testenv.PoolSettings(2, nil)},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			run := func(chunk int, id string) (buildOutcome, map[string]any) {
				e := testenv.New(t, testenv.Options{Behave: testenv.Succeed, NoSweep: true, Settings: tt.settings,
					Build: jobs.BuildSizes{FirstFiles: -1, ChunkFiles: chunk}})
				out := runBuildBatch(t, e, id, files)
				for i := range out.phases {
					out.phases[i].Detail = nil // a pool's: its id, and seconds its machines took
				}
				var started map[string]any
				require.NoError(t, e.Pool.QueryRow(context.Background(), `SELECT data FROM batch_events
					WHERE batch_id = $1 AND type = 'phase.started' AND phase = 'TIFF_CONVERSION'`, id).Scan(&started))
				delete(started, "pool") // each Env's pool has an id of its own
				return out, started
			}
			whole, wholeStarted := run(0, "B")
			parts, partsStarted := run(7, "B")
			require.Equal(t, whole, parts)
			require.Equal(t, map[string]any{"generation": float64(0), "tasks": float64(4)}, partsStarted)
			require.Equal(t, wholeStarted, partsStarted)
		})
	}
	t.Run("NoWork", func(t *testing.T) {
		t.Parallel()
		e := testenv.New(t, testenv.Options{Behave: testenv.Succeed, NoSweep: true, Build: jobs.BuildSizes{FirstFiles: -1, ChunkFiles: 7}})
		out := runBuildBatch(t, e, "B", files[:10])
		want := make([]string, 10)
		for i := range want {
			want[i] = fmt.Sprintf("0:%d:/a/t%02d.csv<-", i, i)
		}
		require.Equal(t, want, out.gens)
	})
}
