package db_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/arke-institute/orchestrator/db"
	"github.com/arke-institute/orchestrator/internal/harness/dbtest"
)

// TestMachineFleetUsage: what the fleet runs (a machine per task's
// processing tasks and the live pool machines, not the pool's leased
// tasks) and its machine-seconds within the last hour.
func TestMachineFleetUsage(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := dbtest.New(t)
	dbtest.SeedProcessingTasks(t, pool, "b1", 6)
	var poolID int64
	require.NoError(t, pool.QueryRow(ctx, `INSERT INTO pools (phase, app) VALUES ('TIFF_CONVERSION', 'a') RETURNING id`).Scan(&poolID))
	_, err := pool.Exec(ctx, `
		-- running for 10 minutes
		UPDATE tasks SET launched_at = now() - interval '10 minutes' WHERE id = 'tiff_t000';
		-- ran 30 s, ended 20 minutes ago by its callback
		UPDATE tasks SET status = 'completed', ended_by = 'callback', launched_at = now() - interval '20 minutes 30 seconds',
			finished_at = now() - interval '20 minutes' WHERE id = 'tiff_t001';
		-- ran 2 hours, of which 1 hour in the window, ended just now by its timeout
		UPDATE tasks SET status = 'failed', ended_by = 'timeout', launched_at = now() - interval '2 hours', finished_at = now() WHERE id = 'tiff_t002';
		-- ended before the hour
		UPDATE tasks SET status = 'completed', ended_by = 'callback', launched_at = now() - interval '3 hours',
			finished_at = now() - interval '2 hours' WHERE id = 'tiff_t003';
		-- never launched
		UPDATE tasks SET status = 'pending', machine_id = NULL, launched_at = NULL WHERE id = 'tiff_t004';
		-- leased by a pool machine: the pool machine counts, not the task
		UPDATE tasks SET pool_machine_id = 1, launched_at = now() - interval '5 minutes' WHERE id = 'tiff_t005';`)
	require.NoError(t, err)
	_, err = pool.Exec(ctx, `INSERT INTO pool_machines (pool_id, app, token_hash, created_at, ended_at) VALUES
		($1, 'a', sha256('1'), now() - interval '5 minutes', NULL),
		($1, 'a', sha256('2'), now() - interval '15 minutes', now() - interval '10 minutes'),
		($1, 'a', sha256('3'), now() - interval '4 hours', now() - interval '3 hours')`, poolID)
	require.NoError(t, err)

	u, err := db.New(pool).MachineFleetUsage(ctx)
	require.NoError(t, err)
	require.EqualValues(t, 2, u.Running, "tiff_t000 and the live pool machine")
	want := 600.0 + 30 + 3600 + 300 + 300
	require.InDelta(t, want, u.Seconds, 5)
}
