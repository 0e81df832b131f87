package fakefly_test

import (
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	fly "github.com/superfly/fly-go"
	"github.com/superfly/fly-go/flaps"
	"github.com/superfly/fly-go/tokens"
	"golang.org/x/sync/errgroup"

	"github.com/arke-institute/orchestrator/compute"
	"github.com/arke-institute/orchestrator/compute/flycompute"
	"github.com/arke-institute/orchestrator/internal/fakes/fakefly"
)

const (
	app           = "arke-workers"
	callbackToken = "cb-secret-token"
	wait          = 10 * time.Second
)

// orchestrator is a tiny stand-in for the callback endpoint.
type orchestrator struct {
	*httptest.Server
	mu       sync.Mutex
	received []received
	answer   func(n int) int // status for the nth (1-based) request
}

type received struct {
	Path, Auth string
	Body       []byte
	At         time.Time
}

func newOrchestrator(t *testing.T, answer func(n int) int) *orchestrator {
	o := &orchestrator{answer: answer}
	o.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		o.mu.Lock()
		o.received = append(o.received, received{Path: r.URL.Path, Auth: r.Header.Get("Authorization"), Body: body, At: time.Now()})
		n := len(o.received)
		o.mu.Unlock()
		status := http.StatusOK
		if o.answer != nil {
			status = o.answer(n)
		}
		w.WriteHeader(status)
	}))
	t.Cleanup(o.Close)
	return o
}

func (o *orchestrator) requests() []received {
	o.mu.Lock()
	defer o.mu.Unlock()
	return append([]received(nil), o.received...)
}

func newBackend(t *testing.T, fake *fakefly.Server) *flycompute.Backend {
	t.Helper()
	b, err := flycompute.New(t.Context(), flycompute.Config{
		APIToken: fakefly.DefaultToken,
		BaseURL:  fake.URL,
		Logger:   slog.New(slog.DiscardHandler),
	})
	require.NoError(t, err)
	return b
}

func spec(o *orchestrator, taskID string) compute.MachineSpec {
	return compute.MachineSpec{
		App: app, Image: "registry.fly.io/arke-tiff-worker:v1", Region: "ord",
		Name: "tiff-" + taskID, TaskID: taskID, BatchID: "batch-1",
		Env: map[string]string{
			"TASK_ID":        taskID,
			"BATCH_ID":       "batch-1",
			"CALLBACK_URL":   o.URL + "/callback/batch-1/" + taskID,
			"CALLBACK_TOKEN": callbackToken,
		},
		MemoryMB: 1024, CPUs: 2, CPUKind: "shared",
	}
}

func TestWorkerPostsDefaultCallback(t *testing.T) {
	t.Parallel()
	fake := fakefly.New(t, fakefly.Options{})
	o := newOrchestrator(t, nil)
	b := newBackend(t, fake)

	m, err := b.Launch(t.Context(), spec(o, "t1"))
	require.NoError(t, err)

	cbs := fake.AwaitCallbacks(t, 1, wait)
	require.Len(t, cbs, 1)
	require.Equal(t, http.StatusOK, cbs[0].Status)
	require.Equal(t, m.ID, cbs[0].MachineID)
	require.Equal(t, "t1", cbs[0].TaskID)
	require.Equal(t, 1, cbs[0].Attempts)

	reqs := o.requests()
	require.Len(t, reqs, 1)
	require.Equal(t, "/callback/batch-1/t1", reqs[0].Path)
	require.Equal(t, "Bearer "+callbackToken, reqs[0].Auth)
	require.JSONEq(t, `{"task_id":"t1","batch_id":"batch-1","status":"success"}`, string(reqs[0].Body))

	// auto_destroy: the machine is gone once the worker exits.
	fake.AwaitIdle(t, wait)
	require.Empty(t, fake.Machines(app))
	c := fake.Counts()
	require.Equal(t, 1, c.AutoDestroyed)
	require.Equal(t, 0, c.Destroyed)
	require.Empty(t, fake.Destroyed())
}

