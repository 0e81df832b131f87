package api_test

import (
	"context"
	"encoding/json"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/arke-institute/orchestrator/db"
	"github.com/arke-institute/orchestrator/docindex"
	"github.com/arke-institute/orchestrator/internal/harness/eventually"
	"github.com/arke-institute/orchestrator/internal/harness/testenv"
	"github.com/arke-institute/orchestrator/pause"
	"github.com/arke-institute/orchestrator/status"
)

// snoozedFor reports whether a job of kind whose args match (args @> match)
// waits in River for a pause's recheck: scheduled at least 10 s ahead.
func snoozedFor(t *testing.T, env *testenv.Env, kind, match string) bool {
	t.Helper()
	var n int
	err := env.Pool.QueryRow(context.Background(), `SELECT count(*) FROM river_job WHERE kind = $1 AND args @> $2::jsonb
		AND state = 'scheduled' AND scheduled_at > now() + interval '10 seconds'`, kind, match).Scan(&n)
	require.NoError(t, err)
	return n > 0
}

// TestPauseHoldsLaunchesUntilResumed: while a phase is paused its tasks are
// not launched (the launcher looked, and waits), the batch's status says
// why, and the pause is listed; a resume moves the tasks' failing clocks
// later by the time paused, wakes the launcher at once (well before its
// 30 s recheck), and the batch ends DONE.
func TestPauseHoldsLaunchesUntilResumed(t *testing.T) {
	t.Parallel()
	env := testenv.New(t, testenv.Options{})
	code, body := env.Do(t, http.MethodPost, "/admin/pause", strings.NewReader(`{"phase": "TIFF_CONVERSION", "reason": "Fly incident"}`))
	require.Equal(t, http.StatusOK, code, string(body))
	var p pause.Pause
	require.NoError(t, json.Unmarshal(body, &p))
	require.Equal(t, pause.Phase, p.Scope)
	require.Equal(t, "TIFF_CONVERSION", p.Target)

	const id = "PAUSED-PHASE"
	env.Submit(t, id, testenv.Tiffs(3))
	st := env.AwaitStatus(t, id, func(st status.Status) bool { return st.Status == "TIFF_CONVERSION" })
	require.NotNil(t, st.Paused, "the status says the batch is paused")
	require.Equal(t, "Fly incident", st.Paused.Reason)
	eventually.True(t, 30*time.Second, "the launcher waits out the pause", func() bool {
		return snoozedFor(t, env, "phase_launch", `{"batch_id": "`+id+`"}`)
	})
	for _, l := range env.Fly.Launches() {
		require.NotEqual(t, id, l.BatchID, "no machine is launched while paused")
	}
	require.EqualValues(t, 3, env.Status(t, id).Phases[0].TasksPending)

	code, body = env.Do(t, http.MethodGet, "/admin/pauses", nil)
	require.Equal(t, http.StatusOK, code, string(body))
	require.Contains(t, string(body), `"reason":"Fly incident"`)

	// An hour paused, and a task failing since 5 minutes before it ended:
	// the resume moves its clock an hour later.
	ctx := context.Background()
	_, err := env.Pool.Exec(ctx, `UPDATE pauses SET paused_at = now() - interval '1 hour'`)
	require.NoError(t, err)
	_, err = env.Pool.Exec(ctx, `UPDATE tasks SET failing_since = now() - interval '5 minutes' WHERE id = (SELECT min(id) FROM tasks WHERE batch_id = $1)`, id)
	require.NoError(t, err)
	resumedAt := time.Now()
	code, body = env.Do(t, http.MethodPost, "/admin/resume", strings.NewReader(`{"phase": "TIFF_CONVERSION"}`))
	require.Equal(t, http.StatusOK, code, string(body))
	var r pause.Resumed
	require.NoError(t, json.Unmarshal(body, &r))
	require.GreaterOrEqual(t, r.PausedSeconds, 3600.0)
	require.EqualValues(t, 1, r.Shifted["tasks"])
	require.GreaterOrEqual(t, r.Woken, int64(1))
	var failingSince time.Time
	require.NoError(t, env.Pool.QueryRow(ctx, `SELECT failing_since FROM tasks WHERE id = (SELECT min(id) FROM tasks WHERE batch_id = $1)`, id).Scan(&failingSince))
	require.WithinDuration(t, resumedAt.Add(55*time.Minute), failingSince, time.Minute)

	// Woken, not left to its recheck 30 s on.
	env.AwaitStatusWithin(t, id, 20*time.Second, func(st status.Status) bool { return st.Status == "DONE" })
	require.Nil(t, env.Status(t, id).Paused)

	code, body = env.Do(t, http.MethodPost, "/admin/resume", strings.NewReader(`{"phase": "TIFF_CONVERSION"}`))
	require.Equal(t, http.StatusNotFound, code, string(body))
	require.Contains(t, string(body), "phase TIFF_CONVERSION is not paused")
}

