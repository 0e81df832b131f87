package jobs_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/arke-institute/orchestrator/blob"
	"github.com/arke-institute/orchestrator/db"
	"github.com/arke-institute/orchestrator/executor/chunked"
	"github.com/arke-institute/orchestrator/executor/tasks"
	"github.com/arke-institute/orchestrator/internal/fakes/fakefly"
	"github.com/arke-institute/orchestrator/internal/harness/eventually"
	"github.com/arke-institute/orchestrator/internal/harness/metricstest"
	"github.com/arke-institute/orchestrator/internal/harness/testenv"
	"github.com/arke-institute/orchestrator/jobs"
	"github.com/arke-institute/orchestrator/status"
)

// batchRows counts a batch's rows in each table retention looks at.
type batchRows struct {
	Tasks, TaskCounts, Chunks, ChunkItems, Events, Files, FinalFiles, Documents, DocumentChunks int64
}

func countBatchRows(t *testing.T, pool *pgxpool.Pool, id string) batchRows {
	t.Helper()
	var r batchRows
	err := pool.QueryRow(context.Background(), `SELECT
		(SELECT count(*) FROM tasks WHERE batch_id = $1),
		(SELECT count(*) FROM task_counts WHERE batch_id = $1),
		(SELECT count(*) FROM chunks WHERE batch_id = $1),
		(SELECT count(*) FROM chunk_items WHERE batch_id = $1),
		(SELECT count(*) FROM batch_events WHERE batch_id = $1),
		(SELECT count(*) FROM files WHERE batch_id = $1),
		(SELECT count(*) FROM files f JOIN batches b ON b.id = f.batch_id AND b.generation = f.generation WHERE f.batch_id = $1),
		(SELECT count(*) FROM documents WHERE batch_id = $1),
		(SELECT count(*) FROM document_chunks c JOIN documents d ON d.id = c.document_id WHERE d.batch_id = $1)`, id).Scan(
		&r.Tasks, &r.TaskCounts, &r.Chunks, &r.ChunkItems, &r.Events, &r.Files, &r.FinalFiles, &r.Documents, &r.DocumentChunks)
	require.NoError(t, err)
	return r
}

// backdate makes a batch look as if it started and finished ago.
func backdate(t *testing.T, pool *pgxpool.Pool, id string, ago time.Duration) {
	t.Helper()
	_, err := pool.Exec(context.Background(), `UPDATE batches
		SET started_at = started_at - $2::interval, updated_at = updated_at - $2::interval,
			completed_at = completed_at - $2::interval
		WHERE id = $1`, id, ago)
	require.NoError(t, err)
}

// addChunksAndDocument gives a batch what its OCR and DOCUMENT_INDEXING
// phases would have left: two chunks with items, and a document with a
// chunk, indexing a file of its final generation.
func addChunksAndDocument(t *testing.T, pool *pgxpool.Pool, id string) {
	t.Helper()
	_, err := pool.Exec(context.Background(), `
		WITH f AS (SELECT f.id, f.r2_key FROM files f JOIN batches b ON b.id = f.batch_id AND b.generation = f.generation
			WHERE f.batch_id = $1 ORDER BY f.ordinal LIMIT 1),
		k AS (INSERT INTO chunks (batch_id, phase, chunk_id, state, total_refs, completed, failed)
			VALUES ($1, 'OCR', '0', 'DONE', 3, 2, 1), ($1, 'OCR', '1', 'DONE', 2, 2, 0)),
		i AS (INSERT INTO chunk_items (batch_id, phase, chunk_id, item_index, directory_path, file_id, r2_key, status)
			SELECT $1, 'OCR', c, n, '/scans', f.id, f.r2_key, 'done'
			FROM f, (VALUES ('0', 0), ('0', 1), ('0', 2), ('1', 0), ('1', 1)) v(c, n)),
		d AS (INSERT INTO documents (r2_key, version, status, current, batch_id, file_id)
			SELECT f.r2_key, 1, 'completed', true, $1, f.id FROM f RETURNING id)
		INSERT INTO document_chunks (document_id, chunk_index, text, tokens, status)
		SELECT d.id, 0, 'an indexed page', 3, 'stored' FROM d`, id)
	require.NoError(t, err)
}

