package service

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/stretchr/testify/require"

	"github.com/arke-institute/orchestrator/config"
	"github.com/arke-institute/orchestrator/internal/dbtest"
	"github.com/arke-institute/orchestrator/jobs"
)

// newCallbackService returns a Service on a fresh database with one batch in
// TIFF_CONVERSION and n processing tasks tiff_t000, tiff_t001, ... whose callback
// tokens are token(id).
func newCallbackService(t *testing.T, batchID string, n int) (*Service, *pgxpool.Pool) {
	t.Helper()
	pool := dbtest.New(t)
	// An insert-only River client: no job is worked here, so the phase_check
	// a callback enqueues stays visible.
	rc, err := river.NewClient(riverpgxv5.New(pool), &river.Config{})
	require.NoError(t, err)
	dbtest.SeedProcessingTasks(t, pool, batchID, n)
	logger := slog.New(slog.NewTextHandler(io.Discard, nil))
	return New(pool, rc, &jobs.Executors{}, &config.Config{}, nil, logger, nil), pool
}

func token(taskID string) string { return dbtest.Token(taskID) }

func success(taskID string) []byte {
	return fmt.Appendf(nil, `{"task_id":%q,"status":"success","output_r2_key":"staging/ANSWERS/%s.jpg","output_file_name":"%s.jpg","output_file_size":5}`,
		taskID, taskID, taskID)
}

// TestCallbackAnswers posts one callback of each kind, in turn, and checks
// the error (and so the status code) each gets. The outcomes themselves
// are callbackcommit's tests; these are their translation.
func TestCallbackAnswers(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	const batch = "ANSWERS"
	svc, pool := newCallbackService(t, batch, 6)
	_, err := pool.Exec(ctx, `UPDATE tasks SET status = 'failed', ended_by = 'timeout', error = 'Task timed out after 1.0s' WHERE id = 'tiff_t003'`)
	require.NoError(t, err)
	// Its phase is over: the timed-out task's late success is refused.
	_, err = pool.Exec(ctx, `UPDATE batches SET status = 'IMAGE_PROCESSING' WHERE id = $1`, batch)
	require.NoError(t, err)
	// Valid JSON that jsonb rejects (a lone surrogate).
	poison := []byte(`{"status":"success","output_r2_key":"staging/ANSWERS/x.jpg","output_file_name":"\ud800.jpg","output_file_size":5}`)

	var inputErr *InputError
	for _, tc := range []struct {
		name         string
		taskID, tok  string
		body         []byte
		want         CallbackResult
		wantIs       error // or wantAs
		wantAs       any
		wantErrorMsg string // the whole message, or with wantAs its start
	}{
		{name: "Applied", taskID: "tiff_t000", tok: token("tiff_t000"), body: success("tiff_t000"),
			want: CallbackResult{TaskID: "tiff_t000", Status: "completed"}},
		{name: "Repeat", taskID: "tiff_t000", tok: token("tiff_t000"), body: success("tiff_t000"),
			want: CallbackResult{TaskID: "tiff_t000", Status: "completed", Duplicate: true}},
		{name: "ErrorCallback", taskID: "tiff_t001", tok: token("tiff_t001"), body: []byte(`{"status":"error","error":"corrupt TIFF"}`),
			want: CallbackResult{TaskID: "tiff_t001", Status: "failed"}},
		{name: "UnknownTask", taskID: "tiff_t999", tok: token("tiff_t999"), body: success("tiff_t999"),
			wantIs: ErrNotFound, wantErrorMsg: "task tiff_t999 of batch ANSWERS: not found"},
		{name: "MissingToken", taskID: "tiff_t002", body: success("tiff_t002"),
			wantIs: ErrUnauthorized, wantErrorMsg: "unauthorized: missing bearer token"},
		{name: "WrongToken", taskID: "tiff_t002", tok: "wrong", body: success("tiff_t002"),
			wantIs: ErrUnauthorized, wantErrorMsg: "unauthorized: wrong callback token for task tiff_t002"},
		{name: "UnknownStatus", taskID: "tiff_t002", tok: token("tiff_t002"), body: []byte(`{"status":"maybe"}`),
			wantAs: &inputErr, wantErrorMsg: `invalid callback: status must be "success" or "error", got "maybe"`},
		{name: "OtherTaskID", taskID: "tiff_t002", tok: token("tiff_t002"), body: success("tiff_t001"),
			wantAs: &inputErr, wantErrorMsg: `invalid callback: task_id "tiff_t001" does not match the URL's "tiff_t002"`},
		{name: "NotAnObject", taskID: "tiff_t002", tok: token("tiff_t002"), body: []byte(`[]`),
			wantAs: &inputErr, wantErrorMsg: "invalid callback: body must be a JSON object"},
		{name: "ResultUnfitForPhase", taskID: "tiff_t002", tok: token("tiff_t002"), body: []byte(`{"status":"success","output_file_size":5}`),
			wantAs: &inputErr, wantErrorMsg: "invalid callback: "},
		{name: "Unstorable", taskID: "tiff_t004", tok: token("tiff_t004"), body: poison,
			wantAs: &inputErr, wantErrorMsg: "invalid callback: the body cannot be stored: "},
		{name: "TimedOut", taskID: "tiff_t003", tok: token("tiff_t003"), body: success("tiff_t003"),
			wantIs: ErrConflict, wantErrorMsg: "conflict: task tiff_t003 already timed out"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := svc.Callback(ctx, batch, tc.taskID, tc.tok, tc.body)
			switch {
			case tc.wantIs != nil:
				require.ErrorIs(t, err, tc.wantIs)
				require.EqualError(t, err, tc.wantErrorMsg)
			case tc.wantAs != nil:
				require.ErrorAs(t, err, tc.wantAs)
				require.True(t, strings.HasPrefix(err.Error(), tc.wantErrorMsg), err.Error())
			default:
				require.NoError(t, err)
			}
			require.Equal(t, tc.want, got)
		})
	}
	require.Equal(t, []string{"tiff_t000 completed", "tiff_t001 failed", "tiff_t002 processing", "tiff_t003 failed",
		"tiff_t004 processing", "tiff_t005 processing"}, taskStatuses(t, pool))
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
