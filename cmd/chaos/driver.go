package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/arke-institute/orchestrator/blob"
	"github.com/arke-institute/orchestrator/internal/harness/pgcluster"
)

// Fault kinds the driver injects itself (the worker faults are the fake
// machines': faultHang, faultCrash, faultLate).
const (
	faultKill      = "kill"
	faultPostgres  = "postgres"
	faultPartition = "partition"
	faultFly503    = "fly503"
	faultFlyCreate = "flycreate503"
	faultS3503     = "s3503"
	// faultProvider: the OCR and documents providers answer 429 (with
	// Retry-After), then 503 (`chaos provider`).
	faultProvider = "provider"
)

var driverFaults = []string{faultKill, faultPostgres, faultPartition, faultFly503, faultFlyCreate, faultS3503, faultProvider}

// taskMaxAttempts is the orchestrators' TASK_MAX_ATTEMPTS: a task failed
// with this many machines, all made faulty, had no worker's outcome.
const taskMaxAttempts = 3

// options are the driver's flags.
type options struct {
	seed         uint64
	batches      int
	files        int
	faultGap     time.Duration
	outage       time.Duration
	pgDown       time.Duration
	pgDownFrom   time.Duration
	hang         float64
	crash        float64
	late         float64
	taskTimeout  time.Duration
	timeout      time.Duration
	kinds        []string
	keep         bool
	skipBaseline bool
	resumeLimit  time.Duration
	maxConns     int
	spread       time.Duration
	workerDelay  time.Duration
	faultsAfter  time.Duration
	partition    time.Duration
	executor     string
	bigFiles     int
	// upgradeFrom is the release the rolling upgrade test starts on (a
	// commit), "" for the chaos test.
	upgradeFrom string
}

// filesOf is how many files batch i has: the first has -big-files, when
// set (above the chunked build's threshold), the others -files.
func (o options) filesOf(i int) int {
	if i == 0 && o.bigFiles > 0 {
		return o.bigFiles
	}
	return o.files
}

// pgDownMin is the shortest Postgres stays down: -pg-down-min, else 10 s,
// or half -pg-down if that is less.
func (o options) pgDownMin() time.Duration {
	if o.pgDownFrom > 0 {
		return min(o.pgDownFrom, o.pgDown)
	}
	return min(10*time.Second, o.pgDown/2)
}

