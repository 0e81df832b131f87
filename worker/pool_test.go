package worker_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/arke-institute/orchestrator/worker"
)

// fakePool is the orchestrator's side of a pool: it answers lease
// requests from answers, in turn (then "done"), and heartbeats of each
// task with the status its heartbeat map gives (200 unless said).
type fakePool struct {
	t        *testing.T
	srv      *httptest.Server
	mu       sync.Mutex
	answers  []any
	beats    map[string]int // heartbeats per task
	refuse   map[string]int // task -> heartbeat status
	leaseIDs []string       // machine ids the lease requests named
}

func newFakePool(t *testing.T, answers ...any) *fakePool {
	f := &fakePool{t: t, answers: answers, beats: map[string]int{}, refuse: map[string]int{}}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /lease", func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") != "Bearer pool-token" {
			http.Error(w, `{"error":"bad pool token"}`, http.StatusUnauthorized)
			return
		}
		var req struct {
			MachineID string `json:"machine_id"`
		}
		b, _ := io.ReadAll(r.Body)
		require.NoError(t, json.Unmarshal(b, &req))
		f.mu.Lock()
		f.leaseIDs = append(f.leaseIDs, req.MachineID)
		var answer any = map[string]bool{"done": true}
		if len(f.answers) > 0 {
			answer, f.answers = f.answers[0], f.answers[1:]
		}
		f.mu.Unlock()
		require.NoError(t, json.NewEncoder(w).Encode(answer))
	})
	mux.HandleFunc("POST /callback/B/{task}/heartbeat", func(w http.ResponseWriter, r *http.Request) {
		task := r.PathValue("task")
		require.Equal(t, "Bearer token-"+task, r.Header.Get("Authorization"), "a task's heartbeat carries its own callback token")
		f.mu.Lock()
		f.beats[task]++
		code := f.refuse[task]
		f.mu.Unlock()
		if code != 0 {
			w.WriteHeader(code)
			fmt.Fprint(w, `{"error":"task is not leased under this token"}`)
			return
		}
		fmt.Fprint(w, `{"lease_until":"2026-11-28T00:00:00Z"}`)
	})
	f.srv = httptest.NewServer(mux)
	t.Cleanup(f.srv.Close)
	return f
}

func (f *fakePool) task(id string, heartbeatMS int64) any {
	return map[string]any{"task": map[string]any{"heartbeat_ms": heartbeatMS, "env": map[string]string{
		"TASK_ID": id, "BATCH_ID": "B", "CALLBACK_URL": f.srv.URL + "/callback/B/" + id, "CALLBACK_TOKEN": "token-" + id,
	}}}
}

func (f *fakePool) heartbeats(task string) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.beats[task]
}

func (f *fakePool) pool() worker.Pool {
	p, ok, err := worker.PoolFromEnv(env(map[string]string{
		"POOL_LEASE_URL": f.srv.URL + "/lease", "POOL_TOKEN": "pool-token", "FLY_MACHINE_ID": "m-1", "POOL_IDLE_SECONDS": "60",
	}))
	require.NoError(f.t, err)
	require.True(f.t, ok)
	return p
}

// TestPoolWorksTasksInTurn: a pool machine leases tasks one after another
// with its pool token, runs each with that task's environment over its
// own, heartbeats with the task's token while it works, and exits when
// the pool is done.
func TestPoolWorksTasksInTurn(t *testing.T) {
	t.Parallel()
	f := newFakePool(t)
	f.answers = []any{f.task("t1", 10), map[string]any{}, f.task("t2", 10)}
	machine := map[string]string{"TASK_ID": "", "PDF_RENDER_DPI": "150"}
	var seen []string
	worked, err := f.pool().Run(context.Background(), env(machine), func(ctx context.Context, getenv func(string) string) {
		seen = append(seen, getenv("TASK_ID")+"@"+getenv("PDF_RENDER_DPI"))
		task := getenv("TASK_ID")
		require.Eventually(t, func() bool { return f.heartbeats(task) >= 3 }, 10*time.Second, time.Millisecond, "heartbeats while it works")
		require.NoError(t, ctx.Err())
	})
	require.NoError(t, err)
	require.Equal(t, 2, worked)
	require.Equal(t, []string{"t1@150", "t2@150"}, seen, "each task's environment, over the machine's own")
	require.Equal(t, []string{"m-1", "m-1", "m-1", "m-1"}, f.leaseIDs, "four lease requests: t1, nothing yet, t2, done")
}

// TestPoolLeaseTakenBack: a heartbeat answered 409 cancels the task's
// context at once, saying why; the machine leases on.
func TestPoolLeaseTakenBack(t *testing.T) {
	t.Parallel()
	f := newFakePool(t)
	f.answers = []any{f.task("lost", 10), f.task("next", 0)}
	f.refuse["lost"] = http.StatusConflict
	var causes []error
	worked, err := f.pool().Run(context.Background(), env(nil), func(ctx context.Context, getenv func(string) string) {
		if getenv("TASK_ID") == "lost" {
			select {
			case <-ctx.Done():
			case <-time.After(10 * time.Second):
			}
		}
		causes = append(causes, context.Cause(ctx))
	})
	require.NoError(t, err)
	require.Equal(t, 2, worked)
	require.Len(t, causes, 2)
	require.ErrorIs(t, causes[0], worker.ErrNotWanted)
	require.ErrorContains(t, causes[0], "its lease was taken back")
	require.NoError(t, causes[1], "the next task runs on")
	require.Equal(t, 1, f.heartbeats("lost"))
}

// TestPoolIdleExit: a machine that gets no task for POOL_IDLE_SECONDS
// exits; a refused pool token is an error; POOL_TOKEN is required.
func TestPoolIdleExit(t *testing.T) {
	t.Parallel()
	f := newFakePool(t)
	var leases atomic.Int32
	f.srv.Config.Handler = http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		leases.Add(1)
		fmt.Fprint(w, `{}`)
	})
	p := f.pool()
	p.Idle = 30 * time.Millisecond
	worked, err := p.Run(context.Background(), env(nil), func(context.Context, func(string) string) { t.Error("no task was leased") })
	require.NoError(t, err)
	require.Zero(t, worked)
	require.Greater(t, leases.Load(), int32(1), "it asked again until idle")

	f.srv.Config.Handler = http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.WriteHeader(http.StatusUnauthorized)
		fmt.Fprint(w, `{"error":"missing, wrong or ended pool credential (POOL_TOKEN)"}`)
	})
	_, err = p.Run(context.Background(), env(nil), func(context.Context, func(string) string) {})
	var se *worker.StatusError
	require.True(t, errors.As(err, &se), "%v", err)
	require.Equal(t, http.StatusUnauthorized, se.Code)

	_, _, err = worker.PoolFromEnv(env(map[string]string{"POOL_LEASE_URL": "http://x/lease"}))
	require.ErrorContains(t, err, "POOL_TOKEN is required")
	_, ok, err := worker.PoolFromEnv(env(nil))
	require.NoError(t, err)
	require.False(t, ok, "no POOL_LEASE_URL: a machine of one task")
}
