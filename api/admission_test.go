package api_test

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/arke-institute/orchestrator/client"
	"github.com/arke-institute/orchestrator/internal/fakes/fakefly"
	"github.com/arke-institute/orchestrator/internal/harness/metricstest"
	"github.com/arke-institute/orchestrator/internal/harness/testenv"
	"github.com/arke-institute/orchestrator/manifest"
)

// postMessage posts a queue message as ingest would and returns the
// answer's status, Retry-After and error message.
func postMessage(t *testing.T, env *testenv.Env, msg manifest.QueueMessage) (int, string, string) {
	t.Helper()
	body, err := json.Marshal(msg)
	require.NoError(t, err)
	resp, b := send(t, http.MethodPost, env.Server.URL+"/batches", string(body), func(r *http.Request) {
		r.Header.Set("Authorization", "Bearer "+testenv.IngestToken)
	})
	var answer struct{ Error string }
	_ = json.Unmarshal([]byte(b), &answer)
	return resp.StatusCode, resp.Header.Get("Retry-After"), answer.Error
}

// TestAdmissionControl: intake beyond a limit on what is in flight is
// answered 429 with Retry-After, names the limit and keeps nothing of the
// batch; the limits per uploader leave other uploaders alone; a
// redelivery of an admitted batch is answered as ever; once a batch ends,
// the next is admitted.
func TestAdmissionControl(t *testing.T) {
	t.Parallel()
	env := testenv.New(t, testenv.Options{
		Behave: func(fakefly.Launch) fakefly.Behavior { return fakefly.Behavior{Hang: true} },
		Settings: map[string]string{
			"MAX_BATCHES_IN_FLIGHT_PER_UPLOADER": "1", "MAX_FILES_IN_FLIGHT": "5", "INTAKE_RETRY_AFTER": "3000",
		},
	})
	as := func(uploader string) func(*manifest.QueueMessage) {
		return func(m *manifest.QueueMessage) { m.Uploader = uploader }
	}
	env.SubmitWith(t, "ALICE-1", testenv.Tiffs(2), as("alice"))

	_, second := env.Prepare(t, "ALICE-2", testenv.Tiffs(1))
	second.Uploader = "alice"
	code, retry, msg := postMessage(t, env, second)
	require.Equal(t, http.StatusTooManyRequests, code, msg)
	require.Equal(t, "3", retry)
	require.Equal(t, `intake is at MAX_BATCHES_IN_FLIGHT_PER_UPLOADER (1): 1 batches in flight for uploader "alice"; try again later`, msg)
	code, _ = env.Do(t, http.MethodGet, "/status/ALICE-2", nil)
	require.Equal(t, http.StatusNotFound, code, "nothing of a refused batch is kept")

	// Another uploader is not held by alice's limit, but by the fleet's
	// files: 2 in flight, 4 more would make 6.
	env.SubmitWith(t, "BOB-1", testenv.Tiffs(3), as("bob"))
	_, big := env.Prepare(t, "BOB-2", testenv.Tiffs(1))
	big.Uploader = "carol"
	code, _, msg = postMessage(t, env, big)
	require.Equal(t, http.StatusTooManyRequests, code, msg)
	require.Equal(t, "intake is at MAX_FILES_IN_FLIGHT (5): 5 files in flight, and this batch has 1; try again later", msg)

	// A redelivery is answered as ever, whatever is in flight.
	_, again := env.Prepare(t, "ALICE-1", testenv.Tiffs(2))
	again.Uploader = "alice"
	code, _, msg = postMessage(t, env, again)
	require.Equal(t, http.StatusOK, code, msg)

	// The client waits out the refusal (the fleet's files, now) and
	// submits again once a batch ended (a reset puts ALICE-1 in ERROR).
	var mu sync.Mutex
	var heard []string
	waited := make(chan struct{}, 8)
	c, err := client.New(client.Config{URL: env.Server.URL, IngestToken: testenv.IngestToken, SubmitPatience: time.Minute,
		OnSubmitWait: func(refusal *client.Error, wait time.Duration) {
			mu.Lock()
			heard = append(heard, refusal.Message)
			mu.Unlock()
			require.Equal(t, 3*time.Second, wait)
			waited <- struct{}{}
		}})
	require.NoError(t, err)
	done := make(chan error, 1)
	go func() {
		receipt, err := c.Submit(context.Background(), second)
		if err == nil && !receipt.Created {
			err = errMsg("the waited-out batch was not created")
		}
		done <- err
	}()
	<-waited
	code, body := env.Do(t, http.MethodPost, "/admin/reset/ALICE-1", nil)
	require.Equal(t, http.StatusOK, code, string(body))
	require.NoError(t, <-done)
	mu.Lock()
	require.NotEmpty(t, heard)
	require.True(t, strings.HasPrefix(heard[0], "intake is at MAX_FILES_IN_FLIGHT (5): 5 files in flight"), heard[0])
	mu.Unlock()
	require.Equal(t, "ALICE-2", env.Status(t, "ALICE-2").BatchID)

	refused := func(limit string) float64 {
		return metricstest.Value(t, env.Metrics.Registry(), "orchestrator_intake_refused_total", map[string]string{"limit": limit})
	}
	require.Equal(t, 1.0, refused("MAX_BATCHES_IN_FLIGHT_PER_UPLOADER"), "refusals are counted by limit")
	require.GreaterOrEqual(t, refused("MAX_FILES_IN_FLIGHT"), 2.0, "carol's and the client's")
}

type errMsg string

func (e errMsg) Error() string { return string(e) }
