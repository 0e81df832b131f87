package db_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/arke-institute/orchestrator/db"
	"github.com/arke-institute/orchestrator/internal/harness/dbtest"
)

// TaskRelease returns a claimed task to pending only in the launch attempt
// its launcher claimed: a task claimed again since (attempt 2) is left to
// its new launcher.
func TestTaskReleaseIsFencedByAttempt(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := dbtest.New(t)
	dbtest.SeedProcessingTasks(t, pool, "b1", 2)
	_, err := pool.Exec(ctx, `UPDATE tasks SET machine_id = NULL, attempt = 2 WHERE batch_id = 'b1'`)
	require.NoError(t, err)

	released, err := db.New(pool).TaskRelease(ctx, db.TaskReleaseParams{
		IDs: []string{"tiff_t000", "tiff_t001"}, Attempts: []int32{2, 1},
	})
	require.NoError(t, err)
	require.Equal(t, []string{"tiff_t000"}, released)
	var status string
	require.NoError(t, pool.QueryRow(ctx, `SELECT status FROM tasks WHERE id = 'tiff_t001'`).Scan(&status))
	require.Equal(t, "processing", status)
}