func TestWorkerPostsBehaviorBody(t *testing.T) {
	t.Parallel()
	fake := fakefly.New(t, fakefly.Options{Behave: func(l fakefly.Launch) fakefly.Behavior {
		return fakefly.Behavior{Body: map[string]any{
			"task_id": l.TaskID, "batch_id": l.BatchID, "status": "error",
			"error": "Failed to decode TIFF: corrupt data at byte 12345",
		}}
	}})
	o := newOrchestrator(t, nil)
	_, err := newBackend(t, fake).Launch(t.Context(), spec(o, "t2"))
	require.NoError(t, err)

	fake.AwaitCallbacks(t, 1, wait)
	require.JSONEq(t,
		`{"task_id":"t2","batch_id":"batch-1","status":"error","error":"Failed to decode TIFF: corrupt data at byte 12345"}`,
		string(o.requests()[0].Body))
}

func TestWorkerHangPostsNothing(t *testing.T) {
	t.Parallel()
	fake := fakefly.New(t, fakefly.Options{Behave: func(fakefly.Launch) fakefly.Behavior {
		return fakefly.Behavior{Hang: true}
	}})
	o := newOrchestrator(t, nil)
	m, err := newBackend(t, fake).Launch(t.Context(), spec(o, "t3"))
	require.NoError(t, err)

	fake.AwaitIdle(t, wait)
	require.Empty(t, fake.Callbacks())
	require.Empty(t, o.requests())
	ms := fake.Machines(app)
	require.Len(t, ms, 1)
	require.Equal(t, m.ID, ms[0].ID)
	require.Equal(t, "started", ms[0].State)
}

func TestWorkerCrashExitsWithoutCallback(t *testing.T) {
	t.Parallel()
	fake := fakefly.New(t, fakefly.Options{Behave: func(fakefly.Launch) fakefly.Behavior {
		return fakefly.Behavior{Crash: true}
	}})
	o := newOrchestrator(t, nil)
	_, err := newBackend(t, fake).Launch(t.Context(), spec(o, "t4"))
	require.NoError(t, err)

	fake.AwaitIdle(t, wait)
	require.Empty(t, o.requests())
	require.Empty(t, fake.Machines(app))
	require.Equal(t, 1, fake.Counts().AutoDestroyed)
}

func TestWorkerDuplicatePostsTwice(t *testing.T) {
	t.Parallel()
	fake := fakefly.New(t, fakefly.Options{Behave: func(fakefly.Launch) fakefly.Behavior {
		return fakefly.Behavior{Duplicate: 1}
	}})
	o := newOrchestrator(t, func(n int) int {
		if n > 1 {
			return http.StatusConflict // what an idempotent callback endpoint might say
		}
		return http.StatusOK
	})
	_, err := newBackend(t, fake).Launch(t.Context(), spec(o, "t5"))
	require.NoError(t, err)

	cbs := fake.AwaitCallbacks(t, 2, wait)
	require.Len(t, cbs, 2)
	require.Equal(t, []int{0, 1}, []int{cbs[0].Copy, cbs[1].Copy})
	require.Equal(t, []int{http.StatusOK, http.StatusConflict}, []int{cbs[0].Status, cbs[1].Status})
	reqs := o.requests()
	require.Len(t, reqs, 2)
	require.Equal(t, reqs[0].Body, reqs[1].Body)
	fake.AwaitIdle(t, wait)
	require.Len(t, fake.Callbacks(), 2)
}

func TestWorkerDelayCallsBackLate(t *testing.T) {
	t.Parallel()
	const delay = 300 * time.Millisecond
	fake := fakefly.New(t, fakefly.Options{Behave: func(fakefly.Launch) fakefly.Behavior {
		return fakefly.Behavior{Delay: delay}
	}})
	o := newOrchestrator(t, nil)
	start := time.Now()
	_, err := newBackend(t, fake).Launch(t.Context(), spec(o, "t6"))
	require.NoError(t, err)
	require.Equal(t, 1, fake.Counts().CallbacksPending)

	fake.AwaitCallbacks(t, 1, wait)
	require.GreaterOrEqual(t, o.requests()[0].At.Sub(start), delay)
}

