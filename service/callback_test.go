package service

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/stretchr/testify/require"

	"github.com/arke-institute/orchestrator/config"
	"github.com/arke-institute/orchestrator/db"
	"github.com/arke-institute/orchestrator/internal/dbtest"
)

const testPhase = "TIFF_CONVERSION"

// newCallbackService returns a Service on a fresh database with one batch in
// TIFF_CONVERSION and n processing tasks tiff_t000, tiff_t001, ... whose callback
// tokens are token(id).
func newCallbackService(t *testing.T, batchID string, n int) (*Service, *pgxpool.Pool) {
	t.Helper()
	ctx := context.Background()
	pool := dbtest.New(t)
	// An insert-only River client: no job is worked here, so the phase_check
	// a callback enqueues stays visible.
	rc, err := river.NewClient(riverpgxv5.New(pool), &river.Config{})
	require.NoError(t, err)
	q := db.New(pool)
	_, err = q.BatchInsert(ctx, db.BatchInsertParams{ID: batchID, Uploader: "test", QueueMessage: []byte(`{}`)})
	require.NoError(t, err)
	_, err = q.BatchSetPhase(ctx, db.BatchSetPhaseParams{ID: batchID, Phase: testPhase})
	require.NoError(t, err)
	files := make([]db.FileInsertManyParams, n)
	for i := range files {
		name := fmt.Sprintf("f%03d.tif", i)
		files[i] = db.FileInsertManyParams{BatchID: batchID, Ordinal: int32(i), DirectoryPath: "/", R2Key: "staging/" + name,
			LogicalPath: "/" + name, FileName: name, FileSize: 10, ContentType: "image/tiff",
			ProcessingConfig: []byte(`{}`), PreprocessorTags: []string{}}
	}
	_, err = q.FileInsertMany(ctx, files)
	require.NoError(t, err)
	_, err = pool.Exec(ctx, `INSERT INTO tasks (id, batch_id, phase, file_id, status, attempt, machine_id, token_hash, launched_at, deadline)
		SELECT 'tiff_t' || lpad(ordinal::text, 3, '0'), batch_id, $2, id, 'processing', 1, 'm' || ordinal,
			sha256(convert_to('tok-tiff_t' || lpad(ordinal::text, 3, '0'), 'UTF8')), now(), now() + interval '1 hour'
		FROM files WHERE batch_id = $1`, batchID, testPhase)
	require.NoError(t, err)
	logger := slog.New(slog.NewTextHandler(io.Discard, nil))
	return New(pool, rc, &config.Config{}, logger, nil), pool
}

func token(taskID string) string { return "tok-" + taskID }

func success(taskID string) []byte {
	return fmt.Appendf(nil, `{"task_id":%q,"status":"success","output_r2_key":"staging/%s.jpg","output_file_name":"%s.jpg","output_file_size":5}`,
		taskID, taskID, taskID)
}

