package batches_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/arke-institute/orchestrator/batches"
	"github.com/arke-institute/orchestrator/intakesig"
	"github.com/arke-institute/orchestrator/internal/harness/dbtest"
)

// TestIntakeSignaturesKeptBySigningTime: the replay table keeps a
// signature until twice the window after it was made, whenever a replica
// saw it: one made just inside a skewed replica's window is still there to
// refuse its replay, and one made longer ago is forgotten.
func TestIntakeSignaturesKeptBySigningTime(t *testing.T) {
	t.Parallel()
	pool := dbtest.New(t)
	ctx := context.Background()
	c := batches.New(pool, nil, nil, nil, nil, nil)
	now := time.Now()
	record := func(sig string, signed time.Time) bool {
		t.Helper()
		fresh, err := c.RecordIntakeSignature(ctx, []byte(sig), signed, intakesig.Window)
		require.NoError(t, err)
		return fresh
	}
	require.True(t, record("old", now.Add(-2*intakesig.Window-time.Minute)))
	require.True(t, record("recent", now.Add(-2*intakesig.Window+time.Minute)))
	require.True(t, record("new", now), "recording prunes on the way")

	var kept []string
	rows, err := pool.Query(ctx, `SELECT convert_from(signature, 'UTF8') FROM intake_signatures ORDER BY 1`)
	require.NoError(t, err)
	for rows.Next() {
		var s string
		require.NoError(t, rows.Scan(&s))
		kept = append(kept, s)
	}
	require.NoError(t, rows.Err())
	require.Equal(t, []string{"new", "recent"}, kept, "pruned by when each was signed")
	require.False(t, record("recent", now), "a replay of one kept is refused")
}
