package db_test

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/stretchr/testify/require"

	"github.com/arke-institute/orchestrator/db"
	"github.com/arke-institute/orchestrator/internal/harness/dbtest"
)

// batchJob, documentJob and poolJob are jobs about a batch, a document
// and a pool, as the orchestrator's are (their arguments name them).
type batchJob struct {
	BatchID string `json:"batch_id"`
	N       int    `json:"n"`
}

func (batchJob) Kind() string { return "test_batch_job" }

type documentJob struct {
	DocumentID int64 `json:"document_id"`
}

func (documentJob) Kind() string { return "test_document_job" }

type poolJob struct {
	PoolID int64 `json:"pool_id"`
}

func (poolJob) Kind() string { return "test_pool_job" }

type otherJob struct{}

func (otherJob) Kind() string { return "test_other_job" }

// jobPriority is the River priority of job id.
func jobPriority(t *testing.T, tx db.DBTX, id int64) int {
	t.Helper()
	var p int
	require.NoError(t, tx.QueryRow(context.Background(), `SELECT priority FROM river_job WHERE id = $1`, id).Scan(&p))
	return p
}

// TestBatchPriorityRange: a priority off the scale is refused by the
// table too.
func TestBatchPriorityRange(t *testing.T) {
	t.Parallel()
	q := db.New(dbtest.New(t))
	for _, p := range []int16{-11, 11} {
		_, err := q.BatchInsert(context.Background(), db.BatchInsertParams{ID: "b", Uploader: "u", QueueMessage: []byte(`{}`), Priority: p})
		require.ErrorContains(t, err, "batches_priority_range", "priority %d", p)
	}
	b, err := q.BatchInsert(context.Background(), db.BatchInsertParams{ID: "b", Uploader: "u", QueueMessage: []byte(`{}`)})
	require.NoError(t, err)
	require.Zero(t, b.Priority, "the default")
}

// TestRiverJobsTakeTheirBatchPriority: whichever way a job of a batch is
// inserted (in the batch's own transaction, in bulk by COPY), it runs at
// its batch's River level; so do the jobs of its documents and its pool.
// A job of no batch, or one that asked for a priority, keeps its own.
func TestRiverJobsTakeTheirBatchPriority(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := dbtest.New(t)
	rc, err := river.NewClient(riverpgxv5.New(pool), &river.Config{})
	require.NoError(t, err)

	for _, tc := range []struct {
		priority int16
		want     int
	}{{10, 1}, {5, 1}, {4, 2}, {0, 2}, {-1, 3}, {-5, 3}, {-6, 4}, {-10, 4}} {
		id := "b" + time.Now().Format("150405.000000000")
		err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
			if _, err := db.New(tx).BatchInsert(ctx, db.BatchInsertParams{ID: id, Uploader: "u", QueueMessage: []byte(`{}`), Priority: tc.priority}); err != nil {
				return err
			}
			res, err := rc.InsertTx(ctx, tx, batchJob{BatchID: id}, nil)
			require.NoError(t, err)
			require.Equal(t, tc.want, jobPriority(t, tx, res.Job.ID), "priority %d, inserted with its batch", tc.priority)
			return nil
		})
		require.NoError(t, err)
		// In bulk (River copies them in).
		n, err := rc.InsertManyFast(ctx, []river.InsertManyParams{{Args: batchJob{BatchID: id, N: 1}}, {Args: batchJob{BatchID: id, N: 2}}})
		require.NoError(t, err)
		require.Equal(t, 2, n)
		var levels []int
		rows, err := pool.Query(ctx, `SELECT DISTINCT priority FROM river_job WHERE args->>'batch_id' = $1`, id)
		require.NoError(t, err)
		levels, err = pgx.CollectRows(rows, pgx.RowTo[int])
		require.NoError(t, err)
		require.Equal(t, []int{tc.want}, levels, "priority %d, in bulk", tc.priority)
	}

	exec := dbtest.Exec(t, pool)
	exec(`INSERT INTO batches (id, uploader, queue_message, priority) VALUES ('high', 'u', '{}', 7), ('low', 'u', '{}', -7)`)
	var highDoc, lowDoc, ownDoc, highPool int64
	require.NoError(t, pool.QueryRow(ctx, `INSERT INTO documents (r2_key, version, batch_id) VALUES ('a', 1, 'high') RETURNING id`).Scan(&highDoc))
	require.NoError(t, pool.QueryRow(ctx, `INSERT INTO documents (r2_key, version, batch_id) VALUES ('b', 1, 'low') RETURNING id`).Scan(&lowDoc))
	require.NoError(t, pool.QueryRow(ctx, `INSERT INTO documents (r2_key, version) VALUES ('c', 1) RETURNING id`).Scan(&ownDoc))
	require.NoError(t, pool.QueryRow(ctx, `INSERT INTO pools (phase, batch_id, app) VALUES ('P', 'high', 'app') RETURNING id`).Scan(&highPool))
	for _, tc := range []struct {
		name string
		args river.JobArgs
		opts *river.InsertOpts
		want int
	}{
		{"HighDocument", documentJob{DocumentID: highDoc}, nil, 1},
		{"LowDocument", documentJob{DocumentID: lowDoc}, nil, 4},
		{"DocumentOfNoBatch", documentJob{DocumentID: ownDoc}, nil, 2},
		{"HighPool", poolJob{PoolID: highPool}, nil, 1},
		{"NoBatch", otherJob{}, nil, 1},
		{"UnknownBatch", batchJob{BatchID: "gone"}, nil, 1},
		{"OwnPriority", batchJob{BatchID: "low", N: 9}, &river.InsertOpts{Priority: 2}, 2},
	} {
		res, err := rc.Insert(ctx, tc.args, tc.opts)
		require.NoError(t, err)
		require.Equal(t, tc.want, jobPriority(t, pool, res.Job.ID), tc.name)
	}
}