func TestWorkerRetriesCallbackOn5xx(t *testing.T) {
	t.Parallel()
	fake := fakefly.New(t, fakefly.Options{})
	o := newOrchestrator(t, func(n int) int {
		if n <= 2 {
			return http.StatusServiceUnavailable
		}
		return http.StatusOK
	})
	_, err := newBackend(t, fake).Launch(t.Context(), spec(o, "t7"))
	require.NoError(t, err)

	cbs := fake.AwaitCallbacks(t, 1, wait)
	require.Equal(t, http.StatusOK, cbs[0].Status)
	require.Equal(t, 3, cbs[0].Attempts)
	require.Len(t, o.requests(), 3)
}

func TestWorkerDoesNotRetry4xx(t *testing.T) {
	t.Parallel()
	fake := fakefly.New(t, fakefly.Options{})
	o := newOrchestrator(t, func(int) int { return http.StatusUnauthorized })
	_, err := newBackend(t, fake).Launch(t.Context(), spec(o, "t8"))
	require.NoError(t, err)

	cbs := fake.AwaitCallbacks(t, 1, wait)
	require.Equal(t, http.StatusUnauthorized, cbs[0].Status)
	require.Equal(t, 1, cbs[0].Attempts)
}

func TestDestroyedMachineNeverCallsBack(t *testing.T) {
	t.Parallel()
	// The worker runs long enough for the launch and the destroy to happen
	// first even on a loaded machine under -race (200 ms was not).
	fake := fakefly.New(t, fakefly.Options{Behave: func(fakefly.Launch) fakefly.Behavior {
		return fakefly.Behavior{Delay: 2 * time.Second}
	}})
	o := newOrchestrator(t, nil)
	b := newBackend(t, fake)
	m, err := b.Launch(t.Context(), spec(o, "t9"))
	require.NoError(t, err)
	require.NoError(t, b.Destroy(t.Context(), app, m.ID))

	fake.AwaitIdle(t, wait)
	require.Empty(t, o.requests())
	require.Equal(t, []string{m.ID}, fake.Destroyed())
}

// flapsClient is fly-go's client pointed at the fake through the
// environment, as fly-go itself configures it; no t.Parallel with t.Setenv.
func flapsClient(t *testing.T, fake *fakefly.Server) *flaps.Client {
	t.Setenv("FLY_FLAPS_BASE_URL", fake.URL)
	c, err := flaps.NewWithOptions(t.Context(), flaps.NewClientOpts{Tokens: tokens.Parse(fakefly.DefaultToken)})
	require.NoError(t, err)
	return c
}

func TestLingerKeepsTheExitedMachineStopped(t *testing.T) {
	t.Parallel()
	fake := fakefly.New(t, fakefly.Options{Behave: func(fakefly.Launch) fakefly.Behavior {
		return fakefly.Behavior{Crash: true, Linger: true}
	}})
	o := newOrchestrator(t, nil)
	s := spec(o, "t-linger")
	s.Attempt = 3
	m, err := newBackend(t, fake).Launch(t.Context(), s)
	require.NoError(t, err)

	fake.AwaitIdle(t, wait)
	ms := fake.Machines(app)
	require.Len(t, ms, 1)
	require.Equal(t, m.ID, ms[0].ID)
	require.Equal(t, "stopped", ms[0].State, "auto_destroy, but lingering")
	require.Equal(t, "3", ms[0].Metadata["attempt"])
	require.Zero(t, fake.Counts().AutoDestroyed)
}