// retentionDeps are the env's deps with retention on (the env's own
// client runs none: its periodic job would race the test's Prune).
func retentionDeps(env *testenv.Env, edit func(*jobs.Retention)) jobs.Deps {
	s := env.Deps.Settings
	s.Retention.Days, s.Retention.DeleteRows = 7, 3
	if edit != nil {
		edit(&s.Retention)
	}
	return jobs.Deps{Pool: env.Pool, Store: env.Store, Settings: s, Logger: slog.New(slog.DiscardHandler), Metrics: env.Metrics, Executors: env.Deps.Executors}
}

// TestPruneKeepsResultsRemovesProcessingState: of a batch finished more
// than RETENTION_DAYS ago, Prune removes the tasks and their counters,
// chunks and items, events and the intermediate file generations, a few
// rows per statement; the batch row, its final generation (the final
// manifest built from it is the one ingest got), its documents and its
// status stay. A recent batch, a running one (however old) and one still
// delivering to ingest keep everything, and a pruned batch cannot be
// retried.
func TestPruneKeepsResultsRemovesProcessingState(t *testing.T) {
	t.Parallel()
	env := testenv.New(t, testenv.Options{
		Settings: map[string]string{"RETENTION_DAYS": "0"},
		Behave: func(l fakefly.Launch) fakefly.Behavior {
			if strings.HasPrefix(l.BatchID, "RUN") {
				return fakefly.Behavior{Hang: true}
			}
			return testenv.Succeed(l)
		},
	})
	ctx := context.Background()
	files := []testenv.File{
		{LogicalPath: "/scans/a.tif", Size: 1000, ContentType: "image/tiff"},
		{LogicalPath: "/scans/b.tif", Size: 1000, ContentType: "image/tiff"},
		{LogicalPath: "/photos/c.jpg", Size: 1000, ContentType: "image/jpeg"},
		{LogicalPath: "/notes/d.txt", Size: 10, ContentType: "text/plain"},
	}
	for _, id := range []string{"OLD", "RECENT", "DELIVERING", "RUNNING", "ERRORED"} {
		env.Submit(t, id, files)
	}
	for _, id := range []string{"OLD", "RECENT", "DELIVERING"} {
		env.AwaitStatus(t, id, func(st status.Status) bool { return st.Ingest.Status == "delivered" })
	}
	env.AwaitStatus(t, "RUNNING", func(st status.Status) bool { return len(st.Phases) > 0 && st.Phases[0].TasksProcessing > 0 })
	// ERRORED runs like the others, then is made to look failed.
	env.AwaitStatus(t, "ERRORED", func(st status.Status) bool { return st.Status == "DONE" })
	_, err := env.Pool.Exec(ctx, `UPDATE batches SET status = 'ERROR', error = 'failed for the test', ingest_status = 'none' WHERE id = 'ERRORED'`)
	require.NoError(t, err)
	_, err = env.Pool.Exec(ctx, `UPDATE batches SET ingest_status = 'pending' WHERE id = 'DELIVERING'`)
	require.NoError(t, err)
	addChunksAndDocument(t, env.Pool, "OLD")
	for _, id := range []string{"OLD", "DELIVERING", "RUNNING", "ERRORED"} {
		backdate(t, env.Pool, id, 8*24*time.Hour)
	}

	before := map[string]batchRows{}
	for _, id := range []string{"OLD", "RECENT", "DELIVERING", "RUNNING", "ERRORED"} {
		before[id] = countBatchRows(t, env.Pool, id)
	}
	old := before["OLD"]
	require.Greater(t, old.Files, old.FinalFiles, "OLD has intermediate generations")
	require.Greater(t, old.Events, int64(6), "OLD's events take several statements")
	require.Greater(t, old.Tasks, int64(3))
	statusBefore := env.Status(t, "OLD")
	require.NotNil(t, testenv.OCROf(statusBefore))
	b, err := db.New(env.Pool).BatchGetByID(ctx, "OLD")
	require.NoError(t, err)
	manifestBefore, err := jobs.FinalManifest(ctx, env.Pool, "OLD", b.Generation, jobs.Failures{})
	require.NoError(t, err)

	res, err := jobs.Prune(ctx, retentionDeps(env, nil), jobs.PruneOptions{})
	require.NoError(t, err)
	require.ElementsMatch(t, []string{"OLD", "ERRORED"}, res.Batches)
	require.False(t, res.More)

	after := countBatchRows(t, env.Pool, "OLD")
	require.Equal(t, batchRows{
		Events: 1, // batch.pruned
		Files:  old.FinalFiles, FinalFiles: old.FinalFiles,
		Documents: old.Documents, DocumentChunks: old.DocumentChunks,
	}, after)
	errored := before["ERRORED"]
	require.Equal(t, batchRows{Events: 1, Files: errored.FinalFiles, FinalFiles: errored.FinalFiles},
		countBatchRows(t, env.Pool, "ERRORED"))
	for _, id := range []string{"RECENT", "DELIVERING", "RUNNING"} {
		require.Equal(t, before[id], countBatchRows(t, env.Pool, id), "%s keeps everything", id)
	}

	// Bounded: every table went 3 rows a statement (plus the statement
	// that found fewer).
	for table, n := range map[string]int64{
		tasks.TableTasks:        old.Tasks + errored.Tasks,
		tasks.TableTaskCounts:   old.TaskCounts + errored.TaskCounts,
		jobs.TableBatchEvents:   old.Events + errored.Events,
		jobs.TableFiles:         old.Files - old.FinalFiles + errored.Files - errored.FinalFiles,
		chunked.TableChunkItems: old.ChunkItems,
		chunked.TableChunks:     old.Chunks,
	} {
		require.Equal(t, n, res.Removed[table], table)
		require.Equal(t, float64(n), metricstest.Value(t, env.Metrics.Registry(), "orchestrator_retention_removed_total", map[string]string{"table": table}), table)
	}
	minStatements := 0
	for _, r := range []batchRows{old, errored} {
		for _, n := range []int64{r.ChunkItems, r.Chunks, r.Tasks, r.Files - r.FinalFiles, r.Events} {
			minStatements += int(n/3) + 1
		}
		minStatements++ // the batch's pools, in one statement
		minStatements++ // its launch bounds, in one statement
	}
	require.Equal(t, minStatements, res.Statements)

	// What stays: the final manifest, the status with its counts, the
	// event saying what went.
	manifestAfter, err := jobs.FinalManifest(ctx, env.Pool, "OLD", b.Generation, jobs.Failures{})
	require.NoError(t, err)
	require.JSONEq(t, string(manifestBefore), string(manifestAfter))
	calls := env.Ingest.Calls()
	delivered := false
	for _, c := range calls {
		if strings.Contains(c.Path, "/OLD/") {
			require.JSONEq(t, string(c.Body), string(manifestAfter), "the manifest ingest got can be built again")
			delivered = true
		}
	}
	require.True(t, delivered)

	code, body := env.Do(t, http.MethodGet, "/status/OLD", nil)
	require.Equal(t, http.StatusOK, code, string(body))
	var st status.Status
	require.NoError(t, json.Unmarshal(body, &st))
	require.Equal(t, "DONE", st.Status)
	require.Equal(t, statusBefore.Phases, st.Phases)
	require.Equal(t, statusBefore.Progress, st.Progress)
	require.Equal(t, testenv.OCROf(statusBefore), testenv.OCROf(st))
	require.Equal(t, testenv.DocumentsOf(statusBefore), testenv.DocumentsOf(st))
	require.NotNil(t, st.Pruned)
	require.NotNil(t, st.Pruned.At)
	require.Contains(t, st.Pruned.Note, "removed")

	code, body = env.Do(t, http.MethodGet, "/batches/OLD/events", nil)
	require.Equal(t, http.StatusOK, code, string(body))
	require.Contains(t, string(body), `"batch.pruned"`)
	code, body = env.Do(t, http.MethodGet, "/ui/batches/OLD", nil)
	require.Equal(t, http.StatusOK, code, string(body))
	require.Contains(t, string(body), `id="batch-pruned"`)

	// The dashboard's listing shows the kept counts too.
	code, body = env.Do(t, http.MethodGet, "/ui", nil)
	require.Equal(t, http.StatusOK, code, string(body))
	_, item, found := strings.Cut(string(body), `data-batch="OLD"`)
	require.True(t, found)
	item, _, _ = strings.Cut(item, "</li>")
	for _, p := range statusBefore.Phases {
		require.Contains(t, item, fmt.Sprintf(`data-phase="%s"`, p.Phase))
		require.Contains(t, item, fmt.Sprintf("%d / %d %s done", p.TasksCompleted, p.TasksTotal, p.Unit))
	}

	code, body = env.Do(t, http.MethodPost, "/admin/retry/ERRORED", nil)
	require.Equal(t, http.StatusConflict, code, string(body))
	require.Contains(t, string(body), "cannot be retried")
	st = env.Status(t, "ERRORED")
	require.Equal(t, "ERROR", st.Status)
	require.NotNil(t, st.Pruned)

	// Done is done: the next run finds nothing.
	res, err = jobs.Prune(ctx, retentionDeps(env, nil), jobs.PruneOptions{})
	require.NoError(t, err)
	require.Empty(t, res.Batches)
	require.Zero(t, res.Statements)
}

