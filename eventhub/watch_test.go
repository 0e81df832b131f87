package eventhub

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/arke-institute/orchestrator/internal/harness/dbtest"
)

// TestEventNotifyOncePerBatchPerStatement checks the cost model of live
// streams: a statement inserting many events (a callback group) notifies
// each batch it touched once, not once per row, and a transaction with
// several such statements still notifies each batch once.
func TestEventNotifyOncePerBatchPerStatement(t *testing.T) {
	t.Parallel()
	pool := dbtest.New(t)
	ctx := context.Background()
	for _, id := range []string{"A", "B"} {
		_, err := pool.Exec(ctx, `INSERT INTO batches (id, uploader, queue_message) VALUES ($1, 'u', '{}')`, id)
		require.NoError(t, err)
	}
	conn, err := pgx.ConnectConfig(ctx, pool.Config().ConnConfig)
	require.NoError(t, err)
	t.Cleanup(func() { conn.Close(context.Background()) })
	_, err = conn.Exec(ctx, "LISTEN "+notifyChannel)
	require.NoError(t, err)

	err = pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		for range 2 {
			if _, err := tx.Exec(ctx, `INSERT INTO batch_events (batch_id, type)
				SELECT CASE WHEN i % 100 = 0 THEN 'B' ELSE 'A' END, 'task.completed' FROM generate_series(1, 256) i`); err != nil {
				return err
			}
		}
		return nil
	})
	require.NoError(t, err)
	// A marker from a later transaction: once it arrives, everything the
	// first transaction notified has arrived too.
	_, err = pool.Exec(ctx, `INSERT INTO batches (id, uploader, queue_message) VALUES ('MARK', 'u', '{}');
		INSERT INTO batch_events (batch_id, type) VALUES ('MARK', 'batch.created')`)
	require.NoError(t, err)

	var got []string
	for {
		wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		n, err := conn.WaitForNotification(wctx)
		cancel()
		require.NoError(t, err)
		if n.Payload == "MARK" {
			break
		}
		got = append(got, n.Payload)
	}
	require.ElementsMatch(t, []string{"A", "B"}, got, "512 events of two batches in one transaction: one notification per batch")
}
