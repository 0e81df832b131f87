package db_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/arke-institute/orchestrator/db"
	"github.com/arke-institute/orchestrator/internal/harness/dbtest"
	"github.com/arke-institute/orchestrator/provider"
	"github.com/arke-institute/orchestrator/tasktoken"
)

const guest = "shared-cpu-2x-1024mb"

// usageOf is batch's usage rows.
func usageOf(t *testing.T, q *db.Queries, batch string) []db.UsageListByBatchRow {
	t.Helper()
	rows, err := q.UsageListByBatch(context.Background(), batch)
	require.NoError(t, err)
	return rows
}

// TestUsageChargesEveryAttempt: every attempt that ends with a machine is
// charged from its launch to its end, a retried one too (launched_at is
// reset by the next launch), whatever statement ends it; a launch that
// made no machine, and a late success of an attempt already charged, are
// not.
func TestUsageChargesEveryAttempt(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := dbtest.New(t)
	exec := dbtest.Exec(t, pool)
	q := db.New(pool)
	dbtest.SeedProcessingTasks(t, pool, "b1", 4)
	exec(`UPDATE tasks SET guest = $1, launched_at = '2026-01-01 00:00:00+00', updated_at = '2026-01-01 00:00:00+00'`, guest)
	exec(`UPDATE tasks SET machine_id = NULL WHERE id = 'tiff_t003'`)
	require.Empty(t, usageOf(t, q, "b1"), "running attempts are not charged yet")

	// t000: its first attempt times out after 30 s and is retried; its
	// second runs 45 s and completes. t001 fails after 12.5 s.
	exec(`UPDATE tasks SET status = 'pending', ended_by = 'retry', updated_at = launched_at + interval '30 s' WHERE id = 'tiff_t000'`)
	exec(`UPDATE tasks SET status = 'processing', attempt = 2, machine_id = 'm0b', ended_by = NULL,
		launched_at = '2026-01-01 00:01:00+00', updated_at = '2026-01-01 00:01:00+00' WHERE id = 'tiff_t000'`)
	exec(`UPDATE tasks SET status = 'completed', ended_by = 'callback', updated_at = launched_at + interval '45 s' WHERE id = 'tiff_t000'`)
	exec(`UPDATE tasks SET status = 'failed', ended_by = 'callback', updated_at = launched_at + interval '12.5 s' WHERE id = 'tiff_t001'`)
	// t003's launch made no machine: released, not charged.
	released, err := q.TaskRelease(ctx, db.TaskReleaseParams{IDs: []string{"tiff_t003"}, Attempts: []int32{1}})
	require.NoError(t, err)
	require.Len(t, released, 1)
	// A late success of t001's ended attempt changes nothing.
	exec(`UPDATE tasks SET status = 'completed', updated_at = launched_at + interval '100 s' WHERE id = 'tiff_t001'`)
	require.Equal(t, []db.UsageListByBatchRow{
		{Phase: "TIFF_CONVERSION", Kind: "task", Resource: guest, Attempts: 3, Seconds: 87.5},
	}, usageOf(t, q, "b1"))

	// t002 ends through the callbacks' group statement, 10 s or a little
	// more after its launch.
	exec(`UPDATE tasks SET launched_at = clock_timestamp() - interval '10 s' WHERE id = 'tiff_t002'`)
	ended, err := q.TaskCompleteMany(ctx, db.TaskCompleteManyParams{IDs: []string{"tiff_t002"}, BatchIDs: []string{"b1"},
		Statuses: []string{"completed"}, Results: []string{`{}`}, Errors: []string{""}, TokenHashes: [][]byte{tasktoken.Record(dbtest.Token("tiff_t002"))},
		Retryables: []bool{false}, MaxAttempts: 3}.WithEvents())
	require.NoError(t, err)
	require.Len(t, ended, 1)
	rows := usageOf(t, q, "b1")
	require.Len(t, rows, 1)
	require.Equal(t, int64(4), rows[0].Attempts)
	require.GreaterOrEqual(t, rows[0].Seconds, 97.5)
	require.Less(t, rows[0].Seconds, 97.5+30)
}

