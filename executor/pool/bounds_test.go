package pool_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/arke-institute/orchestrator/db"
	"github.com/arke-institute/orchestrator/internal/harness/testenv"
)

// TestPoolUnderMaxMachines: pools of 3 under MAX_MACHINES=2 never have
// more than 2 machines alive (as their rows say: launched, not ended),
// say that a bound held them back, and still take the batch through.
func TestPoolUnderMaxMachines(t *testing.T) {
	t.Parallel()
	env := testenv.New(t, testenv.Options{Settings: testenv.PoolSettings(3, map[string]string{"MAX_MACHINES": "2"})})
	const id = "POOL-BOUND"
	env.Submit(t, id, testenv.Tiffs(10))
	st := env.AwaitStatus(t, id, testenv.IsDone)
	require.Equal(t, "DONE", st.Status, "error: %v", st.Error)

	var most, machines int
	require.NoError(t, env.Pool.QueryRow(context.Background(), `SELECT max(n), count(*) FROM (
		SELECT (SELECT count(*) FROM pool_machines o
			WHERE o.created_at <= m.created_at AND (o.ended_at IS NULL OR o.ended_at > m.created_at)) AS n
		FROM pool_machines m) x`).Scan(&most, &machines))
	require.Equal(t, 2, most, "never more than MAX_MACHINES alive")
	require.GreaterOrEqual(t, machines, 4, "each phase's pool had machines")
	require.GreaterOrEqual(t, env.CountEvents(t, id, db.EventLaunchBounded), 1)
}
