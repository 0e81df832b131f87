package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"hash/fnv"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/arke-institute/orchestrator/internal/fakes/fakefly"
	"github.com/arke-institute/orchestrator/internal/harness/pgcluster"
	"github.com/arke-institute/orchestrator/internal/harness/testenv"
	"github.com/arke-institute/orchestrator/manifest"
	"github.com/arke-institute/orchestrator/status"
)

// TestBatchSurvivesPostgresOutage stops Postgres with `pg_ctl stop -m
// immediate` (every connection dropped, no clean shutdown) while a batch's
// machines are calling back, keeps it down for a few seconds, starts it
// again, and requires that the API answered 503 with Retry-After meanwhile
// (health, intake, callbacks: never a 500), that the workers' retried
// callbacks were all applied, and that the batch finished with every
// task's outcome and its manifest delivered once.
func TestBatchSurvivesPostgresOutage(t *testing.T) {
	if testing.Short() {
		t.Skip("runs a Postgres cluster of its own and stops it (about 30 s); make test runs it")
	}
	ctx := context.Background()
	cluster, err := pgcluster.Start(ctx, pgcluster.Options{})
	require.NoError(t, err)
	t.Cleanup(func() { _ = cluster.Close() })

	const files = 60
	// Callbacks spread over a few seconds, so that some are in flight
	// while the database is away.
	delay := func(taskID string) time.Duration {
		h := fnv.New32a()
		h.Write([]byte(taskID))
		return time.Duration(h.Sum32()%4000) * time.Millisecond
	}
	env := testenv.New(t, testenv.Options{
		DatabaseServer: cluster.URL,
		FlyOptions:     fakefly.Options{CallbackRetryWindow: 2 * time.Minute},
		Behave: func(l fakefly.Launch) fakefly.Behavior {
			b := fakefly.Succeed(l)
			b.Delay = delay(l.TaskID)
			return b
		},
		Settings: map[string]string{
			// Nothing may time out because of the outage itself.
			"TASK_TIMEOUT_TIFF_CONVERSION":  "120000",
			"TASK_TIMEOUT_IMAGE_PROCESSING": "120000",
		},
	})
	batchID := "01PGRESTART00000000000000A"
	var list []testenv.File
	for i := range files {
		list = append(list, testenv.File{LogicalPath: fmt.Sprintf("/scans/p%03d.tif", i), Size: 1000, ContentType: "image/tiff"})
	}
	env.Submit(t, batchID, list)
	env.Fly.Await(t, time.Minute, "the first callbacks", func() bool { return env.Fly.Counts().Callbacks >= 5 })
	first := env.Fly.Launches()[0]
	taskID := first.TaskID

	require.NoError(t, cluster.StopServer(ctx, "immediate"))
	requireUnavailable(t, env, http.MethodGet, "/healthz", "", "")
	requireUnavailable(t, env, http.MethodPost, "/batches", queueMessage(t, "01PGRESTART00000000000000B"), testenv.IngestToken)
	callback := fmt.Sprintf(`{"task_id": %q, "batch_id": %q, "status": "error", "error": "x"}`, taskID, batchID)
	requireUnavailable(t, env, http.MethodPost, "/callback/"+batchID+"/"+taskID, callback, first.Env["CALLBACK_TOKEN"])
	// A forged token is refused on its seal, without the database.
	code, body := env.DoAuth(t, http.MethodPost, "/callback/"+batchID+"/"+taskID, "not-the-token", strings.NewReader(callback))
	require.Equal(t, http.StatusUnauthorized, code, "%s", body)
	// The outage itself: the database stays away while workers keep
	// calling back (and retrying), as through a restart or a failover.
	time.Sleep(5 * time.Second)
	require.NoError(t, cluster.StartServer(ctx))

	st := env.AwaitStatusWithin(t, batchID, 3*time.Minute, func(st status.Status) bool {
		return st.Status == "DONE" || st.Status == "ERROR"
	})
	require.Equal(t, "DONE", st.Status, "batch after the outage: %+v", st)
	answers := env.Fly.CallbackAnswers()
	require.Positive(t, answers[http.StatusServiceUnavailable], "some callbacks were answered during the outage, with 503: %v", answers)
	require.Zero(t, answers[http.StatusInternalServerError], "no callback may be answered 500: %v", answers)
	for _, c := range env.Fly.Callbacks() {
		require.Equal(t, http.StatusOK, c.Status, "callback of %s ended with %d (%s) after %d attempts", c.TaskID, c.Status, c.Err, c.Attempts)
	}
	for _, p := range st.Phases {
		require.Equal(t, p.TasksTotal, p.TasksCompleted, "phase %s: every worker succeeded, so every task must be completed: %+v", p.Phase, p)
	}

	// The final manifest reached ingest, repeats (if any) under one key.
	var keys []string
	require.Eventually(t, func() bool {
		keys = keys[:0]
		for _, c := range env.Ingest.Calls() {
			if strings.Contains(c.Path, batchID) && c.Status == http.StatusOK {
				keys = append(keys, c.IdempotencyKey)
			}
		}
		return len(keys) > 0
	}, time.Minute, 50*time.Millisecond, "the final manifest of %s never reached ingest", batchID)
	for _, c := range env.Ingest.Calls() {
		if strings.Contains(c.Path, batchID) {
			require.Equal(t, keys[0], c.IdempotencyKey, "every delivery of one completion carries one idempotency key")
		}
	}
}

// queueMessage is a valid intake body for batchID.
func queueMessage(t *testing.T, batchID string) string {
	t.Helper()
	now := time.Now().UTC()
	prefix := "staging/" + batchID + "/"
	b, err := json.Marshal(manifest.QueueMessage{
		BatchID: batchID, ManifestR2Key: prefix + "_manifest.json", R2Prefix: prefix,
		Uploader: "tester@arke.institute", RootPath: "/tests", ParentPI: "00000000000000000000000000",
		TotalFiles: 1, TotalBytes: 1, UploadedAt: now, FinalizedAt: now, Metadata: map[string]any{},
	})
	require.NoError(t, err)
	return string(b)
}

// requireUnavailable sends a request with token (none if empty) while the
// database is away and requires 503 with Retry-After, not a 500.
func requireUnavailable(t *testing.T, env *testenv.Env, method, path, body, token string) {
	t.Helper()
	req, err := http.NewRequest(method, env.Server.URL+path, strings.NewReader(body))
	require.NoError(t, err)
	req.Header.Set("Content-Type", "application/json")
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	require.Equal(t, http.StatusServiceUnavailable, resp.StatusCode, "%s %s while the database is away", method, path)
	require.NotEmpty(t, resp.Header.Get("Retry-After"), "%s %s: 503 without Retry-After", method, path)
}
