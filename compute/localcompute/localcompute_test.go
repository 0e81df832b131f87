//go:build unix

package localcompute_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/arke-institute/orchestrator/compute"
	"github.com/arke-institute/orchestrator/compute/localcompute"
	"github.com/arke-institute/orchestrator/internal/harness/syncbuf"
)

// workerEnv switches the test binary into worker mode (see TestMain).
const workerEnv = "LOCALCOMPUTE_TEST_WORKER"

// TestMain lets the test binary double as the worker program: re-executed
// with LOCALCOMPUTE_TEST_WORKER=1 it runs worker(os.Args[1]) instead of the
// tests, so the runner is tested on real processes without building one.
func TestMain(m *testing.M) {
	if os.Getenv(workerEnv) == "1" {
		os.Exit(worker(os.Args[1]))
	}
	os.Exit(m.Run())
}

// worker is the test worker. Every mode talks to the peer at CALLBACK_URL
// with the bearer CALLBACK_TOKEN, as a real worker posts its callback:
//
//   - report: posts its environment and working directory, writes a line to
//     stdout and one to stderr, and exits 0;
//   - gate: posts /start, then waits on /wait until the test releases it;
//   - family: starts a grandchild in gate mode, then runs gate itself.
func worker(mode string) int {
	post := func(suffix string, body any) error {
		data, _ := json.Marshal(body)
		req, err := http.NewRequest(http.MethodPost, os.Getenv("CALLBACK_URL")+suffix, bytes.NewReader(data))
		if err != nil {
			return err
		}
		req.Header.Set("Authorization", "Bearer "+os.Getenv("CALLBACK_TOKEN"))
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return err
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("peer answered %d", resp.StatusCode)
		}
		return nil
	}
	gate := func() int {
		role := os.Getenv("TEST_ROLE")
		if role == "" {
			role = "worker"
		}
		if err := post("/start", start{PID: os.Getpid(), Role: role}); err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		if err := post("/wait", nil); err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		return 0
	}
	switch mode {
	case "report":
		wd, _ := os.Getwd()
		if err := post("", report{Env: os.Environ(), Dir: wd}); err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		fmt.Println("hello from stdout")
		fmt.Fprint(os.Stderr, "hello from stderr") // no newline: flushed at exit
		return 0
	case "gate":
		return gate()
	case "family":
		self, _ := os.Executable()
		child := exec.Command(self, "gate")
		child.Env = append(os.Environ(), "TEST_ROLE=grandchild")
		if err := child.Start(); err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		return gate()
	}
	fmt.Fprintln(os.Stderr, "unknown mode", mode)
	return 2
}

type report struct {
	Env []string `json:"env"`
	Dir string   `json:"dir"`
}

type start struct {
	PID  int    `json:"pid"`
	Role string `json:"role"`
}

// peer stands in for the orchestrator's callback endpoint: it checks every
// worker's bearer token, records what workers report, and holds gate
// workers on /wait until released.
type peer struct {
	*httptest.Server
	t *testing.T

	mu        sync.Mutex
	tokens    map[string]string // task -> expected token
	reports   map[string]report
	starts    map[string][]start // task -> processes that started
	released  map[string]chan struct{}
	active    int // gate workers started and not yet released
	maxActive int
}

func newPeer(t *testing.T) *peer {
	p := &peer{
		t: t, tokens: map[string]string{}, reports: map[string]report{},
		starts: map[string][]start{}, released: map[string]chan struct{}{},
	}
	p.Server = httptest.NewServer(http.HandlerFunc(p.serve))
	t.Cleanup(p.Close)
	return p
}

