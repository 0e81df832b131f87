package db_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/arke-institute/orchestrator/db"
	"github.com/arke-institute/orchestrator/internal/harness/dbtest"
)

// The counters follow every kind of statement on tasks: multi-row inserts,
// COPY, updates that change some statuses and not others, deletes, a
// batch's deletion and TRUNCATE.
func TestTaskCountsFollowTasks(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := dbtest.New(t)
	q := db.New(pool)
	for _, b := range []string{"b1", "b2"} {
		_, err := q.BatchInsert(ctx, db.BatchInsertParams{ID: b, Uploader: "test", QueueMessage: []byte(`{}`)})
		require.NoError(t, err)
		files := make([]db.FileInsertManyParams, 10)
		for i := range files {
			name := fmt.Sprintf("f%02d.jpg", i)
			files[i] = db.FileInsertManyParams{BatchID: b, Ordinal: int32(i), DirectoryPath: "/", R2Key: "staging/" + name,
				LogicalPath: "/" + name, FileName: name, FileSize: 1, ContentType: "image/jpeg",
				ProcessingConfig: []byte(`{}`), PreprocessorTags: []string{}}
		}
		_, err = q.FileInsertMany(ctx, files)
		require.NoError(t, err)
	}
	// b1: ten tasks by INSERT ... SELECT; b2: ten by COPY.
	_, err := pool.Exec(ctx, `INSERT INTO tasks (id, batch_id, phase, file_id)
		SELECT 'b1-' || ordinal, batch_id, 'IMAGE_PROCESSING', id FROM files WHERE batch_id = 'b1'`)
	require.NoError(t, err)
	var copyRows [][]any
	rows, err := pool.Query(ctx, `SELECT ordinal, id FROM files WHERE batch_id = 'b2' ORDER BY ordinal`)
	require.NoError(t, err)
	for rows.Next() {
		var ord int32
		var id int64
		require.NoError(t, rows.Scan(&ord, &id))
		copyRows = append(copyRows, []any{fmt.Sprintf("b2-%d", ord), "b2", "TIFF_CONVERSION", id})
	}
	require.NoError(t, rows.Err())
	_, err = pool.CopyFrom(ctx, pgx.Identifier{"tasks"}, []string{"id", "batch_id", "phase", "file_id"}, pgx.CopyFromRows(copyRows))
	require.NoError(t, err)
	requireCounts(t, pool, map[string]int64{
		"b1/IMAGE_PROCESSING/pending": 10, "b2/TIFF_CONVERSION/pending": 10,
	})

	for _, stmt := range []string{
		// Both batches in one statement.
		`UPDATE tasks SET status = 'processing' WHERE id IN ('b1-0', 'b1-1', 'b1-2', 'b1-3', 'b2-0', 'b2-1')`,
		`UPDATE tasks SET status = 'completed' WHERE id IN ('b1-0', 'b1-1', 'b2-0')`,
		`UPDATE tasks SET status = 'failed' WHERE id = 'b1-2'`,
		// Rows updated without a change of status change nothing.
		`UPDATE tasks SET machine_id = 'm' WHERE batch_id = 'b1'`,
		`DELETE FROM tasks WHERE id IN ('b1-9', 'b1-3')`,
	} {
		_, err := pool.Exec(ctx, stmt)
		require.NoError(t, err, stmt)
	}
	requireCounts(t, pool, map[string]int64{
		"b1/IMAGE_PROCESSING/completed": 2, "b1/IMAGE_PROCESSING/failed": 1, "b1/IMAGE_PROCESSING/pending": 5,
		"b2/TIFF_CONVERSION/completed": 1, "b2/TIFF_CONVERSION/processing": 1, "b2/TIFF_CONVERSION/pending": 8,
	})

	// The sqlc query the status document and the phase's end read.
	counts, err := q.TaskCountByBatch(ctx, "b2")
	require.NoError(t, err)
	require.ElementsMatch(t, []db.TaskCountByBatchRow{
		{Phase: "TIFF_CONVERSION", Status: "completed", Count: 1},
		{Phase: "TIFF_CONVERSION", Status: "processing", Count: 1},
		{Phase: "TIFF_CONVERSION", Status: "pending", Count: 8},
	}, counts)

	// Deleting a batch: its tasks (no cascade since migration 00005), then
	// the batch, which takes its counters with it.
	_, err = pool.Exec(ctx, `DELETE FROM tasks WHERE batch_id = 'b1'`)
	require.NoError(t, err)
	_, err = pool.Exec(ctx, `DELETE FROM batches WHERE id = 'b1'`)
	require.NoError(t, err)
	requireCounts(t, pool, map[string]int64{
		"b2/TIFF_CONVERSION/completed": 1, "b2/TIFF_CONVERSION/processing": 1, "b2/TIFF_CONVERSION/pending": 8,
	})
	_, err = pool.Exec(ctx, `TRUNCATE tasks CASCADE`)
	require.NoError(t, err)
	requireCounts(t, pool, map[string]int64{})
}

// requireCounts compares the non-zero counters with want, and want with
// counting the tasks.
func requireCounts(t *testing.T, pool *pgxpool.Pool, want map[string]int64) {
	t.Helper()
	read := func(sql string) map[string]int64 {
		rows, err := pool.Query(context.Background(), sql)
		require.NoError(t, err)
		got, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (struct {
			K string
			N int64
		}, error) {
			var v struct {
				K string
				N int64
			}
			return v, r.Scan(&v.K, &v.N)
		})
		require.NoError(t, err)
		m := map[string]int64{}
		for _, v := range got {
			m[v.K] = v.N
		}
		return m
	}
	require.Equal(t, want, read(`SELECT concat_ws('/', batch_id, phase, status), n FROM task_counts WHERE n <> 0`), "task_counts")
	require.Equal(t, want, read(`SELECT concat_ws('/', batch_id, phase, status), count(*) FROM tasks GROUP BY 1`), "counted")
}
