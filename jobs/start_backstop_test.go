package jobs_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/arke-institute/orchestrator/internal/harness/testenv"
	"github.com/arke-institute/orchestrator/jobs"
)

// TestBackstopStartsAPendingBatchWithoutItsJob: a PENDING batch whose
// batch_start job is gone (discarded, or deleted by hand) is started by
// the sweep's backstop instead of staying PENDING for ever.
func TestBackstopStartsAPendingBatchWithoutItsJob(t *testing.T) {
	t.Parallel()
	// No process works the default queue yet: the start job waits.
	env := testenv.New(t, testenv.Options{Behave: testenv.Succeed, Queues: []string{jobs.BuildQueue}})
	const id = "LOST-START"
	env.Submit(t, id, []testenv.File{{LogicalPath: "/docs/a.csv", Size: 10, ContentType: "text/csv"}})
	tag, err := env.Pool.Exec(context.Background(), `DELETE FROM river_job WHERE kind = 'batch_start' AND args->>'batch_id' = $1`, id)
	require.NoError(t, err)
	require.Equal(t, int64(1), tag.RowsAffected())

	env.StartClient(t, jobs.ClientConfig{})
	st := env.AwaitStatus(t, id, testenv.IsDone)
	require.Equal(t, "DONE", st.Status, "error: %v", st.Error)
}
