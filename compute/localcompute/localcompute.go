// Package localcompute implements compute.Backend with local subprocesses:
// the "local machine runner" used when no FLY_API_TOKEN is set, so a whole
// batch can run on one laptop. Each launch runs the worker program of the
// spec's app with exactly the environment a Fly machine would get, and the
// process exiting is the machine destroying itself.
//
// It behaves like the Fly Machines API where the launcher can tell:
//
//   - Launch never waits for a slot. Beyond MaxConcurrent running processes,
//     launches are accepted and queued (state "created"), and start in launch
//     order as slots free, as Fly accepts a machine before it boots. The
//     launcher's pacing and the tasks' timeouts therefore work unchanged.
//   - FindByTask lists queued and running machines of a task; a finished
//     process is forgotten at once (auto-destroy).
//   - Destroy kills the process (its whole process group on Unix) or drops it
//     from the queue; an unknown or finished machine is not an error.
//
// Machine IDs are "local-<run>-<n>": <run> is random per Backend, because
// task rows keep machine IDs across orchestrator restarts and the timeout
// sweep destroys by ID, so a counter restarting at 1 would let it kill an
// unrelated new machine.
package localcompute

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/arke-institute/orchestrator/compute"
)

// PassThroughEnv are the only variables of the orchestrator's own
// environment a worker inherits, because a program needs them to run at all
// (find libraries and helpers, a home and a temporary folder, a locale).
// Everything else stays behind: the orchestrator's environment holds secrets
// (FLY_API_TOKEN, ADMIN_TOKEN, DATABASE_URL) that a worker must never see, and
// a worker on Fly would not see them either.
var PassThroughEnv = []string{"PATH", "HOME", "TMPDIR", "LANG"}

// Machine states, as the Fly Machines API names them.
const (
	// StateCreated is a launch waiting for a free slot.
	StateCreated = "created"
	// StateStarted is a running worker process.
	StateStarted = "started"
)

// waitDelay bounds how long a finished worker's output is drained when a
// child of it still holds its stdout or stderr open.
const waitDelay = 5 * time.Second

// maxLineBytes caps one logged line of worker output.
const maxLineBytes = 16 << 10

// Config configures the runner. Only cmd/ reads the environment; it fills
// this struct once.
type Config struct {
	// Commands maps an app name (MachineSpec.App, the Fly app) to the argv
	// that runs its worker, e.g. "arke-tiff-worker": {"/abs/bin/worker",
	// "tiff"}. Required, at least one. argv[0] must be an absolute path or a
	// bare name found on PATH, and executable: New checks, so a missing
	// worker build stops the orchestrator at start rather than failing every
	// task.
	Commands map[string][]string
	// MaxConcurrent is how many workers run at once; more launches queue.
	// Zero or less means runtime.NumCPU().
	MaxConcurrent int
	// Dir is the workers' working directory, and must be absolute: the
	// orchestrator's own working directory is not stable (its embedded S3
	// server changes it). Empty means os.TempDir().
	Dir string
	// BaseEnv is extra "KEY=value" environment for every worker (on top of
	// PassThroughEnv, and below the spec's Env, which wins).
	BaseEnv []string
	// Logger receives lifecycle lines and the workers' output, each line
	// with machine_id, task_id and batch_id: stdout at debug, stderr at info.
	// Environment values are never logged. Nil discards.
	Logger *slog.Logger
}

// Backend runs machines as local processes. It is safe for concurrent use.
type Backend struct {
	commands map[string][]string
	apps     string // the configured apps, for error messages
	max      int
	dir      string
	baseEnv  map[string]string
	logger   *slog.Logger
	run      string // random per Backend, in every machine ID

	mu       sync.Mutex
	next     int64
	machines map[string]*machine // queued and running, by ID
	queue    []*machine          // FIFO of queued launches
	running  int                 // started processes that have not exited
	closed   bool
}

var _ compute.Backend = (*Backend)(nil)

// machine is one launch. Fields other than the immutable ones are guarded
// by Backend.mu.
type machine struct {
	id, app, taskID, batchID, phase string
	attempt                         int
	created                         time.Time
	argv                            []string
	env                             []string

	state     string
	cmd       *exec.Cmd
	destroyed bool
	started   time.Time
	exited    chan struct{} // closed when a started process has been reaped
}