// TestPruneDays: a batch is due RETENTION_DAYS after it finished, not
// before; 0 prunes nothing.
func TestPruneDays(t *testing.T) {
	t.Parallel()
	env := testenv.New(t, testenv.Options{NoWorkers: true, Settings: map[string]string{"RETENTION_DAYS": "0"}})
	ctx := context.Background()
	insertFinished(t, env.Pool, "TWO-DAYS", 2*24*time.Hour)
	insertFinished(t, env.Pool, "FOUR-DAYS", 4*24*time.Hour)

	for _, tc := range []struct {
		days int
		want []string
	}{{0, nil}, {5, nil}, {3, []string{"FOUR-DAYS"}}, {1, []string{"TWO-DAYS"}}} {
		res, err := jobs.Prune(ctx, retentionDeps(env, func(r *jobs.Retention) { r.Days = tc.days }), jobs.PruneOptions{})
		require.NoError(t, err)
		require.Equal(t, tc.want, res.Batches, "RETENTION_DAYS=%d", tc.days)
	}
}

// insertFinished inserts a batch that ended DONE ago, with a few events.
func insertFinished(t *testing.T, pool *pgxpool.Pool, id string, ago time.Duration) {
	t.Helper()
	_, err := pool.Exec(context.Background(), `
		WITH b AS (INSERT INTO batches (id, uploader, queue_message, status, ingest_status, started_at, updated_at, completed_at)
			VALUES ($1, 'tester', '{}', 'DONE', 'delivered', now() - $2::interval, now() - $2::interval, now() - $2::interval))
		INSERT INTO batch_events (batch_id, type) SELECT $1, t FROM unnest(ARRAY['batch.created', 'batch.done', 'batch.delivered']) t`, id, ago)
	require.NoError(t, err)
}