func TestWithoutAutoDestroyMachineStaysStopped(t *testing.T) {
	fake := fakefly.New(t, fakefly.Options{})
	o := newOrchestrator(t, nil)
	c := flapsClient(t, fake)

	m, err := c.Launch(t.Context(), app, fly.LaunchMachineInput{Name: "keep", Config: &fly.MachineConfig{
		Image: "img", Env: map[string]string{"CALLBACK_URL": o.URL, "TASK_ID": "keep"},
	}})
	require.NoError(t, err)
	require.Equal(t, "created", m.State)
	fake.AwaitIdle(t, wait)

	got, err := c.Get(t.Context(), app, m.ID)
	require.NoError(t, err)
	require.Equal(t, "stopped", got.State)
	require.Equal(t, "keep", got.Name)
	// No CALLBACK_TOKEN, no Authorization header.
	require.Empty(t, o.requests()[0].Auth)

	// A stopped machine may be destroyed without force.
	require.NoError(t, c.Destroy(t.Context(), app, fly.RemoveMachineInput{ID: m.ID}, ""))
	gone, err := c.Get(t.Context(), app, m.ID)
	require.NoError(t, err)
	require.Equal(t, "destroyed", gone.State)
}

func TestDestroyRunningMachineNeedsKill(t *testing.T) {
	fake := fakefly.New(t, fakefly.Options{Behave: func(fakefly.Launch) fakefly.Behavior {
		return fakefly.Behavior{Hang: true}
	}})
	c := flapsClient(t, fake)
	m, err := c.Launch(t.Context(), app, fly.LaunchMachineInput{Config: &fly.MachineConfig{Image: "img"}})
	require.NoError(t, err)

	err = c.Destroy(t.Context(), app, fly.RemoveMachineInput{ID: m.ID}, "")
	var fe *flaps.FlapsError
	require.ErrorAs(t, err, &fe)
	require.Equal(t, http.StatusPreconditionFailed, fe.ResponseStatusCode)

	require.NoError(t, c.Destroy(t.Context(), app, fly.RemoveMachineInput{ID: m.ID, Kill: true}, ""))
	require.Equal(t, []string{m.ID}, fake.Destroyed())
}

func TestListFilters(t *testing.T) {
	fake := fakefly.New(t, fakefly.Options{Behave: func(fakefly.Launch) fakefly.Behavior {
		return fakefly.Behavior{Hang: true}
	}})
	c := flapsClient(t, fake)
	launch := func(task, region string) *fly.Machine {
		m, err := c.Launch(t.Context(), app, fly.LaunchMachineInput{Region: region, Config: &fly.MachineConfig{
			Image: "img", Metadata: map[string]string{"task_id": task, "kind": "tiff"},
		}})
		require.NoError(t, err)
		return m
	}
	a, b, _ := launch("a", "ord"), launch("b", "ams"), launch("c", "ord")

	ids := func(query string) []string {
		ms, err := c.List(t.Context(), app, query)
		require.NoError(t, err)
		var out []string
		for _, m := range ms {
			out = append(out, m.ID)
		}
		return out
	}
	require.Len(t, ids(""), 3)
	require.Equal(t, []string{a.ID}, ids("metadata.task_id=a"))
	require.Len(t, ids("metadata.kind=tiff"), 3)
	require.Empty(t, ids("metadata.task_id=a&metadata.kind=ocr"))
	require.Equal(t, []string{b.ID}, ids("region=ams"))
	require.Len(t, ids("state=started"), 3)

	require.NoError(t, c.Destroy(t.Context(), app, fly.RemoveMachineInput{ID: a.ID, Kill: true}, ""))
	require.Empty(t, ids("metadata.task_id=a"))
	require.Equal(t, []string{a.ID}, ids("metadata.task_id=a&include_deleted=true"))

	// A tombstone keeps the attempt among its metadata.
	d, err := c.Launch(t.Context(), app, fly.LaunchMachineInput{Config: &fly.MachineConfig{
		Image: "img", Metadata: map[string]string{"task_id": "d", "attempt": "2"},
	}})
	require.NoError(t, err)
	require.NoError(t, c.Destroy(t.Context(), app, fly.RemoveMachineInput{ID: d.ID, Kill: true}, ""))
	require.Equal(t, []string{d.ID}, ids("metadata.task_id=d&metadata.attempt=2&include_deleted=true"))
	require.Empty(t, ids("metadata.task_id=d&metadata.attempt=1&include_deleted=true"))

	ms, err := c.List(t.Context(), app, "metadata.task_id=b")
	require.NoError(t, err)
	require.Equal(t, "ams", ms[0].Region)
	require.Equal(t, "b", ms[0].Config.Metadata["task_id"])
	require.Equal(t, "img", ms[0].Config.Image)
}