// TestCallbackGroupOutcomes commits one group that mixes every kind of
// callback, including one whose body the database refuses, and checks that
// each gets its own answer and that the refused one fails alone.
func TestCallbackGroupOutcomes(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	const batch = "GROUP"
	svc, pool := newCallbackService(t, batch, 10)
	_, err := pool.Exec(ctx, `UPDATE tasks SET status = 'failed', ended_by = 'timeout', error = 'Task timed out after 1.0s' WHERE id = 'tiff_t005'`)
	require.NoError(t, err)

	// Valid JSON that jsonb rejects (a lone surrogate): it fails the group's
	// transaction, which is then applied callback by callback.
	poison := []byte(`{"status":"success","output_r2_key":"staging/x.jpg","output_file_name":"\ud800.jpg","output_file_size":5}`)
	group := []*callbackRequest{
		newCallbackRequest(batch, "tiff_t000", token("tiff_t000"), success("tiff_t000")),
		newCallbackRequest(batch, "tiff_t001", token("tiff_t001"), poison),
		newCallbackRequest(batch, "tiff_t000", token("tiff_t000"), success("tiff_t000")), // a repeat in the same group
		newCallbackRequest(batch, "tiff_t002", "wrong", success("tiff_t002")),
		newCallbackRequest(batch, "tiff_t002", "", success("tiff_t002")),
		newCallbackRequest(batch, "tiff_t999", token("tiff_t999"), success("tiff_t999")),
		newCallbackRequest("OTHER", "tiff_t003", token("tiff_t003"), success("tiff_t003")), // the task is not this batch's
		newCallbackRequest(batch, "tiff_t004", token("tiff_t004"), []byte(`{"status":"error","error":"corrupt TIFF"}`)),
		newCallbackRequest(batch, "tiff_t005", token("tiff_t005"), success("tiff_t005")), // timed out already
		newCallbackRequest(batch, "tiff_t006", token("tiff_t006"), []byte(`{"status":"success","output_file_size":5}`)),
		newCallbackRequest(batch, "tiff_t007", token("tiff_t007"), []byte(`{"status":"maybe"}`)),
	}
	// The groups are committed in turn as under load: each group's COMMIT
	// goes with the next one's statements.
	// A group that commits as one (the one above was applied callback by
	// callback once the poison failed it): a stray caller's wrong token or
	// batch does not shadow the worker's callback behind it, and a repeat
	// of an applied callback is a duplicate.
	group2 := []*callbackRequest{
		newCallbackRequest(batch, "tiff_t008", token("tiff_t000"), success("tiff_t008")),
		newCallbackRequest(batch, "tiff_t008", token("tiff_t008"), success("tiff_t008")),
		newCallbackRequest("OTHER", "tiff_t009", token("tiff_t009"), success("tiff_t009")),
		newCallbackRequest(batch, "tiff_t009", token("tiff_t009"), success("tiff_t009")),
		newCallbackRequest(batch, "tiff_t008", token("tiff_t008"), success("tiff_t008")),
	}
	// The worker of the task whose body was refused tries again; its group
	// carries group2's COMMIT.
	group3 := []*callbackRequest{newCallbackRequest(batch, "tiff_t001", token("tiff_t001"), success("tiff_t001"))}
	commitInTurn(svc.callbacks, group, group2, group3)
	group = append(group, group2...)
	group = append(group, group3...)

	type answer struct {
		res CallbackResult
		err error
	}
	got := make([]answer, len(group))
	for i, r := range group {
		<-r.done
		got[i] = answer{r.out, r.err}
	}
	require.NoError(t, got[0].err)
	require.Equal(t, CallbackResult{TaskID: "tiff_t000", Status: "completed"}, got[0].res)
	var inErr *InputError
	require.ErrorAs(t, got[1].err, &inErr)
	require.Contains(t, got[1].err.Error(), "cannot be stored")
	require.NoError(t, got[2].err)
	require.Equal(t, CallbackResult{TaskID: "tiff_t000", Status: "completed", Duplicate: true}, got[2].res)
	require.ErrorIs(t, got[3].err, ErrUnauthorized)
	require.ErrorContains(t, got[3].err, "wrong callback token")
	require.ErrorIs(t, got[4].err, ErrUnauthorized)
	require.ErrorContains(t, got[4].err, "missing bearer token")
	require.ErrorIs(t, got[5].err, ErrNotFound)
	require.ErrorIs(t, got[6].err, ErrNotFound)
	require.NoError(t, got[7].err)
	require.Equal(t, CallbackResult{TaskID: "tiff_t004", Status: "failed"}, got[7].res)
	require.ErrorIs(t, got[8].err, ErrConflict)
	require.ErrorContains(t, got[8].err, "already timed out")
	require.ErrorAs(t, got[9].err, &inErr)
	require.ErrorContains(t, got[9].err, "output_r2_key")
	require.ErrorAs(t, got[10].err, &inErr)
	require.ErrorContains(t, got[10].err, `got "maybe"`)
	require.ErrorIs(t, got[11].err, ErrUnauthorized)
	require.NoError(t, got[12].err)
	require.Equal(t, CallbackResult{TaskID: "tiff_t008", Status: "completed"}, got[12].res)
	require.ErrorIs(t, got[13].err, ErrNotFound)
	require.NoError(t, got[14].err)
	require.Equal(t, CallbackResult{TaskID: "tiff_t009", Status: "completed"}, got[14].res)
	require.NoError(t, got[15].err)
	require.Equal(t, CallbackResult{TaskID: "tiff_t008", Status: "completed", Duplicate: true}, got[15].res)
	require.NoError(t, got[16].err)
	require.Equal(t, CallbackResult{TaskID: "tiff_t001", Status: "completed"}, got[16].res)

	rows, err := pool.Query(ctx, `SELECT id, status, coalesce(error, ''), coalesce(ended_by, '') FROM tasks ORDER BY id`)
	require.NoError(t, err)
	states, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (string, error) {
		var id, status, msg, endedBy string
		err := r.Scan(&id, &status, &msg, &endedBy)
		return fmt.Sprintf("%s %s %q %s", id, status, msg, endedBy), err
	})
	require.NoError(t, err)
	require.Equal(t, []string{
		`tiff_t000 completed "" callback`,
		`tiff_t001 completed "" callback`,
		`tiff_t002 processing "" `,
		`tiff_t003 processing "" `,
		`tiff_t004 failed "corrupt TIFF" callback`,
		`tiff_t005 failed "Task timed out after 1.0s" timeout`,
		`tiff_t006 processing "" `,
		`tiff_t007 processing "" `,
		`tiff_t008 completed "" callback`,
		`tiff_t009 completed "" callback`,
	}, states)

	rows, err = pool.Query(ctx, `SELECT type || ' ' || task_id || ' ' || data::text FROM batch_events WHERE batch_id = $1 ORDER BY task_id, type`, batch)
	require.NoError(t, err)
	events, err := pgx.CollectRows(rows, pgx.RowTo[string])
	require.NoError(t, err)
	require.Equal(t, []string{
		`task.completed tiff_t000 {}`,
		`task.completed tiff_t001 {}`,
		`task.failed tiff_t004 {"error": "corrupt TIFF"}`,
		`callback.rejected tiff_t005 {"reason": "task tiff_t005 already timed out", "reported": "completed"}`,
		`task.completed tiff_t008 {}`,
		`task.completed tiff_t009 {}`,
	}, events)

	var checks int
	require.NoError(t, pool.QueryRow(ctx, `SELECT count(*) FROM river_job WHERE kind = 'phase_check' AND args->>'batch_id' = $1`, batch).Scan(&checks))
	require.Equal(t, 1, checks, "one fan-in check for the phase")
}