// TestPruneStagingObjects: with RETENTION_STAGING, a pruned batch's
// staging objects go, all but its processed manifest; other batches'
// (one whose id starts with the pruned one's among them) stay.
func TestPruneStagingObjects(t *testing.T) {
	t.Parallel()
	env := testenv.New(t, testenv.Options{NoWorkers: true, Settings: map[string]string{"RETENTION_DAYS": "0"}})
	ctx := context.Background()
	insertFinished(t, env.Pool, "S1", 8*24*time.Hour)
	insertFinished(t, env.Pool, "S10", time.Hour)
	gone := []string{"staging/S1/_manifest.json", "staging/S1/scans/a.tif", "staging/S1/scans/a.jpg", "staging/S1/scans/a.jpg.ref.json"}
	kept := []string{"staging/S1/_manifest.processed.json", "staging/S10/_manifest.json", "staging/S10/scans/a.tif", "variants/S1/a-thumb.jpg"}
	for _, k := range append(append([]string{}, gone...), kept...) {
		env.PutObject(t, k, []byte(k))
	}

	res, err := jobs.Prune(ctx, retentionDeps(env, func(r *jobs.Retention) { r.Staging = true }), jobs.PruneOptions{})
	require.NoError(t, err)
	require.Equal(t, []string{"S1"}, res.Batches)
	require.Equal(t, int64(len(gone)), res.Removed[jobs.StagingObjects])
	for _, k := range gone {
		ok, err := env.Store.Exists(ctx, env.Bucket, k)
		require.NoError(t, err)
		require.False(t, ok, "%s is deleted", k)
	}
	for _, k := range kept {
		ok, err := env.Store.Exists(ctx, env.Bucket, k)
		require.NoError(t, err)
		require.True(t, ok, "%s stays", k)
	}

	t.Run("Off", func(t *testing.T) {
		insertFinished(t, env.Pool, "S2", 8*24*time.Hour)
		env.PutObject(t, "staging/S2/a.tif", []byte("x"))
		res, err := jobs.Prune(ctx, retentionDeps(env, nil), jobs.PruneOptions{})
		require.NoError(t, err)
		require.Equal(t, []string{"S2"}, res.Batches)
		ok, err := env.Store.Exists(ctx, env.Bucket, "staging/S2/a.tif")
		require.NoError(t, err)
		require.True(t, ok, "without RETENTION_STAGING objects stay")
	})
}