func parseOptions(args []string) (options, error) {
	fs := flag.NewFlagSet("chaos", flag.ContinueOnError)
	var o options
	short := fs.Bool("short", false, "the CI form: 4 batches of 50 files, 10 s outages (a few minutes)")
	fs.Uint64Var(&o.seed, "seed", 0, "random seed (0: from the clock; printed either way)")
	fs.IntVar(&o.batches, "batches", 20, "batches")
	fs.IntVar(&o.files, "files", 200, "TIFF files per batch")
	fs.DurationVar(&o.faultGap, "fault-gap", 12*time.Second, "mean pause between injected faults")
	fs.DurationVar(&o.outage, "outage", 30*time.Second, "how long the Machines API and S3 answer 503, and the providers 429 then 503, when they fail")
	fs.DurationVar(&o.pgDown, "pg-down", 30*time.Second, "longest Postgres stays down (from -pg-down-min to this)")
	fs.DurationVar(&o.pgDownFrom, "pg-down-min", 0, "shortest Postgres stays down (0: 10 s, or half -pg-down if that is less); -pg-down-min 150s -pg-down 150s stops it 150 s each time")
	fs.Float64Var(&o.hang, "hang", 0.01, "share of machines that hang")
	fs.Float64Var(&o.crash, "crash", 0.01, "share of machines that crash without calling back")
	fs.Float64Var(&o.late, "late", 0.01, "share of machines that call back after their deadline")
	fs.DurationVar(&o.taskTimeout, "task-timeout", 15*time.Second, "TASK_TIMEOUT of the machine phases")
	fs.DurationVar(&o.timeout, "timeout", 20*time.Minute, "give up on a run after this")
	faults := fs.String("faults", strings.Join(driverFaults, ","), "driver faults to inject: "+strings.Join(driverFaults, ","))
	fs.BoolVar(&o.keep, "keep", false, "keep the logs and data folder")
	fs.BoolVar(&o.skipBaseline, "no-baseline", false, "skip the fault-free run")
	fs.DurationVar(&o.spread, "spread", 4*time.Second, "pause between two batches' submissions")
	fs.DurationVar(&o.workerDelay, "worker-delay", 4*time.Second, "machines call back after up to this")
	fs.DurationVar(&o.faultsAfter, "faults-after", time.Minute, "faults stop this long after the last batch is submitted (once each kind was injected): then the batches must finish")
	fs.DurationVar(&o.resumeLimit, "resume-limit", 90*time.Second, "a killed process's work must run again within this")
	fs.DurationVar(&o.partition, "partition", 90*time.Second, "how long a partition cuts the orchestrators off Postgres (Postgres up)")
	fs.StringVar(&o.executor, "executor", "machine", "executor of the machine phases: machine (a machine per task) or pool")
	fs.IntVar(&o.bigFiles, "big-files", 2500, "files of the first batch, written in chunks (0: -files like the others)")
	upgrade := fs.Bool("upgrade", false, "the rolling upgrade test instead (make upgrade-test): the load starts on the previous release's orchestrators (UPGRADE_FROM, else "+upgradeFromFile+"), which are upgraded to this checkout one by one mid-batch; no faults")
	fs.StringVar(&o.upgradeFrom, "upgrade-from", "", "the rolling upgrade test from this commit (implies -upgrade)")
	if err := fs.Parse(args); err != nil {
		return o, err
	}
	if *upgrade || o.upgradeFrom != "" {
		if err := o.upgradeDefaults(fs); err != nil {
			return o, err
		}
	}
	if *short {
		set := map[string]bool{}
		fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
		def := func(name string, apply func()) {
			if !set[name] {
				apply()
			}
		}
		def("batches", func() { o.batches = 4 })
		def("files", func() { o.files = 50 })
		def("outage", func() { o.outage = 10 * time.Second })
		def("pg-down", func() { o.pgDown = 10 * time.Second })
		def("fault-gap", func() { o.faultGap = 6 * time.Second })
		def("hang", func() { o.hang = 0.02 })
		def("crash", func() { o.crash = 0.02 })
		def("late", func() { o.late = 0.02 })
		def("timeout", func() { o.timeout = 8 * time.Minute })
		def("spread", func() { o.spread = 8 * time.Second })
		def("faults-after", func() { o.faultsAfter = 30 * time.Second })
		def("partition", func() { o.partition = 15 * time.Second })
		def("big-files", func() { o.bigFiles = 0 })
	}
	for k := range strings.SplitSeq(*faults, ",") {
		if k = strings.TrimSpace(k); k == "" {
			continue
		}
		if !contains(driverFaults, k) {
			return o, fmt.Errorf("-faults: no fault %q (the faults are %s)", k, strings.Join(driverFaults, ", "))
		}
		o.kinds = append(o.kinds, k)
	}
	if o.upgradeFrom != "" && !setFlag(fs, "faults") {
		o.kinds = nil // a rolling upgrade is the fault
	}
	if o.executor != "machine" && o.executor != "pool" {
		return o, fmt.Errorf("-executor: machine or pool, not %q", o.executor)
	}
	if o.batches < 1 || o.files < 1 {
		return o, errors.New("-batches and -files must be at least 1")
	}
	if o.seed == 0 {
		o.seed = uint64(time.Now().UnixNano())
	}
	o.maxConns = 20
	return o, nil
}

