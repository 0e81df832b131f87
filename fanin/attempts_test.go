package fanin

import (
	"context"
	"fmt"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/stretchr/testify/require"

	"github.com/arke-institute/orchestrator/internal/harness/dbtest"
	"github.com/arke-institute/orchestrator/phases"
)

// transientError is taskID's worker reporting an error it calls
// retryable, with the task's token.
func transientError(batchID, taskID string) Callback {
	cb := callback(batchID, taskID, token(taskID), phases.TaskFailed, `{"status":"error","error":"S3 answered 503","retryable":true}`, "")
	cb.Error, cb.Retryable = "S3 answered 503", true
	return cb
}

// applyOne applies callbacks one group at a time and returns their
// outcomes.
func applyOne(t *testing.T, c *Committer, cbs ...Callback) []Outcome {
	t.Helper()
	out := make([]Outcome, len(cbs))
	for i, cb := range cbs {
		group := c.requests(cb)
		commitInTurn(c, group)
		<-group[0].done
		require.NoError(t, group[0].err)
		out[i] = group[0].out
	}
	return out
}

// taskRow is a task's state as the attempt rules see it.
func taskRow(t *testing.T, c *Committer, id string) string {
	t.Helper()
	var status, endedBy string
	var failures int
	require.NoError(t, c.pool.QueryRow(context.Background(),
		`SELECT status, coalesce(ended_by, ''), failures FROM tasks WHERE id = $1`, id).Scan(&status, &endedBy, &failures))
	return fmt.Sprintf("%s %s %d", status, endedBy, failures)
}

// TestRetryableErrorRetries: an error the worker calls retryable sends the
// task back to pending (to be retried on a fresh machine, its launcher
// enqueued) while it has attempts left; a repeat of it is a harmless
// duplicate; in the last attempt it fails the task. A permanent error
// fails it at once, whatever its attempts.
func TestRetryableErrorRetries(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	const batch = "RETRY"
	pool := dbtest.New(t)
	rc, err := river.NewClient(riverpgxv5.New(pool), &river.Config{})
	require.NoError(t, err)
	dbtest.SeedProcessingTasks(t, pool, batch, 3)
	heard := &requeueRecorder{}
	c := New(Config{Pool: pool, River: rc, TaskMaxAttempts: 3, Executors: heard})
	// tiff_t001 is in its last attempt.
	_, err = pool.Exec(ctx, `UPDATE tasks SET failures = 2 WHERE id = 'tiff_t001'`)
	require.NoError(t, err)

	got := applyOne(t, c,
		transientError(batch, "tiff_t000"),
		transientError(batch, "tiff_t000"), // the worker's repeat
		transientError(batch, "tiff_t001"),
		callback(batch, "tiff_t002", token("tiff_t002"), phases.TaskFailed, `{"status":"error","error":"corrupt TIFF","retryable":false}`, ""),
	)
	require.Equal(t, []Outcome{
		{Status: phases.TaskPending},
		{Status: phases.TaskPending, Duplicate: true},
		{Status: phases.TaskFailed},
		{Status: phases.TaskFailed},
	}, got)
	require.Equal(t, "pending retry 1", taskRow(t, c, "tiff_t000"))
	require.Equal(t, "failed callback 3", taskRow(t, c, "tiff_t001"))
	require.Equal(t, "failed callback 0", taskRow(t, c, "tiff_t002"))

	require.Equal(t, [][]PhaseRef{{{BatchID: batch, Phase: "TIFF_CONVERSION"}}}, heard.refs, "the phase's executor hears of the retried task")
	var retrying int
	require.NoError(t, pool.QueryRow(ctx, `SELECT count(*) FROM batch_events WHERE type = 'task.retrying' AND task_id = 'tiff_t000'`).Scan(&retrying))
	require.Equal(t, 1, retrying)
}

// TestLateSuccessIsTaken: a success that arrives after its attempt timed
// out is taken while the task has no success and its phase is open: the
// task waits for its machine's retirement, its last attempt timed out in
// a phase not yet over, or it was launched again (the earlier attempt
// overtakes the later one, whose callbacks are then refused). Once the
// phase is over, a late success is refused (409) and recorded.
func TestLateSuccessIsTaken(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	const batch = "LATE"
	c, pool := newCommitter(t, batch, 5)
	_, err := pool.Exec(ctx, `UPDATE tasks SET status = 'pending', ended_by = 'retry', failures = 1 WHERE id = 'tiff_t000';
		UPDATE tasks SET status = 'failed', ended_by = 'timeout', failures = 3 WHERE id IN ('tiff_t001', 'tiff_t003');
		UPDATE tasks SET superseded_token_hashes = ARRAY[token_hash], token_hash = sha256('new token'), attempt = 2,
			machine_id = 'later-machine' WHERE id IN ('tiff_t002', 'tiff_t004')`)
	require.NoError(t, err)

	got := applyOne(t, c, success(batch, "tiff_t000"), success(batch, "tiff_t001"), success(batch, "tiff_t002"))
	require.Equal(t, []Outcome{
		{Status: phases.TaskCompleted},
		{Status: phases.TaskCompleted},
		{Status: phases.TaskCompleted},
	}, got)
	require.Equal(t, "completed callback 1", taskRow(t, c, "tiff_t000"))
	require.Equal(t, "completed callback 3", taskRow(t, c, "tiff_t001"))
	require.Equal(t, "completed callback 0", taskRow(t, c, "tiff_t002"))

	// The later attempt's callback is refused; the earlier one's repeat
	// is a repeat.
	later := withToken(success(batch, "tiff_t002"), "new token")
	got = applyOne(t, c, later, success(batch, "tiff_t002"))
	require.Equal(t, []Outcome{
		{Refusal: TaskEnded, Reason: "task tiff_t002 was completed by another attempt"},
		{Status: phases.TaskCompleted, Duplicate: true},
	}, got)

	// The phase ends: tiff_t003's and tiff_t004's successes are now too late.
	_, err = pool.Exec(ctx, `UPDATE batches SET status = 'IMAGE_PROCESSING' WHERE id = $1`, batch)
	require.NoError(t, err)
	got = applyOne(t, c, success(batch, "tiff_t003"), success(batch, "tiff_t004"))
	require.Equal(t, []Outcome{
		{Refusal: TaskEnded, Reason: "task tiff_t003 already timed out"},
		{Refusal: TaskEnded, Reason: "task tiff_t004 already timed out: this attempt was superseded by a new one"},
	}, got)
	require.Equal(t, "failed timeout 3", taskRow(t, c, "tiff_t003"))
	require.Equal(t, "processing  0", taskRow(t, c, "tiff_t004"))

	var rejected []string
	rows, err := pool.Query(ctx, `SELECT task_id FROM batch_events WHERE type = 'callback.rejected' ORDER BY task_id`)
	require.NoError(t, err)
	rejected, err = pgx.CollectRows(rows, pgx.RowTo[string])
	require.NoError(t, err)
	require.Equal(t, []string{"tiff_t002", "tiff_t003", "tiff_t004"}, rejected)
}

// requeueRecorder records what executors hear of retried tasks.
type requeueRecorder struct{ refs [][]PhaseRef }

func (r *requeueRecorder) Overtaken(context.Context, pgx.Tx, *river.Client[pgx.Tx], []Overtaken) error {
	return nil
}

func (r *requeueRecorder) Requeued(_ context.Context, _ pgx.Tx, _ *river.Client[pgx.Tx], refs []PhaseRef) error {
	r.refs = append(r.refs, refs)
	return nil
}
