package db_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/arke-institute/orchestrator/db"
	"github.com/arke-institute/orchestrator/internal/harness/dbtest"
)

// TestClaimDeadlineScalesWithSize: a task's deadline is its phase's
// timeout plus the per-GB part for its input's size (10^9 bytes).
func TestClaimDeadlineScalesWithSize(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := dbtest.New(t)
	dbtest.SeedProcessingTasks(t, pool, "b1", 3)
	_, err := pool.Exec(ctx, `UPDATE tasks SET status = 'pending', machine_id = NULL, token_hash = NULL, deadline = NULL WHERE batch_id = 'b1';
		UPDATE files SET file_size = CASE ordinal WHEN 0 THEN 0 WHEN 1 THEN 1000000000 ELSE 5000000000 END WHERE batch_id = 'b1'`)
	require.NoError(t, err)

	rows, err := db.New(pool).TaskClaimPending(ctx, db.TaskClaimPendingParams{
		BatchID: "b1", Phase: "TIFF_CONVERSION", Max: 10, TimeoutSeconds: 60, SecondsPerGb: 120,
	})
	require.NoError(t, err)
	require.Len(t, rows, 3)
	timeouts := map[string]time.Duration{}
	for _, r := range rows {
		var launched time.Time
		require.NoError(t, pool.QueryRow(ctx, `SELECT launched_at FROM tasks WHERE id = $1`, r.ID).Scan(&launched))
		require.NotNil(t, r.Deadline)
		timeouts[r.ID] = r.Deadline.Sub(launched).Round(time.Second)
	}
	require.Equal(t, map[string]time.Duration{
		"tiff_t000": time.Minute,                   // an empty file: the base
		"tiff_t001": time.Minute + 2*time.Minute,   // 1 GB
		"tiff_t002": time.Minute + 5*2*time.Minute, // 5 GB, the largest file allowed
	}, timeouts)
}

// TestExpiredTaskRetriedUntilLastAttempt: a task past its deadline with
// attempts left goes back to pending to be retried, keeping its machine
// (to be retired) and its token (its late success still counts); it is
// not claimed until its machine is released. In its last attempt it fails.
func TestExpiredTaskRetriedUntilLastAttempt(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := dbtest.New(t)
	q := db.New(pool)
	dbtest.SeedProcessingTasks(t, pool, "b1", 2)
	_, err := pool.Exec(ctx, `UPDATE tasks SET deadline = now() - interval '1 second' WHERE batch_id = 'b1';
		UPDATE tasks SET failures = 2 WHERE id = 'tiff_t001'`)
	require.NoError(t, err)

	rows, err := q.TaskFailExpired(ctx, db.TaskFailExpiredParams{BatchID: "b1", Phase: "TIFF_CONVERSION", MaxAttempts: 3, RetireSeconds: 60})
	require.NoError(t, err)
	require.Len(t, rows, 2)
	retry := map[string]bool{}
	for _, r := range rows {
		retry[r.ID] = r.Retry
		require.Contains(t, *r.Error, "Task timed out after")
	}
	require.Equal(t, map[string]bool{"tiff_t000": true, "tiff_t001": false}, retry)

	state := func(id string) (status, endedBy string, failures int, machine, token bool) {
		require.NoError(t, pool.QueryRow(ctx, `SELECT status, coalesce(ended_by, ''), failures, machine_id IS NOT NULL, token_hash IS NOT NULL FROM tasks WHERE id = $1`, id).
			Scan(&status, &endedBy, &failures, &machine, &token))
		return
	}
	status, endedBy, failures, machine, token := state("tiff_t000")
	require.Equal(t, []any{"pending", "retry", 1, true, true}, []any{status, endedBy, failures, machine, token})
	status, endedBy, failures, _, _ = state("tiff_t001")
	require.Equal(t, []any{"failed", "timeout", 3}, []any{status, endedBy, failures})

	// Its machine still recorded, the task is not claimed.
	claim := db.TaskClaimPendingParams{BatchID: "b1", Phase: "TIFF_CONVERSION", Max: 10, TimeoutSeconds: 60}
	claimed, err := q.TaskClaimPending(ctx, claim)
	require.NoError(t, err)
	require.Empty(t, claimed)
	retiring, err := q.TaskListRetiring(ctx, db.TaskListRetiringParams{BatchID: "b1", Phase: "TIFF_CONVERSION", Max: 10})
	require.NoError(t, err)
	require.Equal(t, []db.TaskListRetiringRow{{ID: "tiff_t000", Attempt: 1, MachineID: "m0", Overdue: false}}, retiring)

	// Once the machine is gone, it is claimed again: attempt 2, a new
	// token, the old one superseded.
	released, err := q.TaskReleaseRetired(ctx, db.TaskReleaseRetiredParams{IDs: []string{"tiff_t000"}, Attempts: []int32{1}})
	require.NoError(t, err)
	require.Equal(t, []string{"tiff_t000"}, released)
	claimed, err = q.TaskClaimPending(ctx, claim)
	require.NoError(t, err)
	require.Len(t, claimed, 1)
	require.Equal(t, int32(2), claimed[0].Attempt)
	require.Equal(t, int32(1), claimed[0].Failures)
	var superseded int
	require.NoError(t, pool.QueryRow(ctx, `SELECT cardinality(superseded_token_hashes) FROM tasks WHERE id = 'tiff_t000'
		AND superseded_token_hashes[1] = sha256(convert_to('tok-tiff_t000', 'UTF8'))`).Scan(&superseded))
	require.Equal(t, 1, superseded)
}
