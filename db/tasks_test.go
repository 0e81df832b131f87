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

// TaskSetMachines does not record a machine launched in an attempt that
// a task has left for pending without a machine: a callback failed the
// task before its launcher recorded the machine, and an admin retry
// requeued it meanwhile (the attempt counts up only at the next claim).
// Recorded, the machine would keep the task from ever being claimed
// again; unrecorded, the launcher destroys it. A task that a retryable
// error of its callback put back gets its machine recorded, to be retired.
func TestTaskSetMachinesSkipsRequeuedTasks(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := dbtest.New(t)
	q := db.New(pool)
	dbtest.SeedProcessingTasks(t, pool, "b1", 3)
	_, err := pool.Exec(ctx, `UPDATE tasks SET machine_id = NULL WHERE batch_id = 'b1';
		UPDATE tasks SET status = 'failed', ended_by = 'callback', failure = 'permanent', finished_at = now() WHERE id = 'tiff_t001';
		UPDATE tasks SET status = 'pending', ended_by = 'retry' WHERE id = 'tiff_t002'`)
	require.NoError(t, err)
	requeued, err := q.TaskRequeueFailed(ctx, db.TaskRequeueFailedParams{BatchID: "b1", Phase: "TIFF_CONVERSION"})
	require.NoError(t, err)
	require.Equal(t, []string{"tiff_t001"}, requeued)

	kept, err := q.TaskSetMachines(ctx, db.TaskSetMachinesParams{
		IDs: []string{"tiff_t000", "tiff_t001", "tiff_t002"}, Attempts: []int32{1, 1, 1}, MachineIDs: []string{"m0", "m1", "m2"},
	})
	require.NoError(t, err)
	var ids []string
	for _, k := range kept {
		ids = append(ids, k.ID)
	}
	require.ElementsMatch(t, []string{"tiff_t000", "tiff_t002"}, ids)
	machines := map[string]string{}
	rows, err := pool.Query(ctx, `SELECT id, coalesce(machine_id, '') FROM tasks WHERE batch_id = 'b1'`)
	require.NoError(t, err)
	for rows.Next() {
		var id, m string
		require.NoError(t, rows.Scan(&id, &m))
		machines[id] = m
	}
	require.NoError(t, rows.Err())
	require.Equal(t, map[string]string{"tiff_t000": "m0", "tiff_t001": "", "tiff_t002": "m2"}, machines)

	// The requeued task is claimed again, in its next attempt.
	claimed, err := q.TaskClaimPending(ctx, db.TaskClaimPendingParams{BatchID: "b1", Phase: "TIFF_CONVERSION", Max: 10, TimeoutSeconds: 60})
	require.NoError(t, err)
	require.Len(t, claimed, 1)
	require.Equal(t, "tiff_t001", claimed[0].ID)
	require.Equal(t, int32(2), claimed[0].Attempt)
}