// setFlag says whether the flag name was given.
func setFlag(fs *flag.FlagSet, name string) bool {
	set := false
	fs.Visit(func(f *flag.Flag) { set = set || f.Name == name })
	return set
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// world is what both runs share: the binary, Postgres, S3, ingest.
type world struct {
	opts options
	tmp  string
	bin  string // bin/orchestrator, built for this run
	// release is the previous release's orchestrator, built from
	// releaseSHA, for the rolling upgrade test (-upgrade), whose workers
	// speak releaseProtocol.
	release, releaseSHA string
	releaseProtocol     int
	self                string // this program, for its children
	cluster             *pgcluster.Cluster
	proxy               *pgProxy // the orchestrators reach Postgres through it
	s3                  childInfo
	s3proc              *exec.Cmd
	store               blob.Store
	ingest              *ingest
	logf                func(format string, args ...any)
}

// childInfo is the first line a child prints.
type childInfo struct {
	Endpoint string `json:"endpoint"`
	URL      string `json:"url"`
	AI       string `json:"ai"` // chaos provider's embeddings and tags API
	Control  string `json:"control"`
}

// S3 credentials of the standalone server.
const (
	s3Access = "chaos"
	s3Secret = "chaossecret"
)

// buckets the orchestrator uses.
var buckets = []string{"arke-staging", "arke-archive", "arke-cdn"}

func drive(ctx context.Context, opts options) (err error) {
	w := &world{opts: opts, logf: func(format string, args ...any) {
		fmt.Fprintf(os.Stderr, "%s chaos: %s\n", time.Now().UTC().Format("15:04:05"), fmt.Sprintf(format, args...))
	}}
	if opts.upgradeFrom != "" {
		w.logf("rolling upgrade from %s: %d batches of %d files on the %s executor", opts.upgradeFrom, opts.batches, opts.files, opts.executor)
	} else {
		w.logf("seed %d: %d batches of %d files, faults %s, workers hang %.0f%% crash %.0f%% late %.0f%%",
			opts.seed, opts.batches, opts.files, strings.Join(opts.kinds, ","), opts.hang*100, opts.crash*100, opts.late*100)
	}
	if w.tmp, err = os.MkdirTemp("", "chaos-"); err != nil {
		return err
	}
	defer func() {
		if opts.keep || err != nil {
			w.logf("logs and data kept in %s", w.tmp)
			return
		}
		_ = os.RemoveAll(w.tmp)
	}()
	if w.self, err = os.Executable(); err != nil {
		return err
	}
	w.bin = filepath.Join(w.tmp, "orchestrator")
	w.logf("building the orchestrator")
	if out, err := exec.CommandContext(ctx, "go", "build", "-o", w.bin, "./cmd/orchestrator").CombinedOutput(); err != nil {
		return fmt.Errorf("building ./cmd/orchestrator (run chaos from the repository's root): %w: %s", err, out)
	}
	if opts.upgradeFrom != "" {
		if err := w.buildRelease(ctx); err != nil {
			return err
		}
	}
	if w.cluster, err = pgcluster.Start(ctx, pgcluster.Options{}); err != nil {
		return err
	}
	defer func() { _ = w.cluster.Close() }()
	if w.proxy, err = startProxy(w.cluster.Socket()); err != nil {
		return err
	}
	defer w.proxy.close()
	if w.s3proc, w.s3, err = w.startChild(ctx, "s3", "s3", "-dir", filepath.Join(w.tmp, "s3"), "-access-key", s3Access, "-secret-key", s3Secret); err != nil {
		return err
	}
	defer stopChild(w.s3proc)
	if w.store, err = blob.NewS3(blob.S3Config{Endpoint: w.s3.Endpoint, AccessKeyID: s3Access, SecretAccessKey: s3Secret, Region: blob.DefaultRegion}); err != nil {
		return err
	}
	for _, b := range buckets {
		if err := w.store.EnsureBucket(ctx, b); err != nil {
			return fmt.Errorf("creating bucket %s: %w", b, err)
		}
	}
	if w.ingest, err = newIngest(); err != nil {
		return err
	}
	defer w.ingest.close()

	var base *runResult
	if !opts.skipBaseline {
		w.logf("fault-free run")
		if base, err = w.run(ctx, "baseline", false); err != nil {
			return err
		}
	}
	label, chaos := "chaos", true
	if opts.upgradeFrom != "" {
		label, chaos = "upgrade", false
		w.logf("load on the release %s, then upgraded", w.releaseSHA[:12])
	} else {
		w.logf("chaos run")
	}
	res, err := w.run(ctx, label, chaos)
	if err != nil {
		return err
	}
	res.compareLeaks(base)
	printTable(os.Stdout, opts, base, res)
	if failed := res.failed(); len(failed) > 0 {
		return fmt.Errorf("%d assertion(s) failed: %s", len(failed), strings.Join(failed, "; "))
	}
	return nil
}

// startChild runs `chaos <kind> args...` and reads its first line.
func (w *world) startChild(ctx context.Context, name, kind string, args ...string) (*exec.Cmd, childInfo, error) {
	var info childInfo
	logFile, err := os.Create(filepath.Join(w.tmp, name+".log"))
	if err != nil {
		return nil, info, err
	}
	cmd := exec.CommandContext(ctx, w.self, append([]string{kind}, args...)...)
	cmd.Stderr = logFile
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, info, err
	}
	if err := cmd.Start(); err != nil {
		return nil, info, fmt.Errorf("starting chaos %s: %w", kind, err)
	}
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil {
		stopChild(cmd)
		return nil, info, fmt.Errorf("chaos %s did not start (see %s): %w", kind, logFile.Name(), err)
	}
	go io.Copy(logFile, out) //nolint:errcheck // the rest of its output, if any
	return cmd, info, json.Unmarshal([]byte(line), &info)
}