// New validates cfg and returns a runner with nothing running.
func New(cfg Config) (*Backend, error) {
	var problems []string
	if len(cfg.Commands) == 0 {
		problems = append(problems, "no worker commands configured (Commands is empty)")
	}
	commands := make(map[string][]string, len(cfg.Commands))
	for _, app := range slices.Sorted(maps.Keys(cfg.Commands)) {
		argv := cfg.Commands[app]
		if len(argv) == 0 || argv[0] == "" {
			problems = append(problems, fmt.Sprintf("app %q: empty command", app))
			continue
		}
		prog := argv[0]
		if strings.ContainsRune(prog, os.PathSeparator) && !filepath.IsAbs(prog) {
			problems = append(problems, fmt.Sprintf("app %q: worker program %s must be an absolute path", app, prog))
			continue
		}
		resolved, err := exec.LookPath(prog)
		if err != nil {
			problems = append(problems, fmt.Sprintf("app %q: worker program: %v", app, err))
			continue
		}
		if !filepath.IsAbs(resolved) {
			// LookPath found it through a relative PATH entry.
			if resolved, err = filepath.Abs(resolved); err != nil {
				problems = append(problems, fmt.Sprintf("app %q: worker program: %v", app, err))
				continue
			}
		}
		commands[app] = append([]string{resolved}, argv[1:]...)
	}
	dir := cfg.Dir
	if dir == "" {
		dir = os.TempDir()
	}
	if !filepath.IsAbs(dir) {
		problems = append(problems, fmt.Sprintf("working directory %s must be absolute", dir))
	} else if fi, err := os.Stat(dir); err != nil {
		problems = append(problems, fmt.Sprintf("working directory: %v", err))
	} else if !fi.IsDir() {
		problems = append(problems, fmt.Sprintf("working directory %s is not a directory", dir))
	}

	baseEnv := make(map[string]string)
	for _, k := range PassThroughEnv {
		if v, ok := os.LookupEnv(k); ok {
			baseEnv[k] = v
		}
	}
	for _, kv := range cfg.BaseEnv {
		k, v, ok := strings.Cut(kv, "=")
		if !ok || k == "" {
			// Never quote the entry: it may be a secret missing its key.
			problems = append(problems, "BaseEnv entries must be KEY=value")
			continue
		}
		baseEnv[k] = v
	}
	if len(problems) > 0 {
		return nil, fmt.Errorf("configuring the local machine runner: %s", strings.Join(problems, "; "))
	}

	maxConcurrent := cfg.MaxConcurrent
	if maxConcurrent <= 0 {
		maxConcurrent = runtime.NumCPU()
	}
	logger := cfg.Logger
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	var run [3]byte
	_, _ = rand.Read(run[:])
	return &Backend{
		commands: commands,
		apps:     strings.Join(slices.Sorted(maps.Keys(commands)), ", "),
		max:      maxConcurrent,
		dir:      dir,
		baseEnv:  baseEnv,
		logger:   logger,
		run:      hex.EncodeToString(run[:]),
		machines: make(map[string]*machine),
	}, nil
}

// Launch implements compute.Backend. It returns at once: the machine is
// "started" when a slot was free and "created" (queued) otherwise. An app
// with no configured command is a permanent error naming the ones there are.
// The spec's Image, Region and sizing have no local meaning and are ignored;
// Env is the worker's environment (see Config.BaseEnv).
func (b *Backend) Launch(_ context.Context, spec compute.MachineSpec) (compute.Machine, error) {
	argv, ok := b.commands[spec.App]
	if !ok {
		return compute.Machine{}, compute.Permanent(fmt.Errorf(
			"local machine runner: no worker command for app %q (configured: %s)", spec.App, b.apps), 0)
	}

	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		return compute.Machine{}, compute.Permanent(errors.New("local machine runner is shut down"), 0)
	}
	b.next++
	id := fmt.Sprintf("local-%s-%d", b.run, b.next)
	m := &machine{
		id:      id,
		app:     spec.App,
		taskID:  spec.TaskID,
		batchID: spec.BatchID,
		phase:   spec.Phase,
		attempt: spec.Attempt,
		created: time.Now(),
		argv:    argv,
		env:     b.environ(spec.Env, id),
		state:   StateCreated,
	}
	if b.running < b.max {
		if err := b.startLocked(m); err != nil {
			kind := compute.Ambiguous
			if errors.Is(err, fs.ErrNotExist) || errors.Is(err, fs.ErrPermission) || errors.Is(err, exec.ErrNotFound) {
				kind = compute.Permanent
			}
			return compute.Machine{}, kind(fmt.Errorf("starting the %s worker for task %s: %w", spec.App, spec.TaskID, err), 0)
		}
	} else {
		b.queue = append(b.queue, m)
		b.logger.Debug("local machine queued", b.attrs(m, "queued", len(b.queue))...)
	}
	b.machines[m.id] = m
	return m.view(), nil
}