// serve answers /cb/{task}, /cb/{task}/start and /cb/{task}/wait.
func (p *peer) serve(w http.ResponseWriter, r *http.Request) {
	task, action, _ := strings.Cut(strings.TrimPrefix(r.URL.Path, "/cb/"), "/")
	p.mu.Lock()
	token, ok := p.tokens[task]
	p.mu.Unlock()
	if !ok || r.Header.Get("Authorization") != "Bearer "+token {
		http.Error(w, "bad token", http.StatusUnauthorized)
		return
	}
	switch action {
	case "":
		var rep report
		if err := json.NewDecoder(r.Body).Decode(&rep); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		p.mu.Lock()
		p.reports[task] = rep
		p.mu.Unlock()
	case "start":
		var s start
		if err := json.NewDecoder(r.Body).Decode(&s); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		p.mu.Lock()
		p.starts[task] = append(p.starts[task], s)
		if s.Role == "worker" {
			p.active++
			p.maxActive = max(p.maxActive, p.active)
		}
		p.mu.Unlock()
	case "wait":
		// Reading the body to its end lets the server notice the worker
		// dying (the request context ends) while the handler waits.
		_, _ = io.Copy(io.Discard, r.Body)
		select {
		case <-p.gate(task):
		case <-r.Context().Done():
			return
		}
		p.mu.Lock()
		p.active--
		p.mu.Unlock()
	}
}

func (p *peer) gate(task string) chan struct{} {
	p.mu.Lock()
	defer p.mu.Unlock()
	ch, ok := p.released[task]
	if !ok {
		ch = make(chan struct{})
		p.released[task] = ch
	}
	return ch
}

// release lets the task's gate workers finish.
func (p *peer) release(task string) { close(p.gate(task)) }

// spec is a machine for task, whose worker calls back to the peer.
func (p *peer) spec(app, task string) compute.MachineSpec {
	token := "token-" + task + "-s3cr3t"
	p.mu.Lock()
	p.tokens[task] = token
	p.mu.Unlock()
	return compute.MachineSpec{
		App: app, Name: task, TaskID: task, BatchID: "batch1", Phase: "TIFF_CONVERSION", Attempt: 1,
		Env: map[string]string{
			"TASK_ID":        task,
			"BATCH_ID":       "batch1",
			"INPUT_R2_KEY":   "staging/batch1/" + task + ".tif",
			"INPUT_URL":      "http://127.0.0.1:1/arke-staging/staging/batch1/" + task + ".tif?X-Amz-Signature=s3cr3t-signature",
			"R2_BUCKET":      "arke-staging",
			"CALLBACK_URL":   p.URL + "/cb/" + task,
			"CALLBACK_TOKEN": token,
		},
	}
}

// started returns the processes of task that reported in (awaited).
func (p *peer) awaitStarts(task string, n int) []start {
	p.t.Helper()
	var got []start
	require.Eventually(p.t, func() bool {
		p.mu.Lock()
		defer p.mu.Unlock()
		got = slices.Clone(p.starts[task])
		return len(got) >= n
	}, 30*time.Second, 5*time.Millisecond, "task %s: %d processes to start", task, n)
	return got
}

// startedTasks lists the tasks with a started worker, sorted.
func (p *peer) startedTasks() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	var tasks []string
	for task := range p.starts {
		tasks = append(tasks, task)
	}
	slices.Sort(tasks)
	return tasks
}

// newBackend starts a runner whose apps run this test binary in a mode.
func newBackend(t *testing.T, maxConcurrent int, logger *slog.Logger) (*localcompute.Backend, string) {
	t.Helper()
	self, err := os.Executable()
	require.NoError(t, err)
	dir := t.TempDir()
	b, err := localcompute.New(localcompute.Config{
		Commands: map[string][]string{
			"report-app": {self, "report"},
			"gate-app":   {self, "gate"},
			"family-app": {self, "family"},
		},
		MaxConcurrent: maxConcurrent,
		Dir:           dir,
		// Without GORACE, a -race worker sleeps a second before exiting.
		BaseEnv: []string{workerEnv + "=1", "SHARED=from-base", "GORACE=atexit_sleep_ms=0"},
		Logger:  logger,
	})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, b.Close()) })
	return b, dir
}

// awaitGone waits until the runner has forgotten the task's machines.
func awaitGone(t *testing.T, b *localcompute.Backend, app, task string) {
	t.Helper()
	require.Eventually(t, func() bool {
		ms, err := b.FindByTask(context.Background(), app, task)
		require.NoError(t, err)
		return len(ms) == 0
	}, 30*time.Second, 5*time.Millisecond, "machines of %s to be gone", task)
}

