package db_test

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/arke-institute/orchestrator/db"
	"github.com/arke-institute/orchestrator/internal/harness/dbtest"
)

// Every fan-in lock query locks the same key, batch_lock_key's, which is
// the key the queries used before the function existed (a process still
// running older code must take the same locks): the shared locks of one
// batch or many keep out the exclusive one of each batch they name, and
// only of those.
func TestBatchLocksShareOneKey(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := dbtest.New(t)

	var same bool
	require.NoError(t, pool.QueryRow(ctx, `SELECT batch_lock_key('B1') = hashtextextended('batch:B1', 0)`).Scan(&same))
	require.True(t, same)

	// tryExclusive tells whether another transaction could take the
	// batch's exclusive lock now.
	tryExclusive := func(batchID string) bool {
		t.Helper()
		var got bool
		require.NoError(t, pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
			return tx.QueryRow(ctx, `SELECT pg_try_advisory_xact_lock(batch_lock_key($1))`, batchID).Scan(&got)
		}))
		return got
	}
	for name, lock := range map[string]func(*db.Queries) error{
		"Shared":     func(q *db.Queries) error { return q.BatchLockSharedMany(ctx, []string{"B1"}) },
		"SharedMany": func(q *db.Queries) error { return q.BatchLockSharedMany(ctx, []string{"B2", "B1", "B2"}) },
		"Exclusive":  func(q *db.Queries) error { return q.BatchLockExclusive(ctx, "B1") },
	} {
		t.Run(name, func(t *testing.T) {
			tx, err := pool.Begin(ctx)
			require.NoError(t, err)
			defer tx.Rollback(ctx) //nolint:errcheck // the test only reads
			require.NoError(t, lock(db.New(tx)))
			require.False(t, tryExclusive("B1"), "B1's lock was not taken")
			require.True(t, tryExclusive("B3"), "B3's lock was taken")
		})
	}
}