// FindByTask implements compute.Backend: the app's queued and running
// machines of the task, of every attempt, in launch order.
func (b *Backend) FindByTask(_ context.Context, app, taskID string) ([]compute.Machine, error) {
	return b.list(func(m *machine) bool { return m.app == app && m.taskID == taskID }), nil
}

// ListByBatch implements compute.Backend: the app's queued and running
// machines of the batch, in launch order.
func (b *Backend) ListByBatch(_ context.Context, app, batchID string) ([]compute.Machine, error) {
	return b.list(func(m *machine) bool { return m.app == app && m.batchID == batchID }), nil
}

// ListOwned implements compute.Backend: the app's queued and running
// machines, all of them launched by this runner with a task id.
func (b *Backend) ListOwned(_ context.Context, app string) ([]compute.Machine, error) {
	return b.list(func(m *machine) bool { return m.app == app && m.taskID != "" }), nil
}

// list is the machines that match, in launch order.
func (b *Backend) list(match func(*machine) bool) []compute.Machine {
	b.mu.Lock()
	defer b.mu.Unlock()
	var found []*machine
	for _, m := range b.machines {
		if match(m) {
			found = append(found, m)
		}
	}
	slices.SortFunc(found, func(x, y *machine) int { return compareIDs(x.id, y.id) })
	out := make([]compute.Machine, 0, len(found))
	for _, m := range found {
		out = append(out, m.view())
	}
	return out
}

// Destroy implements compute.Backend. A queued machine is dropped; a running
// one is killed and Destroy waits (until ctx ends) for the process to be
// gone. An unknown, finished or other app's machine is not an error.
func (b *Backend) Destroy(ctx context.Context, app, machineID string) error {
	b.mu.Lock()
	m, ok := b.machines[machineID]
	if !ok || m.app != app {
		b.mu.Unlock()
		return nil
	}
	delete(b.machines, machineID)
	if m.state == StateCreated {
		b.queue = slices.DeleteFunc(b.queue, func(q *machine) bool { return q == m })
		b.mu.Unlock()
		b.logger.Debug("local machine destroyed before it started", b.attrs(m)...)
		return nil
	}
	m.destroyed = true
	b.mu.Unlock()

	if err := killProcess(m.cmd.Process); err != nil && !errors.Is(err, os.ErrProcessDone) {
		return compute.Ambiguous(fmt.Errorf("killing local machine %s: %w", machineID, err), 0)
	}
	select {
	case <-m.exited:
		return nil
	case <-ctx.Done():
		return compute.Ambiguous(fmt.Errorf("waiting for local machine %s to exit: %w", machineID, ctx.Err()), 0)
	}
}

// Shutdown stops the runner: later launches fail, queued launches are
// dropped, and running workers are killed. It waits until they have exited
// or ctx ends. serve calls it when stopping, so no worker outlives the
// orchestrator that launched it (their tasks time out and are retried by
// the next run, as with a machine lost on Fly).
func (b *Backend) Shutdown(ctx context.Context) error {
	b.mu.Lock()
	b.closed = true
	for _, m := range b.queue {
		delete(b.machines, m.id)
	}
	b.queue = nil
	var running []*machine
	for id, m := range b.machines {
		delete(b.machines, id)
		m.destroyed = true
		running = append(running, m)
	}
	b.mu.Unlock()

	for _, m := range running {
		if err := killProcess(m.cmd.Process); err != nil && !errors.Is(err, os.ErrProcessDone) {
			b.logger.Warn("killing local machine", append(b.attrs(m), "error", err)...)
		}
	}
	for _, m := range running {
		select {
		case <-m.exited:
		case <-ctx.Done():
			return fmt.Errorf("waiting for local machines to exit: %w", ctx.Err())
		}
	}
	return nil
}

// Close is Shutdown without a deadline.
func (b *Backend) Close() error {
	return b.Shutdown(context.Background())
}

// environ is a worker's whole environment: the pass-through variables, then
// BaseEnv, then the spec's Env, later ones winning, and FLY_MACHINE_ID,
// sorted by name.
func (b *Backend) environ(specEnv map[string]string, machineID string) []string {
	env := maps.Clone(b.baseEnv)
	maps.Copy(env, specEnv)
	env["FLY_MACHINE_ID"] = machineID // as Fly sets it in its machines
	out := make([]string, 0, len(env))
	for _, k := range slices.Sorted(maps.Keys(env)) {
		out = append(out, k+"="+env[k])
	}
	return out
}