// TestUsagePoolBusyAndIdle: a pool machine's time is split between the
// tasks it held (pool_busy, lease to end) and its pool (pool_idle: its
// life less its busy time), its batch's or, for a shared pool, no batch's.
func TestUsagePoolBusyAndIdle(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := dbtest.New(t)
	exec := dbtest.Exec(t, pool)
	q := db.New(pool)
	dbtest.SeedProcessingTasks(t, pool, "b2", 1)
	batch := "b2"
	own, err := q.PoolOpen(ctx, db.PoolOpenParams{Phase: "TIFF_CONVERSION", BatchID: &batch, App: "tiff"})
	require.NoError(t, err)
	shared, err := q.PoolOpen(ctx, db.PoolOpenParams{Phase: "IMAGE_PROCESSING", App: "image"})
	require.NoError(t, err)
	exec(`INSERT INTO pool_machines (pool_id, app, machine_id, token_hash, guest, created_at)
		VALUES ($1, 'tiff', 'pm1', '\x01', $3, '2026-01-01 00:00:00+00'), ($2, 'image', 'pm2', '\x02', $3, '2026-01-01 00:00:00+00'),
			($1, 'tiff', NULL, '\x03', $3, '2026-01-01 00:00:00+00')`, own.ID, shared.ID, guest)

	// pm1 starts for 10 s, leases the task at 00:10, which calls back at
	// 00:40 (its lease ends: busy 30 s), then idles until it ends at 01:00.
	exec(`UPDATE tasks SET guest = $1, machine_id = 'pm1', pool_machine_id = (SELECT id FROM pool_machines WHERE machine_id = 'pm1'),
		launched_at = '2026-01-01 00:00:10+00', updated_at = '2026-01-01 00:00:10+00'`, guest)
	exec(`UPDATE tasks SET status = 'completed', ended_by = 'callback', updated_at = '2026-01-01 00:00:40+00'`)
	exec(`UPDATE pool_machines SET busy_ms = 30000 WHERE machine_id = 'pm1'`)
	exec(`UPDATE pool_machines SET ended_at = '2026-01-01 00:01:00+00' WHERE machine_id = 'pm1'`)
	// The shared pool's pm2 lived 90 s without a lease; the third machine's
	// launch made none.
	exec(`UPDATE pool_machines SET ended_at = '2026-01-01 00:01:30+00' WHERE machine_id = 'pm2' OR machine_id IS NULL`)
	exec(`UPDATE pool_machines SET ended_at = '2026-01-01 00:05:00+00' WHERE machine_id = 'pm1'`) // already ended: not again

	require.Equal(t, []db.UsageListByBatchRow{
		{Phase: "TIFF_CONVERSION", Kind: "pool_busy", Resource: guest, Attempts: 1, Seconds: 30},
		{Phase: "TIFF_CONVERSION", Kind: "pool_idle", Resource: guest, Attempts: 1, Seconds: 30},
	}, usageOf(t, q, "b2"))
	require.Equal(t, []db.UsageListByBatchRow{
		{Phase: "IMAGE_PROCESSING", Kind: "pool_idle", Resource: guest, Attempts: 1, Seconds: 90},
	}, usageOf(t, q, ""), "a shared pool's idle time is no batch's")
}

// TestUsageAddMeter: provider usage adds up per batch, phase, role and
// model, across commits.
func TestUsageAddMeter(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	q := db.New(dbtest.New(t))
	for range 2 {
		m := &provider.Meter{}
		mctx := provider.WithMeter(ctx, m)
		provider.Record(mctx, "m-a", provider.Answered(1000, 20, 1020))
		provider.Record(mctx, "m-a", provider.Answered(10, 0, 15))
		provider.Record(mctx, "m-b", provider.Usage{Requests: 1})
		require.NoError(t, q.UsageAddMeter(ctx, "b3", "OCR", "ocr", m))
	}
	require.NoError(t, q.UsageAddMeter(ctx, "b3", "OCR", "ocr", &provider.Meter{}), "nothing metered, nothing written")
	require.Equal(t, []db.UsageListByBatchRow{
		{Phase: "OCR", Kind: "provider", Role: "ocr", Resource: "m-a", Requests: 4, PromptTokens: 2020, CompletionTokens: 50},
		{Phase: "OCR", Kind: "provider", Role: "ocr", Resource: "m-b", Requests: 2},
	}, usageOf(t, q, "b3"))
}