// refusingStore is the test's S3 store, refusing to delete the objects of
// one staging prefix, as storage without the delete permission would.
type refusingStore struct {
	*blob.S3
	prefix string
}

func (s refusingStore) Delete(ctx context.Context, bucket string, keys []string) error {
	for _, k := range keys {
		if strings.HasPrefix(k, s.prefix) {
			return errors.New("AccessDenied: not allowed to delete " + k)
		}
	}
	return s.S3.Delete(ctx, bucket, keys)
}

// TestPruneFailureLeavesBatchForNextRun: a batch whose pruning fails (its
// staging objects cannot be deleted) does not hold up the others, stays
// due (not marked pruned), and is pruned by the next run that succeeds.
func TestPruneFailureLeavesBatchForNextRun(t *testing.T) {
	t.Parallel()
	env := testenv.New(t, testenv.Options{NoWorkers: true, Settings: map[string]string{"RETENTION_DAYS": "0"}})
	ctx := context.Background()
	insertFinished(t, env.Pool, "F1", 9*24*time.Hour) // first in line
	insertFinished(t, env.Pool, "F2", 8*24*time.Hour)
	env.PutObject(t, "staging/F1/a.tif", []byte("x"))
	env.PutObject(t, "staging/F2/a.tif", []byte("x"))

	deps := retentionDeps(env, func(r *jobs.Retention) { r.Staging = true })
	deps.Store = refusingStore{S3: env.Store.(*blob.S3), prefix: "staging/F1/"}
	res, err := jobs.Prune(ctx, deps, jobs.PruneOptions{})
	require.NoError(t, err)
	require.Equal(t, []string{"F2"}, res.Batches)
	require.Equal(t, []string{"F1"}, res.Failed)
	b, err := db.New(env.Pool).BatchGetByID(ctx, "F1")
	require.NoError(t, err)
	require.Nil(t, b.PrunedAt, "F1 is still due")
	require.NotNil(t, env.Status(t, "F1").Pruned, "its details are (partly) gone already")

	res, err = jobs.Prune(ctx, retentionDeps(env, func(r *jobs.Retention) { r.Staging = true }), jobs.PruneOptions{})
	require.NoError(t, err)
	require.Equal(t, []string{"F1"}, res.Batches)
	require.Empty(t, res.Failed)
	ok, err := env.Store.Exists(ctx, env.Bucket, "staging/F1/a.tif")
	require.NoError(t, err)
	require.False(t, ok)
	require.Equal(t, int64(1), countBatchRows(t, env.Pool, "F1").Events, "only batch.pruned is left")
}

// TestRetentionJobRunsPeriodically: with RETENTION_DAYS set, the client
// runs the retention job every RETENTION_INTERVAL, and a batch that comes
// due is pruned without anyone calling Prune.
func TestRetentionJobRunsPeriodically(t *testing.T) {
	t.Parallel()
	env := testenv.New(t, testenv.Options{Settings: map[string]string{"RETENTION_DAYS": "1", "RETENTION_INTERVAL": "200"}})
	insertFinished(t, env.Pool, "PERIODIC", 25*time.Hour)
	ctx := context.Background()
	eventually.True(t, 30*time.Second, "the retention job to prune the batch", func() bool {
		b, err := db.New(env.Pool).BatchGetByID(ctx, "PERIODIC")
		require.NoError(t, err)
		return b.PrunedAt != nil
	})
	rows := countBatchRows(t, env.Pool, "PERIODIC")
	require.Equal(t, int64(1), rows.Events, "only batch.pruned is left")
	var kinds int
	require.NoError(t, env.Pool.QueryRow(ctx, `SELECT count(*) FROM river_job WHERE kind = $1`, jobs.RetentionArgs{}.Kind()).Scan(&kinds))
	require.Positive(t, kinds)
}
