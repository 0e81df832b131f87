package fanin

import (
	"context"
	"crypto/sha256"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/stretchr/testify/require"

	"github.com/arke-institute/orchestrator/db"
	"github.com/arke-institute/orchestrator/internal/harness/dbtest"
	"github.com/arke-institute/orchestrator/phases"
)

// newCommitter returns a Committer on a fresh database with one batch in
// TIFF_CONVERSION and n processing tasks tiff_t000, tiff_t001, ... whose
// callback tokens are token(id).
func newCommitter(t *testing.T, batchID string, n int) (*Committer, *pgxpool.Pool) {
	t.Helper()
	pool := dbtest.New(t)
	// An insert-only River client: no job is worked here, so the phase_check
	// a group enqueues stays visible.
	rc, err := river.NewClient(riverpgxv5.New(pool), &river.Config{})
	require.NoError(t, err)
	dbtest.SeedProcessingTasks(t, pool, batchID, n)
	return New(Config{Pool: pool, River: rc}), pool
}

func token(taskID string) string { return dbtest.Token(taskID) }

// callback is a callback for taskID presenting tok ("" for none) with
// status and body; invalid is what the caller found wrong with the body.
func callback(batchID, taskID, tok string, status phases.TaskStatus, body, invalid string) Callback {
	cb := withToken(Callback{BatchID: batchID, TaskID: taskID, Status: status, Result: []byte(body), Invalid: invalid}, tok)
	if status == phases.TaskFailed {
		cb.Error = "corrupt TIFF"
	}
	return cb
}

// success is taskID's worker reporting a valid TIFF conversion, with the
// task's token.
func success(batchID, taskID string) Callback {
	return callback(batchID, taskID, token(taskID), phases.TaskCompleted,
		fmt.Sprintf(`{"status":"success","output_r2_key":"staging/%s/%s.jpg","output_file_name":"%s.jpg","output_file_size":5}`, batchID, taskID, taskID), "")
}

// withToken is cb presenting tok instead ("" for none).
func withToken(cb Callback, tok string) Callback {
	cb.TokenHash = nil
	if tok != "" {
		sum := sha256.Sum256([]byte(tok))
		cb.TokenHash = sum[:]
	}
	return cb
}

// requests prepares callbacks as c.Apply does.
func (c *Committer) requests(cbs ...Callback) []*request {
	group := make([]*request, len(cbs))
	for i, cb := range cbs {
		group[i] = c.newRequest(cb)
	}
	return group
}

// commitInTurn commits groups one after another as commitLoop does under
// load: each group's COMMIT goes with the next group's statements.
func commitInTurn(c *Committer, groups ...[]*request) {
	var open *openGroup
	for _, group := range groups {
		open = c.run(open, group)
	}
	if open != nil {
		c.commitOpen(open)
	}
}

