package api_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/stretchr/testify/require"

	"github.com/arke-institute/orchestrator/api"
	"github.com/arke-institute/orchestrator/internal/harness/dbtest"
	"github.com/arke-institute/orchestrator/tasktoken"
)

// callbackServer is the API on a fresh database with one batch in
// TIFF_CONVERSION and n processing tasks tiff_t000, tiff_t001, ... whose
// callback tokens are dbtest.Token(id).
func callbackServer(t *testing.T, batchID string, n int) (*httptest.Server, *pgxpool.Pool) {
	t.Helper()
	pool := dbtest.New(t)
	// An insert-only River client: no job is worked here, so the phase_check
	// a callback enqueues stays visible.
	rc, err := river.NewClient(riverpgxv5.New(pool), &river.Config{})
	require.NoError(t, err)
	dbtest.SeedProcessingTasks(t, pool, batchID, n)
	srv := httptest.NewServer(api.New(api.Config{Pool: pool, River: rc, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))}))
	t.Cleanup(srv.Close)
	return srv, pool
}

func answersSuccess(taskID string) []byte {
	return fmt.Appendf(nil, `{"task_id":%q,"status":"success","output_r2_key":"staging/ANSWERS/%s.jpg","output_file_name":"%s.jpg","output_file_size":5}`,
		taskID, taskID, taskID)
}

// TestCallbackAnswers posts one callback of each kind, in turn, and checks
// the status code and answer each gets. The outcomes themselves are
// package fanin's tests; these are their translation to HTTP.
func TestCallbackAnswers(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	const batch = "ANSWERS"
	srv, pool := callbackServer(t, batch, 6)
	_, err := pool.Exec(ctx, `UPDATE tasks SET status = 'failed', ended_by = 'timeout', error = 'Task timed out after 1.0s' WHERE id = 'tiff_t003'`)
	require.NoError(t, err)
	// Its phase is over: the timed-out task's late success is refused.
	_, err = pool.Exec(ctx, `UPDATE batches SET status = 'IMAGE_PROCESSING' WHERE id = $1`, batch)
	require.NoError(t, err)
	// Valid JSON that jsonb rejects (a lone surrogate).
	poison := []byte(`{"status":"success","output_r2_key":"staging/ANSWERS/x.jpg","output_file_name":"\ud800.jpg","output_file_size":5}`)
	token := func(taskID string) string { return dbtest.CallbackToken(t, pool, batch, taskID) }
	sealed := func(taskID, nonce string) string {
		tok, err := tasktoken.New(pool).Seal(ctx, tasktoken.Task(batch, taskID), nonce)
		require.NoError(t, err)
		return tok
	}

	for _, tc := range []struct {
		name        string
		taskID, tok string
		body        []byte
		wantCode    int
		want        string // the answer (JSON), or the start of its error
	}{
		{"Applied", "tiff_t000", token("tiff_t000"), answersSuccess("tiff_t000"), 200, `{"task_id":"tiff_t000","status":"completed","duplicate":false}`},
		{"Repeat", "tiff_t000", token("tiff_t000"), answersSuccess("tiff_t000"), 200, `{"task_id":"tiff_t000","status":"completed","duplicate":true}`},
		{"ErrorCallback", "tiff_t001", token("tiff_t001"), []byte(`{"status":"error","error":"corrupt TIFF"}`), 200, `{"task_id":"tiff_t001","status":"failed","duplicate":false}`},
		{"UnknownTask", "tiff_t999", token("tiff_t999"), answersSuccess("tiff_t999"), 404, "task tiff_t999 of batch ANSWERS: not found"},
		{"MissingToken", "tiff_t002", "", answersSuccess("tiff_t002"), 401, "unauthorized: missing bearer token"},
		{"WrongToken", "tiff_t002", "wrong", answersSuccess("tiff_t002"), 401, "unauthorized: the bearer token was not issued for this task or pool"},
		{"OtherTasksToken", "tiff_t002", token("tiff_t001"), answersSuccess("tiff_t002"), 401, "unauthorized: the bearer token was not issued for this task or pool"},
		// Sealed for the task, but not its current attempt's: the record
		// does not match.
		{"StaleToken", "tiff_t002", sealed("tiff_t002", "an-older-attempt"), answersSuccess("tiff_t002"), 401, "unauthorized: wrong callback token for task tiff_t002"},
		{"UnknownStatus", "tiff_t002", token("tiff_t002"), []byte(`{"status":"maybe"}`), 400, `invalid callback: status must be "success" or "error", got "maybe"`},
		{"OtherTaskID", "tiff_t002", token("tiff_t002"), answersSuccess("tiff_t001"), 400, `invalid callback: task_id "tiff_t001" does not match the URL's "tiff_t002"`},
		{"NotAnObject", "tiff_t002", token("tiff_t002"), []byte(`[]`), 400, "invalid callback: body must be a JSON object"},
		{"ResultUnfitForPhase", "tiff_t002", token("tiff_t002"), []byte(`{"status":"success","output_file_size":5}`), 400, "invalid callback: "},
		{"Unstorable", "tiff_t004", token("tiff_t004"), poison, 400, "invalid callback: the body cannot be stored: "},
		{"TimedOut", "tiff_t003", token("tiff_t003"), answersSuccess("tiff_t003"), 409, "conflict: task tiff_t003 already timed out"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			req, err := http.NewRequest(http.MethodPost, srv.URL+"/callback/"+batch+"/"+tc.taskID, bytes.NewReader(tc.body))
			require.NoError(t, err)
			req.Header.Set("Content-Type", "application/json")
			if tc.tok != "" {
				req.Header.Set("Authorization", "Bearer "+tc.tok)
			}
			resp, err := http.DefaultClient.Do(req)
			require.NoError(t, err)
			defer resp.Body.Close()
			body, err := io.ReadAll(resp.Body)
			require.NoError(t, err)
			require.Equal(t, tc.wantCode, resp.StatusCode, string(body))
			if tc.wantCode == http.StatusOK {
				require.JSONEq(t, tc.want, string(body))
				return
			}
			var e struct{ Error string }
			require.NoError(t, json.Unmarshal(body, &e))
			require.True(t, strings.HasPrefix(e.Error, tc.want), e.Error)
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