// TestRiverJobAge: a job due for longer than the period climbs one level
// per run, up to River's first; one due for less, or not yet due, stays.
func TestRiverJobAge(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := dbtest.New(t)
	rc, err := river.NewClient(riverpgxv5.New(pool), &river.Config{})
	require.NoError(t, err)
	q := db.New(pool)
	insert := func(priority int, at time.Time) int64 {
		res, err := rc.Insert(ctx, otherJob{}, &river.InsertOpts{Priority: priority, ScheduledAt: at})
		require.NoError(t, err)
		return res.Job.ID
	}
	now := time.Now()
	waited := insert(4, now.Add(-2*time.Minute))
	fresh := insert(4, now.Add(-10*time.Second))
	later := insert(4, now.Add(time.Hour))
	top := insert(1, now.Add(-2*time.Minute))
	// River inserts a job with a time as scheduled; its scheduler makes
	// those due available.
	dbtest.Exec(t, pool)(`UPDATE river_job SET state = 'available' WHERE scheduled_at <= now()`)
	for run, want := range []int{3, 2, 1, 1} {
		_, err := q.RiverJobAge(ctx, 60)
		require.NoError(t, err)
		require.Equal(t, want, jobPriority(t, pool, waited), "after run %d", run+1)
	}
	require.Equal(t, 4, jobPriority(t, pool, fresh), "due for less than the period")
	require.Equal(t, 4, jobPriority(t, pool, later), "not due")
	require.Equal(t, 1, jobPriority(t, pool, top))
}

// TestPoolBatchesByPriority: a shared pool's leases go to the batch of the
// highest priority first, however many of its tasks are leased; without
// by_priority (the minimum share), to the batch with the fewest leased.
func TestPoolBatchesByPriority(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := dbtest.New(t)
	exec := dbtest.Exec(t, pool)
	exec(`INSERT INTO batches (id, uploader, queue_message, priority, status) VALUES
		('old-low', 'u', '{}', -5, 'P'), ('high', 'u', '{}', 5, 'P'), ('normal', 'u', '{}', 0, 'P')`)
	for _, b := range []string{"old-low", "high", "normal"} {
		exec(`INSERT INTO files (batch_id, generation, ordinal, directory_path, r2_key, logical_path, file_name, file_size, content_type, processing_config, preprocessor_tags)
			SELECT $1, 0, g, '/', 'k' || g, '/f' || g, 'f' || g, 1, 'image/jpeg', '{}', '{}' FROM generate_series(0, 4) g`, b)
		exec(`INSERT INTO tasks (id, batch_id, phase, file_id) SELECT $1 || '-' || ordinal, batch_id, 'P', id FROM files WHERE batch_id = $1`, b)
	}
	// The high batch has the most tasks leased.
	exec(`UPDATE tasks SET status = 'processing' WHERE id IN ('high-0', 'high-1', 'high-2', 'normal-0')`)
	ids := func(byPriority bool) []string {
		rows, err := db.New(pool).PoolBatches(ctx, db.PoolBatchesParams{Phase: "P", Max: 10, ByPriority: byPriority})
		require.NoError(t, err)
		var out []string
		for _, r := range rows {
			out = append(out, r.ID)
		}
		return out
	}
	require.Equal(t, []string{"high", "normal", "old-low"}, ids(true))
	require.Equal(t, []string{"old-low", "normal", "high"}, ids(false))
}