// startLocked starts m's process and takes a slot. b.mu must be held.
func (b *Backend) startLocked(m *machine) error {
	cmd := exec.Command(m.argv[0], m.argv[1:]...)
	cmd.Dir = b.dir
	cmd.Env = m.env
	cmd.Stdin = nil // reads from the null device
	cmd.Stdout = &lineLogger{logger: b.logger, level: slog.LevelDebug, attrs: b.attrs(m, "stream", "stdout")}
	cmd.Stderr = &lineLogger{logger: b.logger, level: slog.LevelInfo, attrs: b.attrs(m, "stream", "stderr")}
	cmd.WaitDelay = waitDelay
	configureProcess(cmd)
	if err := cmd.Start(); err != nil {
		return err
	}
	m.cmd, m.state, m.started = cmd, StateStarted, time.Now()
	m.exited = make(chan struct{})
	b.running++
	b.logger.Debug("local machine started", b.attrs(m, "pid", cmd.Process.Pid, "program", filepath.Base(m.argv[0]))...)
	go b.wait(m)
	return nil
}

// wait reaps m's process, frees its slot and starts queued launches.
func (b *Backend) wait(m *machine) {
	err := m.cmd.Wait()
	m.cmd.Stdout.(*lineLogger).flush()
	m.cmd.Stderr.(*lineLogger).flush()

	b.mu.Lock()
	destroyed := m.destroyed
	if b.machines[m.id] == m {
		delete(b.machines, m.id)
	}
	b.running--
	for !b.closed && b.running < b.max && len(b.queue) > 0 {
		q := b.queue[0]
		b.queue = b.queue[1:]
		if serr := b.startLocked(q); serr != nil {
			// The launch was accepted; its task times out and is retried,
			// as with a Fly machine that fails to boot.
			delete(b.machines, q.id)
			b.logger.Error("starting a queued local machine failed", append(b.attrs(q), "error", serr)...)
		}
	}
	b.mu.Unlock()
	close(m.exited)

	attrs := b.attrs(m, "duration_ms", time.Since(m.started).Milliseconds(), "exit_code", m.cmd.ProcessState.ExitCode())
	switch {
	case destroyed:
		b.logger.Debug("local machine destroyed", attrs...)
	case err != nil:
		b.logger.Warn("local machine exited with an error", append(attrs, "error", err)...)
	default:
		b.logger.Debug("local machine exited", attrs...)
	}
}

// attrs are the log attributes naming m, followed by extra key-value pairs.
func (b *Backend) attrs(m *machine, extra ...any) []any {
	attrs := []any{"machine_id", m.id, "app", m.app, "task_id", m.taskID, "batch_id", m.batchID}
	if m.phase != "" {
		attrs = append(attrs, "phase", m.phase)
	}
	return append(attrs, extra...)
}

// view is m as the launcher sees it. b.mu must be held.
func (m *machine) view() compute.Machine {
	return compute.Machine{ID: m.id, App: m.app, State: m.state, TaskID: m.taskID, BatchID: m.batchID, Attempt: m.attempt, CreatedAt: m.created}
}

// compareIDs orders machine IDs of one Backend by launch: shorter counters
// first, then lexically.
func compareIDs(x, y string) int {
	if len(x) != len(y) {
		return len(x) - len(y)
	}
	return strings.Compare(x, y)
}

// lineLogger logs each line a worker writes. Partial lines wait for their
// end (or for flush when the process exits); overlong lines are cut.
type lineLogger struct {
	logger *slog.Logger
	level  slog.Level
	attrs  []any

	mu  sync.Mutex
	buf []byte
}

func (l *lineLogger) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := len(p)
	for len(p) > 0 {
		i := bytes.IndexByte(p, '\n')
		if i < 0 {
			l.buf = append(l.buf, p...)
			if len(l.buf) >= maxLineBytes {
				l.emit()
			}
			break
		}
		l.buf = append(l.buf, p[:i]...)
		l.emit()
		p = p[i+1:]
	}
	return n, nil
}

// flush logs a last line that had no newline.
func (l *lineLogger) flush() {
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.buf) > 0 {
		l.emit()
	}
}

// emit logs the buffered line and empties the buffer. l.mu must be held.
func (l *lineLogger) emit() {
	line := l.buf
	if len(line) > maxLineBytes {
		line = line[:maxLineBytes]
	}
	line = bytes.TrimRight(line, "\r")
	l.logger.Log(context.Background(), l.level, "worker output", append(slices.Clip(l.attrs), "line", string(line))...)
	l.buf = l.buf[:0]
}
