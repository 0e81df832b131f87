package db_test

import (
	"context"
	"log/slog"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/arke-institute/orchestrator/db"
	"github.com/arke-institute/orchestrator/internal/harness/dbtest"
)

func TestMigrateConcurrentlyFromEmpty(t *testing.T) {
	t.Parallel()
	pool, _ := dbtest.NewEmpty(t)
	ctx := context.Background()
	logger := slog.New(slog.DiscardHandler)

	// Several processes starting at once all migrate; the lock makes that safe.
	var wg sync.WaitGroup
	errs := make([]error, 4)
	for i := range errs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = db.Migrate(ctx, pool, logger)
		}()
	}
	wg.Wait()
	for _, err := range errs {
		require.NoError(t, err)
	}

	var tables []string
	rows, err := pool.Query(ctx, `SELECT tablename FROM pg_tables WHERE schemaname = 'public'
		AND tablename IN ('batches', 'files', 'tasks', 'chunks', 'batch_events', 'river_job') ORDER BY tablename`)
	require.NoError(t, err)
	for rows.Next() {
		var n string
		require.NoError(t, rows.Scan(&n))
		tables = append(tables, n)
	}
	require.Equal(t, []string{"batch_events", "batches", "chunks", "files", "river_job", "tasks"}, tables)

	// Running again is a no-op.
	require.NoError(t, db.Migrate(ctx, pool, logger))
}

// The launcher's claim reads pending tasks in creation order straight from
// an index and stops after the first few hundred; it must never sort every
// pending task of the phase (what it did when an index on (batch, phase,
// status) without the order was there to choose).
func TestClaimReadsPendingTasksInIndexOrder(t *testing.T) {
	t.Parallel()
	pool := dbtest.New(t)
	ctx := context.Background()
	conn, err := pool.Acquire(ctx)
	require.NoError(t, err)
	defer conn.Release()
	// The table is empty, so the planner would rightly scan it; forbid that to
	// see which index the query is served by.
	_, err = conn.Exec(ctx, `SET enable_seqscan = off`)
	require.NoError(t, err)
	rows, err := conn.Query(ctx, `EXPLAIN SELECT id FROM tasks
		WHERE batch_id = 'b' AND phase = 'TIFF_CONVERSION' AND status = 'pending'
		ORDER BY created_at, id LIMIT 256 FOR UPDATE SKIP LOCKED`)
	require.NoError(t, err)
	var plan strings.Builder
	for rows.Next() {
		var line string
		require.NoError(t, rows.Scan(&line))
		plan.WriteString(line + "\n")
	}
	require.NoError(t, rows.Err())
	require.Contains(t, plan.String(), "Index Scan using tasks_batch_phase_status_created_idx")
	require.NotContains(t, plan.String(), "Sort")
}
