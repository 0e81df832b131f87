package api_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/arke-institute/orchestrator/internal/fakes/fakefly"
	"github.com/arke-institute/orchestrator/internal/harness/testenv"
)

// callbackAnswer is what a worker's callback got back.
type callbackAnswer struct {
	code       int
	retryAfter string
	body       string
	err        error
}

// sendCallback posts l's success callback and returns the answer.
func sendCallback(env *testenv.Env, l fakefly.Launch) callbackAnswer {
	req, err := http.NewRequest(http.MethodPost, env.Server.URL+"/callback/"+l.BatchID+"/"+l.TaskID, strings.NewReader(callbackBody(l)))
	if err != nil {
		return callbackAnswer{err: err}
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+l.Env["CALLBACK_TOKEN"])
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return callbackAnswer{err: err}
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	return callbackAnswer{code: resp.StatusCode, retryAfter: resp.Header.Get("Retry-After"), body: string(body), err: err}
}

// TestCallbackQueueFullAnswers503: with CALLBACK_QUEUE_MAX 1 and the one
// committer held (the test holds the batch's fan-in lock exclusively, so
// the committer's group waits for it), one callback waits in the queue and
// the next is answered 503 with Retry-After at once; once the lock is let
// go, the queued ones are applied and the refused one succeeds when tried
// again.
func TestCallbackQueueFullAnswers503(t *testing.T) {
	t.Parallel()
	opts, launches := heldLaunches()
	opts.Settings = map[string]string{"CALLBACK_QUEUE_MAX": "1", "CALLBACK_COMMITTERS": "1"}
	env := testenv.New(t, opts)
	const id = "QUEUE-FULL"
	env.Submit(t, id, []testenv.File{
		{LogicalPath: "/scans/a.tif", Size: 100, ContentType: "image/tiff"},
		{LogicalPath: "/scans/b.tif", Size: 100, ContentType: "image/tiff"},
		{LogicalPath: "/scans/c.tif", Size: 100, ContentType: "image/tiff"},
	})
	ls := []fakefly.Launch{nextLaunch(t, launches), nextLaunch(t, launches), nextLaunch(t, launches)}

	ctx := context.Background()
	tx, err := env.Pool.Begin(ctx)
	require.NoError(t, err)
	defer tx.Rollback(ctx) //nolint:errcheck // rolled back below; this is for a failed test
	_, err = tx.Exec(ctx, `SELECT pg_advisory_xact_lock(batch_lock_key($1))`, id)
	require.NoError(t, err)

	answers := make(chan callbackAnswer, len(ls))
	go func() { answers <- sendCallback(env, ls[0]) }()
	// The committer has taken the first callback off the queue once its
	// group waits for the lock.
	require.Eventually(t, func() bool {
		// Only a callback group runs BatchLockSharedMany.
		var waiting bool
		err := env.Pool.QueryRow(ctx, `SELECT EXISTS (SELECT FROM pg_stat_activity
			WHERE datname = current_database() AND wait_event_type = 'Lock' AND wait_event = 'advisory'
			AND query LIKE '%batch_lock_key(id)%')`).Scan(&waiting)
		return err == nil && waiting
	}, 10*time.Second, 10*time.Millisecond, "the callback group waits for the batch's lock")

	// Of two more, one waits in the queue (it cannot be answered while the
	// lock is held) and the other is refused: the first answer.
	go func() { answers <- sendCallback(env, ls[1]) }()
	go func() { answers <- sendCallback(env, ls[2]) }()
	var refused callbackAnswer
	select {
	case refused = <-answers:
	case <-time.After(10 * time.Second):
		t.Fatal("no callback was refused while the queue was full")
	}
	require.NoError(t, refused.err)
	require.Equal(t, http.StatusServiceUnavailable, refused.code, "body: %s", refused.body)
	require.Equal(t, "1", refused.retryAfter)
	var out map[string]string
	require.NoError(t, json.Unmarshal([]byte(refused.body), &out))
	require.Equal(t, "too many callbacks are waiting to be applied; try again shortly", out["error"])

	require.NoError(t, tx.Rollback(ctx))
	for range 2 {
		a := <-answers
		require.NoError(t, a.err)
		require.Equal(t, http.StatusOK, a.code, "a queued callback is applied: %s", a.body)
	}
	// The worker tries again, as Retry-After tells it to.
	completed := 0
	for _, l := range ls {
		var status string
		require.NoError(t, env.Pool.QueryRow(ctx, `SELECT status FROM tasks WHERE id = $1`, l.TaskID).Scan(&status))
		if status == "completed" {
			completed++
			continue
		}
		a := sendCallback(env, l)
		require.NoError(t, a.err)
		require.Equal(t, http.StatusOK, a.code, "the refused callback, tried again: %s", a.body)
	}
	require.Equal(t, 2, completed, "exactly one of the three was refused")
}

// TestStreamOutlivesWriteTimeout: behind an http.Server whose WriteTimeout
// cuts an ordinary answer that comes too late, an event stream goes on past
// that timeout and still delivers events.
func TestStreamOutlivesWriteTimeout(t *testing.T) {
	t.Parallel()
	opts, launches := heldLaunches()
	env := testenv.New(t, opts)
	const id = "STREAM-TIMEOUT"
	env.Submit(t, id, []testenv.File{{LogicalPath: "/scans/a.tif", Size: 100, ContentType: "image/tiff"}})
	l := nextLaunch(t, launches)

	const writeTimeout = 200 * time.Millisecond
	entered, release := make(chan struct{}), make(chan struct{})
	mux := http.NewServeMux()
	mux.HandleFunc("/slow", func(w http.ResponseWriter, _ *http.Request) {
		close(entered)
		<-release
		_, _ = io.WriteString(w, "too late")
	})
	mux.Handle("/", env.Server.Config.Handler)
	srv := httptest.NewUnstartedServer(mux)
	srv.Config.WriteTimeout = writeTimeout
	srv.Start()
	t.Cleanup(srv.Close)

	timed := *env
	timed.Server = srv
	r := &streamReader{t: t, c: openStream(t, &timed, id, 0)}
	r.await(5*time.Second, "the status document", func(m sseMessage) bool { return m.Event == "status" })

	slow := make(chan error, 1)
	go func() {
		resp, err := http.Get(srv.URL + "/slow")
		if err == nil {
			_, err = io.ReadAll(resp.Body)
			resp.Body.Close()
		}
		slow <- err
	}()
	<-entered
	// Both requests were read before this point, so both their write
	// deadlines have passed after it.
	time.Sleep(writeTimeout + 100*time.Millisecond)
	close(release)
	require.Error(t, <-slow, "an ordinary answer written after WriteTimeout is cut")

	postCallback(t, env, l, callbackBody(l))
	r.await(5*time.Second, "the task's completion, after WriteTimeout", isEvent("task.completed", l.TaskID))
}