// commitInTurn commits groups one after another as commitLoop does under
// load: each group's COMMIT goes with the next group's statements.
func commitInTurn(g *callbackGroups, groups ...[]*callbackRequest) {
	var open *openGroup
	for _, group := range groups {
		open = g.run(open, group)
	}
	if open != nil {
		g.commitOpen(open)
	}
}

// TestCallbackCommitRidesWithNextGroup follows a group whose COMMIT is
// sent with the next group's statements: it is answered only once its
// change can be seen by others, and the next group's change is not seen
// before its own commit.
func TestCallbackCommitRidesWithNextGroup(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	const batch = "RIDE"
	svc, pool := newCallbackService(t, batch, 3)
	status := func(id string) string {
		var s string
		require.NoError(t, pool.QueryRow(ctx, `SELECT status FROM tasks WHERE id = $1`, id).Scan(&s))
		return s
	}
	answered := func(group []*callbackRequest) bool {
		select {
		case <-group[0].done:
			return true
		default:
			return false
		}
	}
	first := []*callbackRequest{newCallbackRequest(batch, "tiff_t000", token("tiff_t000"), success("tiff_t000"))}
	second := []*callbackRequest{newCallbackRequest(batch, "tiff_t001", token("tiff_t001"), success("tiff_t001"))}

	open := svc.callbacks.run(nil, first)
	require.NotNil(t, open)
	defer func() {
		if t.Failed() { // let the database go
			open.tx.Rollback(ctx) //nolint:errcheck // the test has failed already
			open.release()
		}
	}()
	require.False(t, answered(first), "answered before its commit")
	require.Equal(t, "processing", status("tiff_t000"))

	open = svc.callbacks.run(open, second)
	require.NotNil(t, open)
	require.True(t, answered(first), "not answered once its COMMIT was done")
	require.NoError(t, first[0].err)
	require.Equal(t, "completed", status("tiff_t000"))
	require.False(t, answered(second))
	require.Equal(t, "processing", status("tiff_t001"))

	svc.callbacks.commitOpen(open)
	require.True(t, answered(second))
	require.NoError(t, second[0].err)
	require.Equal(t, "completed", status("tiff_t001"))
	require.Equal(t, "processing", status("tiff_t002"))
}

// TestCallbackAnsweredAfterCommit: sendGroup reports the previous group's
// COMMIT only once others can see its change.
func TestCallbackAnsweredAfterCommit(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	const batch = "AFTER"
	svc, pool := newCallbackService(t, batch, 2)
	open := svc.callbacks.run(nil, []*callbackRequest{newCallbackRequest(batch, "tiff_t000", token("tiff_t000"), success("tiff_t000"))})
	require.NotNil(t, open)
	defer open.release()
	next := newCallbackRequest(batch, "tiff_t001", token("tiff_t001"), success("tiff_t001"))
	params := db.TaskCompleteManyParams{IDs: []string{next.taskID}, BatchIDs: []string{batch}, Statuses: []string{string(next.status)},
		Results: []string{string(next.result)}, Errors: []string{""}, TokenHashes: [][]byte{next.tokenHash}}
	var seen string
	calls := 0
	applied, err := sendGroup(ctx, open.conn.Conn(), params, []string{batch}, func(err error) {
		calls++
		require.NoError(t, err)
		require.NoError(t, pool.QueryRow(ctx, `SELECT status FROM tasks WHERE id = 'tiff_t000'`).Scan(&seen))
	})
	require.NoError(t, err)
	require.Equal(t, 1, calls)
	require.Equal(t, "completed", seen, "the previous group was reported before its commit")
	require.Len(t, applied.ended, 1)
	require.NoError(t, (&pipelinedTx{conn: open.conn.Conn()}).Commit(ctx))
}