func TestUnknownAppAndRoute(t *testing.T) {
	fake := fakefly.New(t, fakefly.Options{Apps: []string{app}})
	c := flapsClient(t, fake)
	_, err := c.List(t.Context(), "other-app", "")
	var fe *flaps.FlapsError
	require.ErrorAs(t, err, &fe)
	require.Equal(t, http.StatusNotFound, fe.ResponseStatusCode)

	_, err = c.Get(t.Context(), app, "nope")
	require.ErrorAs(t, err, &fe)
	require.Equal(t, http.StatusNotFound, fe.ResponseStatusCode)

	resp, err := http.Get(fake.URL + "/v1/apps/" + app + "/volumes")
	require.NoError(t, err)
	require.NoError(t, resp.Body.Close())
	require.Equal(t, http.StatusNotFound, resp.StatusCode)
}

func TestTokenSchemes(t *testing.T) {
	t.Parallel()
	fake := fakefly.New(t, fakefly.Options{Token: "fm2_abc,fm2_def"})
	get := func(auth string) int {
		req, err := http.NewRequestWithContext(t.Context(), http.MethodGet, fake.URL+"/v1/apps/"+app+"/machines", nil)
		require.NoError(t, err)
		if auth != "" {
			req.Header.Set("Authorization", auth)
		}
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		require.NoError(t, resp.Body.Close())
		return resp.StatusCode
	}
	require.Equal(t, http.StatusOK, get("FlyV1 fm2_abc,fm2_def"))
	require.Equal(t, http.StatusOK, get("Bearer fm2_abc,fm2_def"))
	require.Equal(t, http.StatusUnauthorized, get("fm2_abc,fm2_def"))
	require.Equal(t, http.StatusUnauthorized, get("Bearer fm2_abc"))
	require.Equal(t, http.StatusUnauthorized, get(""))
}

func TestFailDestroysKeepsTheMachine(t *testing.T) {
	fake := fakefly.New(t, fakefly.Options{Behave: func(fakefly.Launch) fakefly.Behavior {
		return fakefly.Behavior{Hang: true}
	}})
	c := flapsClient(t, fake)
	m, err := c.Launch(t.Context(), app, fly.LaunchMachineInput{Config: &fly.MachineConfig{Image: "img"}})
	require.NoError(t, err)
	fake.FailDestroys(http.StatusServiceUnavailable, 1)
	req, err := http.NewRequestWithContext(t.Context(), http.MethodDelete, fake.URL+"/v1/apps/"+app+"/machines/"+m.ID+"?kill=true", nil)
	require.NoError(t, err)
	req.Header.Set("Authorization", "Bearer "+fakefly.DefaultToken)
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	require.NoError(t, resp.Body.Close())
	require.Equal(t, http.StatusServiceUnavailable, resp.StatusCode)
	require.Len(t, fake.Machines(app), 1, "the machine lives on")
	_, err = c.List(t.Context(), app, "")
	require.NoError(t, err, "other routes answer")

	require.NoError(t, c.Destroy(t.Context(), app, fly.RemoveMachineInput{ID: m.ID, Kill: true}, ""))
	require.Equal(t, []string{m.ID}, fake.Destroyed())
}