// processGone reports whether pid has exited: it no longer exists, or it is
// a zombie (an orphan waiting for an init that, in some containers, never
// reaps it).
func processGone(pid int) bool {
	if err := syscall.Kill(pid, 0); err != nil {
		return true
	}
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	// "pid (comm) S ...": the state follows the last parenthesis.
	i := bytes.LastIndexByte(stat, ')')
	return i >= 0 && i+2 < len(stat) && stat[i+2] == 'Z'
}

func requireProcessGone(t *testing.T, pid int) {
	t.Helper()
	require.True(t, processGone(pid), "process %d must be gone", pid)
}

// TestEnvironmentContract: the worker gets exactly the pass-through
// variables, BaseEnv, the spec's Env (which wins) and its machine's id as
// FLY_MACHINE_ID, in Dir, and none of
// the orchestrator's secrets; its output is logged with the task's ids and
// no environment value; the finished machine is forgotten.
func TestEnvironmentContract(t *testing.T) {
	t.Setenv("FLY_API_TOKEN", "fly-s3cr3t")
	t.Setenv("ADMIN_TOKEN", "admin-s3cr3t")
	t.Setenv("DATABASE_URL", "postgres://user:db-s3cr3t@localhost/x")
	t.Setenv("TMPDIR", os.TempDir())
	t.Setenv("LANG", "C.UTF-8")

	logs := &syncbuf.Buffer{}
	logger := slog.New(slog.NewJSONHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	b, dir := newBackend(t, 2, logger)
	p := newPeer(t)

	spec := p.spec("report-app", "task1")
	spec.Env["SHARED"] = "from-spec"
	m, err := b.Launch(context.Background(), spec)
	require.NoError(t, err)
	require.True(t, strings.HasPrefix(m.ID, "local-"), m.ID)
	require.Equal(t, localcompute.StateStarted, m.State)
	require.Equal(t, "report-app", m.App)
	require.Equal(t, "task1", m.TaskID)

	var rep report
	require.Eventually(t, func() bool {
		p.mu.Lock()
		defer p.mu.Unlock()
		var ok bool
		rep, ok = p.reports["task1"]
		return ok
	}, 30*time.Second, 5*time.Millisecond, "the worker's callback")

	want := []string{workerEnv + "=1", "SHARED=from-spec", "GORACE=atexit_sleep_ms=0", "FLY_MACHINE_ID=" + m.ID}
	for _, k := range localcompute.PassThroughEnv {
		if v, ok := os.LookupEnv(k); ok {
			want = append(want, k+"="+v)
		}
	}
	for k, v := range spec.Env {
		if k != "SHARED" {
			want = append(want, k+"="+v)
		}
	}
	require.ElementsMatch(t, want, rep.Env, "the worker's whole environment")
	require.Contains(t, rep.Env, "LANG=C.UTF-8")
	for _, kv := range rep.Env {
		name, _, _ := strings.Cut(kv, "=")
		require.NotContains(t, []string{"FLY_API_TOKEN", "ADMIN_TOKEN", "DATABASE_URL"}, name, "no orchestrator secret")
	}
	wantDir, _ := filepath.EvalSymlinks(dir)
	gotDir, _ := filepath.EvalSymlinks(rep.Dir)
	require.Equal(t, wantDir, gotDir)

	awaitGone(t, b, "report-app", "task1")
	require.Eventually(t, func() bool { return strings.Contains(logs.String(), `"msg":"local machine exited"`) },
		30*time.Second, 5*time.Millisecond)
	out := logs.String()
	for _, want := range []string{
		`"level":"DEBUG","msg":"worker output","machine_id":"` + m.ID + `","app":"report-app","task_id":"task1","batch_id":"batch1","phase":"TIFF_CONVERSION","stream":"stdout","line":"hello from stdout"`,
		`"level":"INFO","msg":"worker output","machine_id":"` + m.ID + `","app":"report-app","task_id":"task1","batch_id":"batch1","phase":"TIFF_CONVERSION","stream":"stderr","line":"hello from stderr"`,
		`"exit_code":0`,
	} {
		require.Contains(t, out, want)
	}
	for _, v := range spec.Env {
		if strings.Contains(v, "s3cr3t") {
			require.NotContains(t, out, v, "environment values are never logged")
		}
	}
}

// TestConcurrencyLimit: launches beyond MaxConcurrent are accepted as
// "created" and start in launch order as slots free; never more run at once.
func TestConcurrencyLimit(t *testing.T) {
	t.Parallel()
	b, _ := newBackend(t, 2, nil)
	p := newPeer(t)
	ctx := context.Background()

	tasks := []string{"t1", "t2", "t3", "t4", "t5"}
	ids := map[string]string{}
	for i, task := range tasks {
		m, err := b.Launch(ctx, p.spec("gate-app", task))
		require.NoError(t, err)
		want := localcompute.StateStarted
		if i >= 2 {
			want = localcompute.StateCreated
		}
		require.Equal(t, want, m.State, task)
		require.NotContains(t, ids, m.ID)
		ids[m.ID] = task
	}

	state := func(task string) string {
		ms, err := b.FindByTask(ctx, "gate-app", task)
		require.NoError(t, err)
		require.Len(t, ms, 1, task)
		return ms[0].State
	}
	p.awaitStarts("t1", 1)
	p.awaitStarts("t2", 1)
	// t3 can only start once t1 or t2 has exited, and both are held.
	require.Equal(t, []string{"t1", "t2"}, p.startedTasks())
	require.Equal(t, localcompute.StateCreated, state("t3"))

	p.release("t1")
	p.awaitStarts("t3", 1)
	awaitGone(t, b, "gate-app", "t1")
	require.Equal(t, []string{"t1", "t2", "t3"}, p.startedTasks(), "queued launches start in order")
	require.Equal(t, localcompute.StateStarted, state("t3"))
	require.Equal(t, localcompute.StateCreated, state("t4"))

	p.release("t2")
	p.release("t3")
	p.awaitStarts("t4", 1)
	p.awaitStarts("t5", 1)
	p.release("t4")
	p.release("t5")
	for _, task := range tasks {
		awaitGone(t, b, "gate-app", task)
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	require.Equal(t, 2, p.maxActive, "at most MaxConcurrent workers ran at once")
}

// TestDestroy: Destroy drops a queued launch (it never starts), kills a
// hanging worker and what it started, and is a no-op for unknown or
// finished machines.
func TestDestroy(t *testing.T) {
	t.Parallel()
	b, _ := newBackend(t, 1, nil)
	p := newPeer(t)
	ctx := context.Background()

	hung, err := b.Launch(ctx, p.spec("family-app", "hung"))
	require.NoError(t, err)
	queued, err := b.Launch(ctx, p.spec("gate-app", "queued"))
	require.NoError(t, err)
	require.Equal(t, localcompute.StateCreated, queued.State)

	require.NoError(t, b.Destroy(ctx, "gate-app", queued.ID))
	ms, err := b.FindByTask(ctx, "gate-app", "queued")
	require.NoError(t, err)
	require.Empty(t, ms)

	procs := p.awaitStarts("hung", 2) // the worker and its grandchild
	require.NoError(t, b.Destroy(ctx, "other-app", hung.ID), "another app's machine is unknown")
	ms, err = b.FindByTask(ctx, "family-app", "hung")
	require.NoError(t, err)
	require.Equal(t, []compute.Machine{{ID: hung.ID, App: "family-app", State: localcompute.StateStarted, TaskID: "hung",
		BatchID: "batch1", Attempt: 1, CreatedAt: hung.CreatedAt}}, ms)
	require.False(t, hung.CreatedAt.IsZero())
	byBatch, err := b.ListByBatch(ctx, "family-app", "batch1")
	require.NoError(t, err)
	require.Equal(t, ms, byBatch, "the batch's machines of the app")
	owned, err := b.ListOwned(ctx, "family-app")
	require.NoError(t, err)
	require.Equal(t, ms, owned, "the app's machines")

	require.NoError(t, b.Destroy(ctx, "family-app", hung.ID))
	ms, err = b.FindByTask(ctx, "family-app", "hung")
	require.NoError(t, err)
	require.Empty(t, ms)
	byBatch, err = b.ListByBatch(ctx, "family-app", "batch1")
	require.NoError(t, err)
	require.Empty(t, byBatch)
	owned, err = b.ListOwned(ctx, "family-app")
	require.NoError(t, err)
	require.Empty(t, owned)
	for _, s := range procs {
		if s.Role == "worker" {
			requireProcessGone(t, s.PID)
		} else {
			// The grandchild is not ours to reap: await its death.
			require.Eventually(t, func() bool { return processGone(s.PID) }, 30*time.Second, 5*time.Millisecond,
				"the worker's child %d is killed with it", s.PID)
		}
	}

	// The slot is free again; the dropped launch must not take it.
	next, err := b.Launch(ctx, p.spec("gate-app", "next"))
	require.NoError(t, err)
	require.Equal(t, localcompute.StateStarted, next.State)
	p.awaitStarts("next", 1)
	require.NotContains(t, p.startedTasks(), "queued")
	p.release("next")
	awaitGone(t, b, "gate-app", "next")

	require.NoError(t, b.Destroy(ctx, "gate-app", next.ID), "a finished machine")
	require.NoError(t, b.Destroy(ctx, "gate-app", "local-nope-1"), "an unknown machine")
	require.NoError(t, b.Destroy(ctx, "family-app", hung.ID), "destroyed twice")
}

// TestShutdown kills running workers, drops queued ones and refuses later
// launches.
func TestShutdown(t *testing.T) {
	t.Parallel()
	b, _ := newBackend(t, 1, nil)
	p := newPeer(t)
	ctx := context.Background()

	_, err := b.Launch(ctx, p.spec("gate-app", "running"))
	require.NoError(t, err)
	_, err = b.Launch(ctx, p.spec("gate-app", "waiting"))
	require.NoError(t, err)
	procs := p.awaitStarts("running", 1)

	require.NoError(t, b.Shutdown(ctx))
	requireProcessGone(t, procs[0].PID)
	for _, task := range []string{"running", "waiting"} {
		ms, err := b.FindByTask(ctx, "gate-app", task)
		require.NoError(t, err)
		require.Empty(t, ms)
	}
	require.Equal(t, []string{"running"}, p.startedTasks(), "a queued launch never starts after shutdown")

	_, err = b.Launch(ctx, p.spec("gate-app", "late"))
	require.ErrorIs(t, err, compute.ErrPermanent)
	require.NoError(t, b.Close(), "closing twice")
}

func TestUnknownApp(t *testing.T) {
	t.Parallel()
	b, _ := newBackend(t, 1, nil)
	_, err := b.Launch(context.Background(), compute.MachineSpec{App: "arke-tiff-worker", TaskID: "t1"})
	require.ErrorIs(t, err, compute.ErrPermanent)
	require.EqualError(t, err, `local machine runner: no worker command for app "arke-tiff-worker" (configured: family-app, gate-app, report-app)`)
}

func TestNewValidates(t *testing.T) {
	t.Parallel()
	self, err := os.Executable()
	require.NoError(t, err)
	notExecutable := filepath.Join(t.TempDir(), "worker")
	require.NoError(t, os.WriteFile(notExecutable, []byte("#!/bin/sh\n"), 0o644))

	for name, tc := range map[string]struct {
		cfg  localcompute.Config
		want string
	}{
		"NoCommands": {localcompute.Config{}, "no worker commands configured"},
		"EmptyArgv":  {localcompute.Config{Commands: map[string][]string{"a": {}}}, `app "a": empty command`},
		"RelativeProgram": {localcompute.Config{Commands: map[string][]string{"a": {"bin/worker"}}},
			`app "a": worker program bin/worker must be an absolute path`},
		"MissingProgram": {localcompute.Config{Commands: map[string][]string{"a": {"/nonexistent/worker"}}},
			`app "a": worker program: exec: "/nonexistent/worker"`},
		"NotExecutable": {localcompute.Config{Commands: map[string][]string{"a": {notExecutable}}},
			"permission denied"},
		"RelativeDir": {localcompute.Config{Commands: map[string][]string{"a": {self}}, Dir: "work"},
			"working directory work must be absolute"},
		"BadBaseEnv": {localcompute.Config{Commands: map[string][]string{"a": {self}}, BaseEnv: []string{"s3cr3t"}},
			"BaseEnv entries must be KEY=value"},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			_, err := localcompute.New(tc.cfg)
			require.ErrorContains(t, err, tc.want)
			require.NotContains(t, err.Error(), "s3cr3t")
		})
	}
}