// stopChild ends a child and waits for it.
func stopChild(cmd *exec.Cmd) {
	if cmd == nil || cmd.Process == nil {
		return
	}
	_ = cmd.Process.Signal(syscall.SIGTERM)
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		_ = cmd.Process.Kill()
		<-done
	}
}

// control posts to a child's control listener.
func control(ctx context.Context, base, path string) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, base+path, nil)
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode >= 300 {
		b, _ := io.ReadAll(resp.Body)
		return fmt.Errorf("POST %s: %d %s", base+path, resp.StatusCode, b)
	}
	return nil
}

// getJSON reads a child's report.
func getJSON(ctx context.Context, url string, v any) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("GET %s: %d", url, resp.StatusCode)
	}
	return json.NewDecoder(resp.Body).Decode(v)
}

// freeAddr is a loopback address whose port was free just now.
func freeAddr() (string, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer l.Close()
	return l.Addr().String(), nil
}

// dbPool opens a small pool on the run's database, for the driver's own
// reads; it rides out Postgres restarts (each read is retried).
func dbPool(ctx context.Context, url string) (*pgxpool.Pool, error) {
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		return nil, err
	}
	cfg.MaxConns = 4
	return pgxpool.NewWithConfig(ctx, cfg)
}

// retry runs f until it succeeds, ctx ends or limit passes (Postgres may
// be restarting under the driver too).
func retry(ctx context.Context, limit time.Duration, f func() error) error {
	deadline := time.Now().Add(limit)
	for {
		err := f()
		if err == nil || ctx.Err() != nil || time.Now().After(deadline) {
			return err
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(500 * time.Millisecond):
		}
	}
}

// rng is the run's seeded random source, safe for the injector and
// the kill restarts.
type rng struct {
	mu sync.Mutex
	r  *rand.Rand
}

func newRNG(seed uint64) *rng { return &rng{r: rand.New(rand.NewPCG(seed, seed+1))} }

func (g *rng) duration(lo, hi time.Duration) time.Duration {
	g.mu.Lock()
	defer g.mu.Unlock()
	if hi <= lo {
		return lo
	}
	return lo + time.Duration(g.r.Int64N(int64(hi-lo)))
}

func (g *rng) intN(n int) int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.r.IntN(n)
}

func (g *rng) perm(n int) []int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.r.Perm(n)
}