// TestCallbackGroupSurvivesDeadConnection: the connection an open group
// leaves dies before the next group's round trip. The open group is
// answered with the error (its change is gone); the next group runs again
// on a connection of its own.
func TestCallbackGroupSurvivesDeadConnection(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	const batch = "DEAD"
	svc, pool := newCallbackService(t, batch, 2)
	first := []*callbackRequest{newCallbackRequest(batch, "tiff_t000", token("tiff_t000"), success("tiff_t000"))}
	second := []*callbackRequest{newCallbackRequest(batch, "tiff_t001", token("tiff_t001"), success("tiff_t001"))}
	open := svc.callbacks.run(nil, first)
	require.NotNil(t, open)
	var killed bool
	require.NoError(t, pool.QueryRow(ctx, `SELECT pg_terminate_backend($1)`, open.conn.Conn().PgConn().PID()).Scan(&killed))
	require.True(t, killed)

	open = svc.callbacks.run(open, second)
	<-first[0].done
	require.Error(t, first[0].err)
	require.NotNil(t, open, "the next group failed with its predecessor's connection")
	svc.callbacks.commitOpen(open)
	<-second[0].done
	require.NoError(t, second[0].err)
	require.Equal(t, []string{"tiff_t000 processing", "tiff_t001 completed"}, taskStatuses(t, pool))
}

// TestCallbackFailedCommitSparesNextGroup fails a group's COMMIT (a
// deferred trigger refuses it) while it rides with the next group's
// statements: the group is answered with the error and its change is
// gone, while the next group is applied and commits.
func TestCallbackFailedCommitSparesNextGroup(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	const batch = "REFUSE"
	svc, pool := newCallbackService(t, batch, 2)
	_, err := pool.Exec(ctx, `
		CREATE FUNCTION refuse() RETURNS trigger LANGUAGE plpgsql AS $$
		BEGIN RAISE EXCEPTION 'refused at commit'; END $$;
		CREATE CONSTRAINT TRIGGER refuse AFTER UPDATE ON tasks DEFERRABLE INITIALLY DEFERRED
			FOR EACH ROW WHEN (NEW.id = 'tiff_t000') EXECUTE FUNCTION refuse()`)
	require.NoError(t, err)
	first := []*callbackRequest{newCallbackRequest(batch, "tiff_t000", token("tiff_t000"), success("tiff_t000"))}
	second := []*callbackRequest{newCallbackRequest(batch, "tiff_t001", token("tiff_t001"), success("tiff_t001"))}
	commitInTurn(svc.callbacks, first, second)

	<-first[0].done
	require.ErrorContains(t, first[0].err, "refused at commit")
	<-second[0].done
	require.NoError(t, second[0].err)
	require.Equal(t, []string{"tiff_t000 processing", "tiff_t001 completed"}, taskStatuses(t, pool))
}

// taskStatuses lists every task as "id status", by id.
func taskStatuses(t *testing.T, pool *pgxpool.Pool) []string {
	t.Helper()
	rows, err := pool.Query(context.Background(), `SELECT id || ' ' || status FROM tasks ORDER BY id`)
	require.NoError(t, err)
	states, err := pgx.CollectRows(rows, pgx.RowTo[string])
	require.NoError(t, err)
	return states
}

// TestCallbacksConcurrent posts many callbacks at once, each task's twice:
// every task ends exactly once, with one event, and every request is
// answered 200 (the second of each pair as a duplicate).
func TestCallbacksConcurrent(t *testing.T) {
	t.Parallel()
	const batch, n = "MANY", 300
	svc, pool := newCallbackService(t, batch, n)
	ctx := context.Background()
	var wg sync.WaitGroup
	results := make([]CallbackResult, 2*n)
	errs := make([]error, 2*n)
	for i := range 2 * n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			id := fmt.Sprintf("tiff_t%03d", i%n)
			results[i], errs[i] = svc.Callback(ctx, batch, id, token(id), success(id))
		}()
	}
	wg.Wait()
	dups := 0
	for i := range 2 * n {
		require.NoError(t, errs[i])
		require.Equal(t, "completed", results[i].Status)
		if results[i].Duplicate {
			dups++
		}
	}
	require.Equal(t, n, dups, "one of each pair is the repeat")
	var completed, events, checks int
	require.NoError(t, pool.QueryRow(ctx, `SELECT
		(SELECT count(*) FROM tasks WHERE status = 'completed' AND ended_by = 'callback'),
		(SELECT count(*) FROM batch_events WHERE type = 'task.completed'),
		(SELECT count(*) FROM river_job WHERE kind = 'phase_check')`).Scan(&completed, &events, &checks))
	require.Equal(t, n, completed)
	require.Equal(t, n, events)
	require.Equal(t, 1, checks)
}
