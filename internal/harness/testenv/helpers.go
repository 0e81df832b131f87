package testenv

import (
	"context"
	"encoding/json"
	"fmt"
	"path"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/arke-institute/orchestrator/internal/fakes/fakefly"
	"github.com/arke-institute/orchestrator/status"
)

// The Fly apps of the machine phases, by their defaults.
const (
	TiffApp  = "arke-tiff-worker"
	ImageApp = "arke-image-processor"
)

// Succeed is the fake machines' behaviour that posts the phase's sample
// success for every launch.
func Succeed(l fakefly.Launch) fakefly.Behavior { return fakefly.Succeed(l) }

// WorkerResult is what a well-behaved worker reports for a launch: the
// sample success body of the phase its task belongs to.
func WorkerResult(l fakefly.Launch) json.RawMessage {
	b, err := fakefly.SuccessBody(l)
	if err != nil {
		panic(err)
	}
	return b
}

// IsDone reports whether a batch ended, DONE or ERROR.
func IsDone(st status.Status) bool { return st.Status == "DONE" || st.Status == "ERROR" }

// Tiffs are n small TIFF files of a batch, /t000.tif on.
func Tiffs(n int) []File {
	files := make([]File, n)
	for i := range files {
		files[i] = File{LogicalPath: fmt.Sprintf("/t%03d.tif", i), Size: 10, ContentType: "image/tiff"}
	}
	return files
}

// CountEvents counts a batch's events of a type.
func (e *Env) CountEvents(t *testing.T, batchID, typ string) int {
	t.Helper()
	var n int
	require.NoError(t, e.Pool.QueryRow(context.Background(),
		`SELECT count(*) FROM batch_events WHERE batch_id = $1 AND type = $2`, batchID, typ).Scan(&n))
	return n
}

// TaskOf is the id of the task of a batch's file called fileName.
func (e *Env) TaskOf(t *testing.T, batchID, fileName string) string {
	t.Helper()
	var id string
	require.NoError(t, e.Pool.QueryRow(context.Background(), `SELECT t.id FROM tasks t JOIN files f ON f.id = t.file_id
		WHERE t.batch_id = $1 AND f.file_name = $2`, batchID, fileName).Scan(&id))
	return id
}

// LaunchOf is the launch of the machine that processed the named file.
func (e *Env) LaunchOf(t *testing.T, fileName string) fakefly.Launch {
	t.Helper()
	for _, l := range e.Fly.Launches() {
		if path.Base(l.Env["INPUT_R2_KEY"]) == fileName && l.MachineID != "" {
			return l
		}
	}
	t.Fatalf("no launch for %s", fileName)
	return fakefly.Launch{}
}

// RequireOneMachinePerTask fails the test if a task of the batch got more
// than one machine.
func (e *Env) RequireOneMachinePerTask(t *testing.T, batchID string) {
	t.Helper()
	created := map[string]int{}
	for _, l := range e.Fly.Launches() {
		if l.BatchID == batchID && l.MachineID != "" {
			created[l.TaskID]++
		}
	}
	for task, n := range created {
		require.Equal(t, 1, n, "task %s got %d machines", task, n)
	}
}

// AwaitBatchLaunches waits until n tasks of the batch's first phase are
// processing and their n machines were created, and returns their
// launches.
func (e *Env) AwaitBatchLaunches(t *testing.T, batchID string, n int) []fakefly.Launch {
	t.Helper()
	e.AwaitStatus(t, batchID, func(st status.Status) bool {
		return st.Status == "ERROR" || len(st.Phases) > 0 && st.Phases[0].TasksProcessing == int64(n)
	})
	var out []fakefly.Launch
	e.Fly.Await(t, 30*time.Second, "launches of "+batchID, func() bool {
		out = out[:0]
		for _, l := range e.Fly.Launches() {
			if l.BatchID == batchID && l.MachineID != "" {
				out = append(out, l)
			}
		}
		return len(out) == n
	})
	return out
}