func TestFailInjectsStatusOnAnyRoute(t *testing.T) {
	t.Parallel()
	fake := fakefly.New(t, fakefly.Options{RetryAfter: 3 * time.Second})
	fake.Fail(http.StatusTooManyRequests, 2)
	do := func(method, path string) *http.Response {
		req, err := http.NewRequestWithContext(t.Context(), method, fake.URL+path, nil)
		require.NoError(t, err)
		req.Header.Set("Authorization", "Bearer "+fakefly.DefaultToken)
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		require.NoError(t, resp.Body.Close())
		return resp
	}
	r1 := do(http.MethodGet, "/v1/apps/"+app+"/machines")
	r2 := do(http.MethodDelete, "/v1/apps/"+app+"/machines/x")
	r3 := do(http.MethodGet, "/v1/apps/"+app+"/machines")
	require.Equal(t, http.StatusTooManyRequests, r1.StatusCode)
	require.Equal(t, "3", r1.Header.Get("Retry-After"))
	require.Equal(t, http.StatusTooManyRequests, r2.StatusCode)
	require.Equal(t, http.StatusOK, r3.StatusCode)
}

func TestAttemptCountsEveryRequestForATask(t *testing.T) {
	t.Parallel()
	fake := fakefly.New(t, fakefly.Options{Behave: func(l fakefly.Launch) fakefly.Behavior {
		if l.Attempt == 1 {
			return fakefly.Behavior{LaunchStatus: http.StatusUnprocessableEntity}
		}
		return fakefly.Behavior{Hang: true}
	}})
	o := newOrchestrator(t, nil)
	b := newBackend(t, fake)
	_, err := b.Launch(t.Context(), spec(o, "t10"))
	require.ErrorIs(t, err, compute.ErrPermanent)
	_, err = b.Launch(t.Context(), spec(o, "t10"))
	require.NoError(t, err)

	ls := fake.Launches()
	require.Len(t, ls, 2)
	require.Equal(t, []int{1, 2}, []int{ls[0].Attempt, ls[1].Attempt})
	require.True(t, ls[0].Rejected)
	require.Empty(t, ls[0].MachineID)
	require.False(t, ls[1].Rejected)
	require.NotEmpty(t, ls[1].MachineID)
}

// TestManyLaunches drives a few thousand launches concurrently through the
// real client: every task gets exactly one callback, every machine is
// auto-destroyed, and details are dropped past DetailLimit.
func TestManyLaunches(t *testing.T) {
	t.Parallel()
	const n = 2000
	fake := fakefly.New(t, fakefly.Options{DetailLimit: 100})
	var got atomic.Int64
	o := newOrchestrator(t, func(int) int { got.Add(1); return http.StatusOK })
	b := newBackend(t, fake)

	var g errgroup.Group
	g.SetLimit(32)
	for i := range n {
		g.Go(func() error {
			_, err := b.Launch(t.Context(), spec(o, fmt.Sprintf("task-%05d", i)))
			return err
		})
	}
	require.NoError(t, g.Wait())

	fake.AwaitCallbacks(t, n, 60*time.Second)
	fake.AwaitIdle(t, wait)
	c := fake.Counts()
	require.Positive(t, c.MaxLive)
	require.LessOrEqual(t, c.MaxLive, n)
	c.MaxLive = 0 // how many overlapped depends on timing
	require.Equal(t, fakefly.Counts{Launches: n, Created: n, AutoDestroyed: n, Callbacks: n}, c)
	require.Equal(t, int64(n), got.Load())

	ls := fake.Launches()
	require.Len(t, ls, n)
	require.NotNil(t, ls[99].Env)
	require.Nil(t, ls[100].Env)
	require.Nil(t, ls[100].Config)
	require.NotEmpty(t, ls[100].TaskID)
	seen := map[string]bool{}
	for _, cb := range fake.Callbacks() {
		require.False(t, seen[cb.TaskID], "task %s called back twice", cb.TaskID)
		seen[cb.TaskID] = true
	}
	require.Len(t, seen, n)
	var body map[string]string
	require.NoError(t, json.Unmarshal(fake.Callbacks()[0].Body, &body))
	require.Equal(t, "success", body["status"])
}