// TestGroupOutcomes commits groups that mix every kind of callback,
// including one whose body the database refuses, and checks that each gets
// its own outcome and that the refused one fails alone.
func TestGroupOutcomes(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	const batch = "GROUP"
	c, pool := newCommitter(t, batch, 10)
	_, err := pool.Exec(ctx, `UPDATE tasks SET status = 'failed', ended_by = 'timeout', error = 'Task timed out after 1.0s' WHERE id = 'tiff_t005'`)
	require.NoError(t, err)
	// The phase has ended since: a late success of its last attempt is too
	// late (attempts_test.go has the one that is not).
	_, err = pool.Exec(ctx, `UPDATE batches SET status = 'IMAGE_PROCESSING' WHERE id = $1`, batch)
	require.NoError(t, err)

	// Valid JSON that jsonb rejects (a lone surrogate): it fails the group's
	// transaction, which is then applied callback by callback.
	poison := `{"status":"success","output_r2_key":"staging/GROUP/x.jpg","output_file_name":"\ud800.jpg","output_file_size":5}`
	group := c.requests(
		success(batch, "tiff_t000"),
		callback(batch, "tiff_t001", token("tiff_t001"), phases.TaskCompleted, poison, ""),
		success(batch, "tiff_t000"), // a repeat in the same group
		withToken(success(batch, "tiff_t002"), "wrong"),
		withToken(success(batch, "tiff_t002"), ""),
		success(batch, "tiff_t999"),
		success("OTHER", "tiff_t003"), // the task is not this batch's
		callback(batch, "tiff_t004", token("tiff_t004"), phases.TaskFailed, `{"status":"error","error":"corrupt TIFF"}`, ""),
		success(batch, "tiff_t005"), // timed out already
		callback(batch, "tiff_t006", token("tiff_t006"), phases.TaskCompleted, `{"status":"success","output_file_size":5}`, ""),
		callback(batch, "tiff_t007", token("tiff_t007"), "", "", `status must be "success" or "error", got "maybe"`),
	)
	// A group that commits as one (the one above was applied callback by
	// callback once the poison failed it): a stray caller's wrong token or
	// batch does not shadow the worker's callback behind it, and a repeat
	// of an applied callback is a duplicate.
	group2 := c.requests(
		withToken(success(batch, "tiff_t008"), token("tiff_t000")),
		success(batch, "tiff_t008"),
		success("OTHER", "tiff_t009"),
		success(batch, "tiff_t009"),
		success(batch, "tiff_t008"),
	)
	// The worker of the task whose body was refused tries again; its group
	// carries group2's COMMIT.
	group3 := c.requests(success(batch, "tiff_t001"))
	commitInTurn(c, group, group2, group3)
	group = append(group, group2...)
	group = append(group, group3...)

	got := make([]Outcome, len(group))
	for i, r := range group {
		<-r.done
		require.NoError(t, r.err, "callback %d", i)
		got[i] = r.out
	}
	// Reasons worded by the database and the phase: checked in part.
	for i, part := range map[int]string{1: "the body cannot be stored: ", 9: "output_r2_key"} {
		require.Contains(t, got[i].Reason, part)
		got[i].Reason = ""
	}
	require.Equal(t, []Outcome{
		{Status: phases.TaskCompleted},
		{Refusal: InvalidBody},
		{Status: phases.TaskCompleted, Duplicate: true},
		{Refusal: BadToken, Reason: "wrong callback token for task tiff_t002"},
		{Refusal: BadToken, Reason: "missing bearer token"},
		{Refusal: UnknownTask, Reason: "task tiff_t999 of batch GROUP"},
		{Refusal: UnknownTask, Reason: "task tiff_t003 of batch OTHER"},
		{Status: phases.TaskFailed},
		{Refusal: TaskEnded, Reason: "task tiff_t005 already timed out"},
		{Refusal: InvalidBody},
		{Refusal: InvalidBody, Reason: `status must be "success" or "error", got "maybe"`},

		{Refusal: BadToken, Reason: "wrong callback token for task tiff_t008"},
		{Status: phases.TaskCompleted},
		{Refusal: UnknownTask, Reason: "task tiff_t009 of batch OTHER"},
		{Status: phases.TaskCompleted},
		{Status: phases.TaskCompleted, Duplicate: true},

		{Status: phases.TaskCompleted},
	}, got)

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

// TestCommitRidesWithNextGroup follows a group whose COMMIT is sent with
// the next group's statements: it is answered only once its change can be
// seen by others, and the next group's change is not seen before its own
// commit.
func TestCommitRidesWithNextGroup(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	const batch = "RIDE"
	c, pool := newCommitter(t, batch, 3)
	status := func(id string) string {
		var s string
		require.NoError(t, pool.QueryRow(ctx, `SELECT status FROM tasks WHERE id = $1`, id).Scan(&s))
		return s
	}
	answered := func(group []*request) bool {
		select {
		case <-group[0].done:
			return true
		default:
			return false
		}
	}
	first := c.requests(success(batch, "tiff_t000"))
	second := c.requests(success(batch, "tiff_t001"))

	open := c.run(nil, first)
	require.NotNil(t, open)
	defer func() {
		if t.Failed() { // let the database go
			open.tx.Rollback(ctx) //nolint:errcheck // the test has failed already
			open.release()
		}
	}()
	require.False(t, answered(first), "answered before its commit")
	require.Equal(t, "processing", status("tiff_t000"))

	open = c.run(open, second)
	require.NotNil(t, open)
	require.True(t, answered(first), "not answered once its COMMIT was done")
	require.NoError(t, first[0].err)
	require.Equal(t, "completed", status("tiff_t000"))
	require.False(t, answered(second))
	require.Equal(t, "processing", status("tiff_t001"))

	c.commitOpen(open)
	require.True(t, answered(second))
	require.NoError(t, second[0].err)
	require.Equal(t, "completed", status("tiff_t001"))
	require.Equal(t, "processing", status("tiff_t002"))
}

// TestAnsweredAfterCommit: sendGroup reports the previous group's COMMIT
// only once others can see its change.
func TestAnsweredAfterCommit(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	const batch = "AFTER"
	c, pool := newCommitter(t, batch, 2)
	open := c.run(nil, c.requests(success(batch, "tiff_t000")))
	require.NotNil(t, open)
	defer open.release()
	next := success(batch, "tiff_t001")
	params := db.TaskCompleteManyParams{IDs: []string{next.TaskID}, BatchIDs: []string{batch}, Statuses: []string{string(next.Status)},
		Results: []string{string(next.Result)}, Errors: []string{""}, TokenHashes: [][]byte{next.TokenHash}}
	var seen string
	calls := 0
	applied, err := sendGroup(ctx, open.conn.Conn(), params, []PhaseRef{{BatchID: batch, Phase: "TIFF_CONVERSION"}}, func(err error) {
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

// TestGroupSurvivesDeadConnection: the connection an open group leaves
// dies before the next group's round trip. The open group is answered with
// the error (its change is gone); the next group runs again on a
// connection of its own.
func TestGroupSurvivesDeadConnection(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	const batch = "DEAD"
	c, pool := newCommitter(t, batch, 2)
	first := c.requests(success(batch, "tiff_t000"))
	second := c.requests(success(batch, "tiff_t001"))
	open := c.run(nil, first)
	require.NotNil(t, open)
	var killed bool
	require.NoError(t, pool.QueryRow(ctx, `SELECT pg_terminate_backend($1)`, open.conn.Conn().PgConn().PID()).Scan(&killed))
	require.True(t, killed)

	open = c.run(open, second)
	<-first[0].done
	require.Error(t, first[0].err)
	require.NotNil(t, open, "the next group failed with its predecessor's connection")
	c.commitOpen(open)
	<-second[0].done
	require.NoError(t, second[0].err)
	require.Equal(t, []string{"tiff_t000 processing", "tiff_t001 completed"}, taskStatuses(t, pool))
}

// TestFailedCommitSparesNextGroup fails a group's COMMIT (a deferred
// trigger refuses it) while it rides with the next group's statements: the
// group is answered with the error and its change is gone, while the next
// group is applied and commits.
func TestFailedCommitSparesNextGroup(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	const batch = "REFUSE"
	c, pool := newCommitter(t, batch, 2)
	_, err := pool.Exec(ctx, `
		CREATE FUNCTION refuse() RETURNS trigger LANGUAGE plpgsql AS $$
		BEGIN RAISE EXCEPTION 'refused at commit'; END $$;
		CREATE CONSTRAINT TRIGGER refuse AFTER UPDATE ON tasks DEFERRABLE INITIALLY DEFERRED
			FOR EACH ROW WHEN (NEW.id = 'tiff_t000') EXECUTE FUNCTION refuse()`)
	require.NoError(t, err)
	first := c.requests(success(batch, "tiff_t000"))
	second := c.requests(success(batch, "tiff_t001"))
	commitInTurn(c, first, second)

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

// TestApplyConcurrent applies many callbacks at once, each task's twice:
// every task ends exactly once, with one event, and every callback is
// applied or a duplicate (the second of each pair).
func TestApplyConcurrent(t *testing.T) {
	t.Parallel()
	const batch, n = "MANY", 300
	c, pool := newCommitter(t, batch, n)
	ctx := context.Background()
	var wg sync.WaitGroup
	outcomes := make([]Outcome, 2*n)
	errs := make([]error, 2*n)
	for i := range 2 * n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			outcomes[i], errs[i] = c.Apply(ctx, success(batch, fmt.Sprintf("tiff_t%03d", i%n)))
		}()
	}
	wg.Wait()
	dups := 0
	for i := range 2 * n {
		require.NoError(t, errs[i])
		require.Equal(t, NotRefused, outcomes[i].Refusal)
		require.Equal(t, phases.TaskCompleted, outcomes[i].Status)
		if outcomes[i].Duplicate {
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

// TestQueueIsBounded: while a group cannot commit (the batch's fan-in lock
// is held exclusively), callbacks queue up to MaxQueued; one more is
// refused with ErrBusy at once, and the queued ones are applied once the
// lock is let go.
func TestQueueIsBounded(t *testing.T) {
	t.Parallel()
	const batch = "BUSY"
	c, pool := newCommitter(t, batch, 4)
	c.maxQueued = 2
	ctx := context.Background()
	tx, err := pool.Begin(ctx)
	require.NoError(t, err)
	_, err = tx.Exec(ctx, `SELECT pg_advisory_xact_lock(batch_lock_key($1))`, batch)
	require.NoError(t, err)

	results := make(chan error, 3)
	apply := func(task string) {
		go func() {
			_, err := c.Apply(ctx, success(batch, task))
			results <- err
		}()
	}
	pending := func() int { c.mu.Lock(); defer c.mu.Unlock(); return len(c.pending) }
	apply("tiff_t000") // taken by a group, which waits for the lock
	require.Eventually(t, func() bool { c.mu.Lock(); defer c.mu.Unlock(); return len(c.pending) == 0 && c.active == 1 }, 10*time.Second, 5*time.Millisecond)
	apply("tiff_t001")
	apply("tiff_t002")
	require.Eventually(t, func() bool { return pending() == 2 }, 10*time.Second, 5*time.Millisecond)
	_, err = c.Apply(ctx, success(batch, "tiff_t003"))
	require.ErrorIs(t, err, ErrBusy)

	require.NoError(t, tx.Rollback(ctx))
	for range 3 {
		require.NoError(t, <-results)
	}
}

// TestOutputsAreCapped: a success listing more output files than
// MAX_OUTPUTS_PER_TASK (4001 unless configured) is refused with a reason
// naming the setting and its value, and leaves its task processing; the
// worker then reports the refusal as its task's error, which fails the
// task. A result within the cap is applied.
func TestOutputsAreCapped(t *testing.T) {
	t.Parallel()
	const batch = "CAP"
	ctx := context.Background()
	c, pool := newCommitter(t, batch, 4)
	capped := New(Config{Pool: pool, River: c.river, MaxOutputs: 2})
	pages := func(taskID string, n int) Callback {
		outputs := make([]string, n)
		for i := range outputs {
			outputs[i] = fmt.Sprintf(`{"r2_key":"staging/%s/%s-%d.jpg","file_name":"%s-%d.jpg","file_size":1,"page":%d}`, batch, taskID, i+1, taskID, i+1, i+1)
		}
		return callback(batch, taskID, token(taskID), phases.TaskCompleted, `{"status":"success","outputs":[`+strings.Join(outputs, ",")+`]}`, "")
	}
	status := func(taskID string) string {
		var s string
		require.NoError(t, pool.QueryRow(ctx, `SELECT status FROM tasks WHERE id = $1`, taskID).Scan(&s))
		return s
	}

	for _, tt := range []struct {
		name    string
		c       *Committer
		cb      Callback
		refusal string // "" when applied
	}{
		{"DefaultCapRefuses", c, pages("tiff_t000", phases.DefaultMaxOutputs+1), "the result lists 4002 output files, more than MAX_OUTPUTS_PER_TASK (4001)"},
		{"WithinDefaultCap", c, pages("tiff_t001", 3), ""},
		{"ConfiguredCapRefuses", capped, pages("tiff_t002", 3), "the result lists 3 output files, more than MAX_OUTPUTS_PER_TASK (2)"},
		{"WithinConfiguredCap", capped, pages("tiff_t003", 2), ""},
	} {
		out, err := tt.c.Apply(ctx, tt.cb)
		require.NoError(t, err, tt.name)
		if tt.refusal == "" {
			require.Equal(t, Outcome{Status: phases.TaskCompleted}, out, tt.name)
			require.Equal(t, "completed", status(tt.cb.TaskID), tt.name)
			continue
		}
		require.Equal(t, Outcome{Refusal: InvalidBody, Reason: tt.refusal}, out, tt.name)
		require.Equal(t, "processing", status(tt.cb.TaskID), tt.name)
	}

	// The worker reports the refusal (worker.Run): the task fails with it.
	refused := callback(batch, "tiff_t000", token("tiff_t000"), phases.TaskFailed, "", "")
	refused.Error = "orchestrator refused the worker's result: callback answered 400 Bad Request: the result lists 4002 output files, more than MAX_OUTPUTS_PER_TASK (4001)"
	refused.Result = []byte(fmt.Sprintf(`{"status":"error","error":%q}`, refused.Error))
	out, err := c.Apply(ctx, refused)
	require.NoError(t, err)
	require.Equal(t, Outcome{Status: phases.TaskFailed}, out)
	var msg string
	require.NoError(t, pool.QueryRow(ctx, `SELECT status || ': ' || error FROM tasks WHERE id = 'tiff_t000'`).Scan(&msg))
	require.Equal(t, "failed: "+refused.Error, msg)
}