// TestPauseOfABatch: a batch's pause holds that batch only, is an event of
// it, and is lifted by its resume; a pause of everything holds documents
// posted alone until resumed.
func TestPauseOfABatch(t *testing.T) {
	t.Parallel()
	env := testenv.New(t, testenv.Options{})
	const held, free = "PAUSED-BATCH", "NOT-PAUSED"
	env.Submit(t, held, testenv.Tiffs(2))
	code, body := env.Do(t, http.MethodPost, "/admin/pause", strings.NewReader(`{"batch_id": "`+held+`", "reason": "bad files?"}`))
	require.Equal(t, http.StatusOK, code, string(body))
	env.Submit(t, free, testenv.Tiffs(2))
	env.AwaitStatus(t, free, func(st status.Status) bool { return st.Status == "DONE" })
	st := env.Status(t, held)
	require.NotEqual(t, "DONE", st.Status, "the paused batch waits")
	require.NotNil(t, st.Paused)
	require.Equal(t, pause.Batch, st.Paused.Scope)
	require.Equal(t, 1, env.CountEvents(t, held, db.EventAdminPause))

	code, body = env.Do(t, http.MethodPost, "/admin/resume", strings.NewReader(`{"batch_id": "`+held+`"}`))
	require.Equal(t, http.StatusOK, code, string(body))
	env.AwaitStatus(t, held, func(st status.Status) bool { return st.Status == "DONE" })
	require.Equal(t, 1, env.CountEvents(t, held, db.EventAdminResume))

	// Everything: a document posted alone is not stepped until resumed.
	code, body = env.Do(t, http.MethodPost, "/admin/pause", nil)
	require.Equal(t, http.StatusOK, code, string(body))
	env.PutObject(t, "documents/paused.md", []byte("# Paused\n\nA document posted while everything is paused."))
	code, doc := postDocument(t, env, "documents/paused.md")
	require.Equal(t, http.StatusAccepted, code)
	eventually.True(t, 30*time.Second, "the document's step waits out the pause", func() bool {
		return snoozedFor(t, env, "document_step", `{"document_id": `+strconv.FormatInt(doc.ID, 10)+`}`)
	})
	require.Equal(t, db.DocumentNotStarted, awaitDocument(t, env, doc.ID, func(docindex.Document) bool { return true }).Status)
	code, body = env.Do(t, http.MethodPost, "/admin/resume", strings.NewReader(`{}`))
	require.Equal(t, http.StatusOK, code, string(body))
	require.Equal(t, db.DocumentCompleted, awaitDocument(t, env, doc.ID, ended).Status)
}

// TestPauseRefusals: what a pause request may not be.
func TestPauseRefusals(t *testing.T) {
	t.Parallel()
	env := testenv.New(t, testenv.Options{NoWorkers: true})
	for _, tt := range []struct {
		body     string
		wantCode int
		wantMsg  string
	}{
		{`{"batch_id": "B", "phase": "OCR"}`, http.StatusBadRequest, "not both"},
		{`{"phase": "NOPE"}`, http.StatusBadRequest, `phase "NOPE" is no phase (phases: PDF_PAGES, TIFF_CONVERSION`},
		{`{"batch_id": "NO-SUCH-BATCH"}`, http.StatusNotFound, "batch NO-SUCH-BATCH"},
		{`{"phase": "OCR", "reasn": "typo"}`, http.StatusBadRequest, `unknown field "reasn"`},
		{`[1]`, http.StatusBadRequest, "must be a JSON object"},
	} {
		code, body := env.Do(t, http.MethodPost, "/admin/pause", strings.NewReader(tt.body))
		require.Equal(t, tt.wantCode, code, "%s: %s", tt.body, body)
		var answer struct{ Error string }
		require.NoError(t, json.Unmarshal(body, &answer))
		require.Contains(t, answer.Error, tt.wantMsg, tt.body)
	}
	code, body := env.Do(t, http.MethodPost, "/admin/resume", nil)
	require.Equal(t, http.StatusNotFound, code, string(body))
	require.Contains(t, string(body), "the fleet is not paused")
	code, _ = env.DoAuth(t, http.MethodPost, "/admin/pause", testenv.ReadToken, nil)
	require.Equal(t, http.StatusForbidden, code, "the read token pauses nothing")
}
