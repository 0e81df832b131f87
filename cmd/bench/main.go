// Command bench measures the orchestrator against Postgres' own ceiling on
// the same machine and server (`make bench`, which starts a throwaway
// cluster with production durability: fsync and synchronous_commit on). It
// prints a table and writes BENCHMARKS.md. Every ratio compares figures from
// the same run, because these machines are noisy.
//
//  1. baseline: pgbench, single-row UPDATE by primary key on a 100k-row
//     table, 8 clients, 2 threads.
//  2. ingest: one phase of N processing tasks with valid tokens; every
//     success callback is posted through the HTTP API with 32 concurrent
//     connections. Every callback must be applied and the phase must
//     transition exactly once.
//  3. e2e: whole batches of 1,000, 10,000 and 100,000 files (10% TIFF, 90%
//     JPEG) through `orchestrator serve` run as a separate process, against
//     the fake Fly Machines API (calls back at once, no launch limit), a
//     real S3 server and a fake ingest service (see e2e.go). Each size runs
//     -e2e-runs times (default 3): its wall time is their median, its peak
//     RSS their maximum, and its phase transitions (two a run) are pooled
//     for their median and maximum. The first run of the largest size also
//     carries the priority probes (priority.go).
//  4. workers: the workers' conversions against the vips CLI (workers.go).
//  5. ocr: for each capacity C, a batch of image refs through the OCR
//     phase, run by two orchestrator processes against a fake provider of
//     capacity C (see ocr.go).
//  6. launch: a phase's machines launched with presigned URLs against the
//     same launches with unsigned ones (see launch.go).
//  7. documents: documents through every indexing step against an instant
//     fake provider, and search over stored chunks (see documents.go).
//  8. search: search over 100,000 and 1,000,000 chunks loaded into Postgres,
//     through `orchestrator serve` restarted on them (see search.go).
//
// Baseline and ingest run in alternating pairs (-pairs, default 5: baseline,
// ingest, baseline, ...), and the ratio reported is the median of the
// pairs' ratios: a slow spell of the shared machine then weighs on both
// sides of one pair, not on one side of the only one. An ingest run posts
// -tasks callbacks (default 30,000): 10,000 last about 1.5 s, over which
// the warm-up weighs.
//
// -parts picks which to run (default all), e.g.
//
//	scripts/postgres.sh bench go run ./cmd/bench -parts e2e -out /tmp/b.md
package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"runtime/pprof"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/arke-institute/orchestrator/api"
	"github.com/arke-institute/orchestrator/blob"
	"github.com/arke-institute/orchestrator/compute"
	"github.com/arke-institute/orchestrator/config"
	"github.com/arke-institute/orchestrator/db"
	"github.com/arke-institute/orchestrator/executor"
	"github.com/arke-institute/orchestrator/jobs"
	"github.com/arke-institute/orchestrator/phases"
	"github.com/arke-institute/orchestrator/tasktoken"
)

// allParts are the parts of the benchmark, in the order they run.
var allParts = []string{"baseline", "ingest", "e2e", "workers", "ocr", "launch", "documents", "pools", "search"}

func main() {
	out := flag.String("out", "BENCHMARKS.md", "write the results here")
	partsFlag := flag.String("parts", strings.Join(allParts, ","), "comma-separated parts to run: "+strings.Join(allParts, ", "))
	tasks := flag.Int("tasks", 30000, "ingest: tasks in the callback-ingest phase, a callback each (10,000 last about 1.5 s, over which the warm-up weighs)")
	conns := flag.Int("conns", 32, "ingest: concurrent connections of the load generator")
	seconds := flag.Int("pgbench-seconds", 20, "baseline: duration of the pgbench baseline")
	pairs := flag.Int("pairs", 5, "baseline and ingest: runs of each, alternating (baseline, ingest, baseline, ...); launch: rounds per backend; the figures are their medians")
	sizes := flag.String("sizes", "1000,10000,100000", "e2e: batch sizes in files")
	e2eRuns := flag.Int("e2e-runs", 3, "e2e: runs of each size (wall time: their median; peak RSS: their maximum; two phase transitions a run); the largest size's first run carries the priority probes")
	orchBin := flag.String("orchestrator", "", "e2e and ocr: the orchestrator binary (default: go build ./cmd/orchestrator into a temp dir); several, comma-separated, take turns in e2e (an A/B comparison), and ocr runs the first")
	profileDir := flag.String("profile", "", "e2e and ocr: write CPU, heap, allocs and mutex profiles of each orchestrator run into this directory; ingest: a CPU profile of the bench process (load generator and orchestrator) during each run's load, ingest-cpu-N.pprof; documents: one of the bench process during the steps, documents-cpu.pprof")
	ingestEnv := flag.String("ingest-env", "", "ingest: extra orchestrator settings, KEY=VALUE,... (override the bench's), e.g. CALLBACK_COMMITTERS=2")
	e2eEnv := flag.String("e2e-env", "", "e2e: extra orchestrator settings, KEY=VALUE,... (override the bench's)")
	workerRuns := flag.Int("worker-runs", 5, "workers: timed runs per operation and side")
	ocrCapacities := flag.String("ocr-capacities", "8,50,200", "ocr: the fake provider's capacities C, requests/s, comma-separated: a run each")
	ocrBurst := flag.Int("ocr-burst", 0, "ocr: the fake provider's burst, requests (default: C rounded up)")
	ocrSeconds := flag.Float64("ocr-seconds", 75, "ocr: each run's batch holds C times this many JPEGs (at least 100), all with OCR on")
	ocrDirFiles := flag.Int("ocr-dir-files", 500, "ocr: JPEGs per directory (split into chunks of OCR_CHUNK_REFS)")
	ocrProcesses := flag.Int("ocr-processes", 2, "ocr: orchestrator processes sharing the database")
	launchTasks := flag.Int("launch-tasks", 5000, "launch: machines launched per run")
	launchWith := flag.String("launch-backends", strings.Join(launchBackends, ","), "launch: backends to launch with, comma-separated: fakefly, instant")
	ocrEnv := flag.String("ocr-env", "", "ocr: extra orchestrator settings, KEY=VALUE,... (the figures are the limiter's defaults without it)")
	docEnv := flag.String("doc-env", "", "documents: extra settings of the steps, KEY=VALUE,... (the figures are the limiter's defaults without it)")
	docCount := flag.Int("doc-count", 1000, "documents: documents taken through every step")
	docChunks := flag.Int("doc-chunks", 20, "documents: chunks a document makes (sections of about 450 tokens)")
	docCapacity := flag.Float64("doc-capacity", 100, "documents: the fake provider's capacity, requests/s for embeddings and tags together")
	searchChunks := flag.Int("search-chunks", 100000, "documents: chunks stored for search")
	searches := flag.Int("searches", 200, "documents: searches timed")
	poolsPerTask := flag.Int("pools-per-task-files", 100, "pools: files of the per-task run (its time is projected to the pooled runs' tasks; 0 skips it)")
	poolsSizes := flag.String("pools-sizes", "1000,10000", "pools: files of each pooled run; the first is compared with the per-task run")
	flag.Parse()
	base := os.Getenv("BENCH_DATABASE_URL")
	if base == "" {
		fmt.Fprintln(os.Stderr, "bench: BENCH_DATABASE_URL is not set; run it with `make bench`")
		os.Exit(2)
	}
	if *pairs < 1 || *e2eRuns < 1 {
		fmt.Fprintln(os.Stderr, "bench: -pairs and -e2e-runs must be at least 1")
		os.Exit(2)
	}
	if *docCount < 1 || *docChunks < 1 || !(*docCapacity > 0) || *searchChunks < 10 || *searches < 1 {
		fmt.Fprintln(os.Stderr, "bench: -doc-count, -doc-chunks, -doc-capacity and -searches must be positive, -search-chunks at least 10")
		os.Exit(2)
	}
	capacities, capErr := parseFloats(*ocrCapacities)
	if capErr != nil || !(*ocrSeconds > 0) || *ocrDirFiles < 1 || *ocrProcesses < 1 {
		fmt.Fprintln(os.Stderr, "bench: -ocr-capacities must be positive numbers, and -ocr-seconds, -ocr-dir-files and -ocr-processes positive")
		os.Exit(2)
	}
	r := &results{tasks: *tasks, conns: *conns, seconds: *seconds, pairs: *pairs, workerRuns: *workerRuns,
		e2eOpts: e2eOptions{runs: *e2eRuns, orchestrator: *orchBin, profileDir: *profileDir},
		ocrOpts: ocrOptions{capacities: capacities, burst: *ocrBurst, seconds: *ocrSeconds, dirFiles: *ocrDirFiles, processes: *ocrProcesses}, launchTasks: *launchTasks,
		docOpts: documentsOptions{docs: *docCount, chunks: *docChunks, capacity: *docCapacity, searchChunks: *searchChunks, searches: *searches}}
	for _, f := range strings.Split(*poolsSizes, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n < 10 {
			fmt.Fprintf(os.Stderr, "bench: -pools-sizes: %q is not a number of files of at least 10\n", f)
			os.Exit(2)
		}
		r.poolsOpts.pooledFiles = append(r.poolsOpts.pooledFiles, n)
	}
	r.poolsOpts.perTaskFiles = *poolsPerTask
	launchBackends = nil
	for _, b := range strings.Split(*launchWith, ",") {
		if b = strings.TrimSpace(b); b != "fakefly" && b != "instant" {
			fmt.Fprintf(os.Stderr, "bench: unknown launch backend %q (fakefly, instant)\n", b)
			os.Exit(2)
		}
		launchBackends = append(launchBackends, b)
	}
	for _, p := range strings.Split(*partsFlag, ",") {
		p = strings.TrimSpace(p)
		if !slices.Contains(allParts, p) {
			fmt.Fprintf(os.Stderr, "bench: unknown part %q (parts: %s)\n", p, strings.Join(allParts, ", "))
			os.Exit(2)
		}
		r.parts = append(r.parts, p)
	}
	var err error
	if r.e2eOpts.settings, err = parseSettings("-e2e-env", *e2eEnv); err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		os.Exit(2)
	}
	if r.ingestSettings, err = parseSettings("-ingest-env", *ingestEnv); err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		os.Exit(2)
	}
	if r.docOpts.settings, err = parseSettings("-doc-env", *docEnv); err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		os.Exit(2)
	}
	if r.ocrOpts.settings, err = parseSettings("-ocr-env", *ocrEnv); err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		os.Exit(2)
	}
	for _, v := range strings.Split(*sizes, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(v))
		if err != nil || n < 10 {
			fmt.Fprintf(os.Stderr, "bench: bad size %q in -sizes\n", v)
			os.Exit(2)
		}
		r.e2eOpts.sizes = append(r.e2eOpts.sizes, n)
	}
	// Absolute before anything runs: the e2e part's S3 server changes the
	// working directory.
	if *out, err = filepath.Abs(*out); err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		os.Exit(2)
	}
	if r.e2eOpts.profileDir != "" {
		if r.e2eOpts.profileDir, err = filepath.Abs(r.e2eOpts.profileDir); err == nil {
			err = os.MkdirAll(r.e2eOpts.profileDir, 0o755)
		}
		if err != nil {
			fmt.Fprintln(os.Stderr, "bench:", err)
			os.Exit(2)
		}
		r.docOpts.profile = filepath.Join(r.e2eOpts.profileDir, "documents-cpu.pprof")
	}
	ctx := context.Background()
	if err := run(ctx, base, r); err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		os.Exit(1)
	}
	table := r.table()
	fmt.Print(table)
	if err := os.WriteFile(*out, []byte(r.markdown(table)), 0o644); err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		os.Exit(1)
	}
	fmt.Println("wrote", *out)
}

// parseFloats reads a comma-separated list of positive numbers.
func parseFloats(list string) ([]float64, error) {
	var out []float64
	for v := range strings.SplitSeq(list, ",") {
		f, err := strconv.ParseFloat(strings.TrimSpace(v), 64)
		if err != nil || !(f > 0) {
			return nil, fmt.Errorf("%q is not a positive number", v)
		}
		out = append(out, f)
	}
	return out, nil
}

// parseSettings reads KEY=VALUE,... (flag names the flag, for errors); an
// entry without "=" continues the value before it, which may hold commas.
func parseSettings(flag, list string) (map[string]string, error) {
	settings := map[string]string{}
	last := ""
	for _, kv := range strings.Split(list, ",") {
		kv = strings.TrimSpace(kv)
		switch k, v, ok := strings.Cut(kv, "="); {
		case ok:
			settings[k], last = v, k
		case kv != "" && last != "": // a value with commas: PROVIDER_LIMIT_SHARED=embeddings,tags
			settings[last] += "," + kv
		case kv != "":
			return nil, fmt.Errorf("bad %s entry %q, want KEY=VALUE", flag, kv)
		}
	}
	return settings, nil
}

type results struct {
	parts     []string
	pgVersion string
	tasks     int
	conns     int
	seconds   int
	pairs     int
	baselines []float64   // pgbench TPS, one a run
	ingests   []ingestRun // one a run; run i follows baseline i
	// ingestSettings override the ingest's settings (-ingest-env).
	ingestSettings map[string]string

	e2eOpts e2eOptions
	e2e     []e2eSize

	workerRuns int
	workers    []workerFigure

	ocrOpts ocrOptions
	ocr     []ocrRun

	launchTasks int
	launches    []launchRun

	docOpts   documentsOptions
	documents documentsRun

	poolsOpts poolsOptions
	pools     []poolsRun

	search []searchRun
}

// ingestRun is one callback-ingest run's figures.
type ingestRun struct {
	rate       float64 // callbacks/s
	p50, p99   time.Duration
	transition time.Duration // from the last callback's answer to the phase's transition
}

func (r *results) has(part string) bool { return slices.Contains(r.parts, part) }

// ratios are each pair's callback ingest / baseline TPS.
func (r *results) ratios() []float64 {
	out := make([]float64, min(len(r.baselines), len(r.ingests)))
	for i := range out {
		out[i] = r.ingests[i].rate / r.baselines[i]
	}
	return out
}

// median is the middle of xs (the mean of the two middle ones for an even
// count), 0 for none.
func median[T time.Duration | float64](xs []T) T {
	if len(xs) == 0 {
		return 0
	}
	s := slices.Sorted(slices.Values(xs))
	n := len(s)
	if n%2 == 1 {
		return s[n/2]
	}
	return (s[n/2-1] + s[n/2]) / 2
}

// medianOf is the median of one figure of the ingest runs.
func medianOf[T time.Duration | float64](runs []ingestRun, figure func(ingestRun) T) T {
	xs := make([]T, len(runs))
	for i, run := range runs {
		xs[i] = figure(run)
	}
	return median(xs)
}

func run(ctx context.Context, base string, r *results) error {
	admin, err := pgx.Connect(ctx, base)
	if err != nil {
		return err
	}
	defer admin.Close(ctx)
	if err := admin.QueryRow(ctx, "SHOW server_version").Scan(&r.pgVersion); err != nil {
		return err
	}
	var fsync, syncCommit string
	_ = admin.QueryRow(ctx, "SHOW fsync").Scan(&fsync)
	_ = admin.QueryRow(ctx, "SHOW synchronous_commit").Scan(&syncCommit)
	if fsync != "on" || syncCommit != "on" {
		return fmt.Errorf("the server runs with fsync=%s synchronous_commit=%s: benchmarks need production durability", fsync, syncCommit)
	}

	// The e2e and ocr parts build the orchestrator first: building is
	// CPU-heavy and must not overlap a measurement, and it needs the working
	// directory that the S3 server later changes.
	if (r.has("e2e") || r.has("ocr") || r.has("pools") || r.has("search")) && r.e2eOpts.orchestrator == "" {
		fmt.Fprintln(os.Stderr, "building the orchestrator...")
		bin, cleanup, err := buildOrchestrator(ctx)
		if err != nil {
			return err
		}
		defer cleanup()
		r.e2eOpts.orchestrator = bin
	}
	for i := range r.pairs {
		if r.has("baseline") {
			fmt.Fprintf(os.Stderr, "baseline %d/%d: pgbench for %ds...\n", i+1, r.pairs, r.seconds)
			tps, err := pgbenchBaseline(ctx, admin, base, r.seconds)
			if err != nil {
				return fmt.Errorf("baseline: %w", err)
			}
			r.baselines = append(r.baselines, tps)
		}
		if r.has("ingest") {
			fmt.Fprintf(os.Stderr, "callback ingest %d/%d: %d callbacks over %d connections...\n", i+1, r.pairs, r.tasks, r.conns)
			profile := ""
			if dir := r.e2eOpts.profileDir; dir != "" {
				profile = filepath.Join(dir, fmt.Sprintf("ingest-cpu-%d.pprof", i+1))
			}
			run, err := callbackIngest(ctx, admin, base, r.tasks, r.conns, profile, r.ingestSettings)
			if err != nil {
				return fmt.Errorf("callback ingest: %w", err)
			}
			r.ingests = append(r.ingests, run)
		}
	}
	if r.has("e2e") {
		if r.e2e, err = endToEnd(ctx, admin, base, r.e2eOpts); err != nil {
			return fmt.Errorf("e2e: %w", err)
		}
	}
	if r.has("workers") {
		fmt.Fprintf(os.Stderr, "workers: %d runs per operation...\n", r.workerRuns)
		if r.workers, err = benchWorkers(ctx, r.workerRuns); err != nil {
			return fmt.Errorf("workers: %w", err)
		}
	}
	if r.has("launch") {
		if r.launches, err = benchLaunch(ctx, admin, base, r.launchTasks, r.pairs, r.e2eOpts.profileDir); err != nil {
			return fmt.Errorf("launch: %w", err)
		}
	}
	if r.has("ocr") {
		bin, _, _ := strings.Cut(r.e2eOpts.orchestrator, ",")
		if r.ocr, err = benchOCR(ctx, admin, base, bin, r.e2eOpts, r.ocrOpts); err != nil {
			return fmt.Errorf("ocr: %w", err)
		}
	}
	if r.has("documents") {
		if r.documents, err = benchDocuments(ctx, admin, base, r.docOpts); err != nil {
			return fmt.Errorf("documents: %w", err)
		}
	}
	if r.has("pools") {
		bin, _, _ := strings.Cut(r.e2eOpts.orchestrator, ",")
		if r.pools, err = benchPools(ctx, admin, base, bin, r.e2eOpts, r.poolsOpts); err != nil {
			return fmt.Errorf("pools: %w", err)
		}
	}
	if r.has("search") {
		bin, _, _ := strings.Cut(r.e2eOpts.orchestrator, ",")
		if r.search, err = benchSearch(ctx, admin, base, bin, r.e2eOpts); err != nil {
			return fmt.Errorf("search: %w", err)
		}
	}
	return nil
}

// freshDatabase (re)creates a database and returns its URL.
func freshDatabase(ctx context.Context, admin *pgx.Conn, base, name string) (string, error) {
	if _, err := admin.Exec(ctx, "DROP DATABASE IF EXISTS "+name+" WITH (FORCE)"); err != nil {
		return "", err
	}
	if _, err := admin.Exec(ctx, "CREATE DATABASE "+name); err != nil {
		return "", err
	}
	u, err := url.Parse(base)
	if err != nil {
		return "", err
	}
	u.Path = "/" + name
	return u.String(), nil
}

var tpsLine = regexp.MustCompile(`tps = ([0-9.]+)`)

// pgbenchBaseline is the per-transaction ceiling: single-row UPDATEs by
// primary key on a 100k-row table, 8 clients, 2 threads.
func pgbenchBaseline(ctx context.Context, admin *pgx.Conn, base string, seconds int) (float64, error) {
	dbURL, err := freshDatabase(ctx, admin, base, "bench_baseline")
	if err != nil {
		return 0, err
	}
	conn, err := pgx.Connect(ctx, dbURL)
	if err != nil {
		return 0, err
	}
	for _, stmt := range []string{
		`CREATE TABLE accounts (id integer PRIMARY KEY, n bigint NOT NULL DEFAULT 0)`,
		`INSERT INTO accounts (id) SELECT generate_series(1, 100000)`,
		`VACUUM ANALYZE accounts`,
	} {
		if _, err = conn.Exec(ctx, stmt); err != nil {
			conn.Close(ctx)
			return 0, err
		}
	}
	conn.Close(ctx)
	script := filepath.Join(os.TempDir(), "orchestrator-bench-update.sql")
	if err := os.WriteFile(script, []byte("\\set id random(1, 100000)\nUPDATE accounts SET n = n + 1 WHERE id = :id;\n"), 0o644); err != nil {
		return 0, err
	}
	out, err := exec.CommandContext(ctx, "pgbench", "-n", "-c", "8", "-j", "2", "-T", strconv.Itoa(seconds), "-f", script, dbURL).CombinedOutput()
	if err != nil {
		return 0, fmt.Errorf("pgbench: %v: %s", err, out)
	}
	m := tpsLine.FindSubmatch(out)
	if m == nil {
		return 0, fmt.Errorf("no tps in pgbench output: %s", out)
	}
	return strconv.ParseFloat(string(m[1]), 64)
}

// callbackIngest seeds one phase of processing tasks (as many as tasks) and
// posts all their callbacks through the real HTTP API over conns
// connections, with the real River workers running. With profile set, it
// writes a CPU profile of the load there.
func callbackIngest(ctx context.Context, admin *pgx.Conn, base string, tasks, conns int, profile string, extra map[string]string) (ingestRun, error) {
	var run ingestRun
	dbURL, err := freshDatabase(ctx, admin, base, "bench_ingest")
	if err != nil {
		return run, err
	}
	pcfg, err := pgxpool.ParseConfig(dbURL)
	if err != nil {
		return run, err
	}
	pcfg.MaxConns = int32(config.DefaultDatabaseMaxConns) // as serve does
	pool, err := pgxpool.NewWithConfig(ctx, pcfg)
	if err != nil {
		return run, err
	}
	defer pool.Close()
	logger := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	if err := db.Migrate(ctx, pool, logger); err != nil {
		return run, err
	}
	settings := map[string]string{"R2_ENDPOINT": "http://127.0.0.1:1", "R2_ACCESS_KEY_ID": "x", "R2_SECRET_ACCESS_KEY": "x",
		"FLY_LAUNCH_RATE": "100000", "FLY_LAUNCH_BURST": "100000"}
	maps.Copy(settings, perTaskMachines())
	maps.Copy(settings, extra)
	cfg, err := config.Load(func(k string) (string, bool) { v, ok := settings[k]; return v, ok })
	if err != nil {
		return run, err
	}
	store, err := blob.NewS3(blob.S3Config{Endpoint: cfg.R2Endpoint, AccessKeyID: "x", SecretAccessKey: "x"})
	if err != nil {
		return run, err
	}
	deps, err := executor.Register(jobs.Deps{Pool: pool, Store: store, Compute: instantBackend{}, Settings: cfg.Jobs(), Logger: logger}, cfg.Executors, executor.Options{})
	if err != nil {
		return run, err
	}
	client, err := jobs.NewClient(deps, jobs.ClientConfig{FetchPollInterval: 100 * time.Millisecond})
	if err != nil {
		return run, err
	}
	if err := client.Start(ctx); err != nil {
		return run, err
	}
	defer client.Stop(context.WithoutCancel(ctx)) //nolint:errcheck // the run is over; a slow stop changes no figure
	ln, stop, err := serveAPI(ctx, cfg.API(), api.Parts{Pool: pool, River: client, Executors: deps.Executors, Logger: logger})
	if err != nil {
		return run, err
	}
	defer stop()

	const batchID, phase = "BENCH", string(phases.TIFFConversion)
	ids, err := seedPhase(ctx, pool, batchID, phase, tasks)
	if err != nil {
		return run, err
	}

	// The load: every success callback, conns at a time. Each connection is
	// a plain keep-alive HTTP/1.1 client that writes a request and reads its
	// answer on one goroutine, with the requests built before the clock
	// starts: net/http's client spends two goroutines and their hand-offs on
	// every request, and on this 2-core machine the load generator's CPU is
	// taken from the server and Postgres being measured (pgbench's client is
	// lean C). The server side is the real one, whole.
	reqs := make([][]byte, len(ids))
	keys := tasktoken.New(pool)
	for i, id := range ids {
		token, err := keys.Seal(ctx, tasktoken.Task(batchID, id), nonce(id))
		if err != nil {
			return run, err
		}
		body, _ := json.Marshal(map[string]any{"status": "success", "output_r2_key": fmt.Sprintf("staging/BENCH/f%06d.jpg", i),
			"output_file_name": fmt.Sprintf("f%06d.jpg", i), "output_file_size": 1000})
		reqs[i] = fmt.Appendf(nil, "POST /callback/%s/%s HTTP/1.1\r\nHost: %s\r\nAuthorization: Bearer %s\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s",
			batchID, id, ln.Addr(), token, len(body), body)
	}
	work := make(chan int)
	latencies := make([]time.Duration, len(ids))
	var failures sync.Map
	var wg sync.WaitGroup
	if profile != "" {
		f, err := os.Create(profile)
		if err != nil {
			return run, err
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			return run, err
		}
		defer pprof.StopCPUProfile()
	}
	start := time.Now()
	for range conns {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c := &callbackConn{}
			defer c.close()
			for i := range work {
				t := time.Now()
				status, err := c.post(ln.Addr().String(), reqs[i])
				latencies[i] = time.Since(t)
				if err != nil {
					failures.Store(i, err.Error())
					c.close() // the next request dials again
					continue
				}
				if status != http.StatusOK {
					failures.Store(i, fmt.Sprintf("%d %s", status, http.StatusText(status)))
				}
			}
		}()
	}
	for i := range ids {
		work <- i
	}
	close(work)
	wg.Wait()
	lastAnswer := time.Now()
	pprof.StopCPUProfile() // the load only (a no-op without -profile)
	elapsed := lastAnswer.Sub(start)
	var failed []string
	failures.Range(func(k, v any) bool { failed = append(failed, fmt.Sprintf("%v: %v", k, v)); return len(failed) < 5 })
	if len(failed) > 0 {
		return run, fmt.Errorf("callbacks failed, e.g. %s", strings.Join(failed, "; "))
	}
	run.rate = float64(len(ids)) / elapsed.Seconds()
	slices.Sort(latencies)
	run.p50, run.p99 = latencies[len(latencies)/2], latencies[len(latencies)*99/100]

	// Every callback applied, and the phase transitioned exactly once.
	deadline := time.Now().Add(2 * time.Minute)
	for {
		var status string
		if err := pool.QueryRow(ctx, "SELECT status FROM batches WHERE id = $1", batchID).Scan(&status); err != nil {
			return run, err
		}
		if status != phase {
			run.transition = time.Since(lastAnswer)
			break
		}
		if time.Now().After(deadline) {
			return run, errors.New("the phase did not transition within 2 minutes of the last callback")
		}
		time.Sleep(5 * time.Millisecond)
	}
	var completed, transitions int
	if err := pool.QueryRow(ctx, `SELECT (SELECT count(*) FROM tasks WHERE batch_id = $1 AND phase = $2 AND status = 'completed'),
		(SELECT count(*) FROM batch_events WHERE batch_id = $1 AND phase = $2 AND type = 'phase.completed')`, batchID, phase).Scan(&completed, &transitions); err != nil {
		return run, err
	}
	if completed != len(ids) || transitions != 1 {
		return run, fmt.Errorf("%d of %d callbacks applied, phase transitioned %d times", completed, len(ids), transitions)
	}
	return run, nil
}

// seedPhase makes a batch in phase with n files and n processing tasks whose
// callback tokens are sealed from nonce(id).
func seedPhase(ctx context.Context, pool *pgxpool.Pool, batchID, phase string, n int) ([]string, error) {
	q := db.New(pool)
	if _, err := q.BatchInsert(ctx, db.BatchInsertParams{ID: batchID, Uploader: "bench", QueueMessage: []byte(`{}`)}); err != nil {
		return nil, err
	}
	if _, err := q.BatchSetPhase(ctx, db.BatchSetPhaseParams{ID: batchID, Phase: phase}); err != nil {
		return nil, err
	}
	files := make([]db.FileInsertManyParams, n)
	for i := range files {
		name := fmt.Sprintf("f%06d.tif", i)
		files[i] = db.FileInsertManyParams{BatchID: batchID, Generation: 0, Ordinal: int32(i), DirectoryPath: "/",
			R2Key: "staging/BENCH/" + name, LogicalPath: "/" + name, FileName: name, FileSize: 1000,
			ContentType: "image/tiff", ProcessingConfig: []byte(`{"ocr":false,"describe":false,"pinax":true}`), PreprocessorTags: []string{}}
	}
	if _, err := q.FileInsertMany(ctx, files); err != nil {
		return nil, err
	}
	stored, err := q.FileListByBatchGeneration(ctx, db.FileListByBatchGenerationParams{BatchID: batchID, Generation: 0})
	if err != nil {
		return nil, err
	}
	ids := make([]string, n)
	rows := make([]db.TaskInsertManyParams, n)
	for i, f := range stored {
		ids[i] = fmt.Sprintf("tiff_bench%06d", i)
		rows[i] = db.TaskInsertManyParams{ID: ids[i], BatchID: batchID, Phase: phase, FileID: f.ID}
	}
	if _, err := q.TaskInsertMany(ctx, rows); err != nil {
		return nil, err
	}
	_, err = pool.Exec(ctx, `UPDATE tasks SET status = 'processing', attempt = 1, machine_id = 'm-' || id,
		token_hash = sha256(convert_to('tok-' || id, 'UTF8')), launched_at = now(), deadline = now() + interval '1 hour'
		WHERE batch_id = $1`, batchID)
	if err != nil {
		return nil, err
	}
	_, err = pool.Exec(ctx, "VACUUM ANALYZE tasks")
	return ids, err
}

// nonce is the nonce of task id's callback token: its SHA-256 is the
// task's record.
func nonce(id string) string { return "tok-" + id }

// callbackConn is one keep-alive HTTP/1.1 connection of the ingest load.
// It dials on first use, and again after close.
type callbackConn struct {
	c  net.Conn
	br *bufio.Reader
}

// post writes a whole request (req) and returns the answer's status code,
// having read and dropped its body. On an error the connection is no
// longer usable.
func (c *callbackConn) post(addr string, req []byte) (int, error) {
	if c.c == nil {
		conn, err := net.DialTimeout("tcp", addr, 10*time.Second)
		if err != nil {
			return 0, err
		}
		c.c, c.br = conn, bufio.NewReader(conn)
	}
	// As the net/http client's timeout did: a stalled server fails the run.
	if err := c.c.SetDeadline(time.Now().Add(60 * time.Second)); err != nil {
		return 0, err
	}
	if _, err := c.c.Write(req); err != nil {
		return 0, err
	}
	resp, err := http.ReadResponse(c.br, nil)
	if err != nil {
		return 0, err
	}
	_, err = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.Close {
		c.close() // the server closes it: the next request dials again
	}
	return resp.StatusCode, err
}

func (c *callbackConn) close() {
	if c.c != nil {
		c.c.Close()
		c.c = nil
	}
}

// instantBackend accepts every launch at once: the phase after the measured
// one launches its machines here, outside the measurement.
// Its machines run until destroyed (instantMachines holds them, for the
// sweep's check of running tasks' machines).
type instantBackend struct{}

// instantMachines are instantBackend's live machines, by id.
var instantMachines sync.Map

func (instantBackend) Launch(_ context.Context, s compute.MachineSpec) (compute.Machine, error) {
	m := compute.Machine{ID: "m-" + s.TaskID, App: s.App, TaskID: s.TaskID, Attempt: s.Attempt, State: "started"}
	instantMachines.Store(m.ID, instantMachine{m, s.BatchID})
	return m, nil
}
func (instantBackend) FindByTask(context.Context, string, string) ([]compute.Machine, error) {
	return nil, nil
}
func (instantBackend) ListByBatch(_ context.Context, app, batchID string) ([]compute.Machine, error) {
	var out []compute.Machine
	instantMachines.Range(func(_, v any) bool {
		if m := v.(instantMachine); m.App == app && m.batchID == batchID {
			out = append(out, m.Machine)
		}
		return true
	})
	return out, nil
}
func (instantBackend) ListOwned(_ context.Context, app string) ([]compute.Machine, error) {
	var out []compute.Machine
	instantMachines.Range(func(_, v any) bool {
		if m := v.(instantMachine); m.App == app {
			out = append(out, m.Machine)
		}
		return true
	})
	return out, nil
}
func (instantBackend) Destroy(_ context.Context, _, id string) error {
	instantMachines.Delete(id)
	return nil
}

// instantMachine is a machine of instantBackend, with its batch.
type instantMachine struct {
	compute.Machine
	batchID string
}

func (r *results) table() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%-44s %14s\n", "figure", "value")
	// With several runs, each figure of the baseline and ingest parts is the
	// median of its runs, and the runs are listed.
	if r.has("baseline") {
		fmt.Fprintf(&b, "%-44s %14.0f\n", "baseline: pgbench single-row UPDATE, TPS", median(r.baselines))
	}
	if r.has("ingest") {
		fmt.Fprintf(&b, "%-44s %14.0f\n", fmt.Sprintf("callback ingest (%d, %d conns), callbacks/s", r.tasks, r.conns),
			medianOf(r.ingests, func(x ingestRun) float64 { return x.rate }))
	}
	switch {
	case r.has("baseline") && r.has("ingest"):
		label := "callback ingest / baseline"
		if r.pairs > 1 {
			label += fmt.Sprintf(", median of %d", r.pairs)
		}
		fmt.Fprintf(&b, "%-44s %13.2fx\n", label, median(r.ratios()))
		for i, ratio := range r.ratios() {
			if r.pairs > 1 {
				fmt.Fprintf(&b, "%-44s %13.2fx\n", fmt.Sprintf("  pair %d: %.0f TPS, %.0f callbacks/s", i+1, r.baselines[i], r.ingests[i].rate), ratio)
			}
		}
	case r.has("baseline") && r.pairs > 1:
		for i, tps := range r.baselines {
			fmt.Fprintf(&b, "%-44s %14.0f\n", fmt.Sprintf("  run %d, TPS", i+1), tps)
		}
	case r.has("ingest") && r.pairs > 1:
		for i, run := range r.ingests {
			fmt.Fprintf(&b, "%-44s %14.0f\n", fmt.Sprintf("  run %d, callbacks/s", i+1), run.rate)
		}
	}
	if r.has("ingest") {
		p50 := medianOf(r.ingests, func(x ingestRun) time.Duration { return x.p50 })
		p99 := medianOf(r.ingests, func(x ingestRun) time.Duration { return x.p99 })
		transition := medianOf(r.ingests, func(x ingestRun) time.Duration { return x.transition })
		fmt.Fprintf(&b, "%-44s %14s\n", "callback latency p50", p50.Round(10*time.Microsecond))
		fmt.Fprintf(&b, "%-44s %14s\n", "callback latency p99", p99.Round(10*time.Microsecond))
		fmt.Fprintf(&b, "%-44s %14s\n", "last callback -> phase transition", transition.Round(time.Millisecond))
	}
	if r.has("e2e") {
		b.WriteString(e2eTable(r.e2e))
		b.WriteString(priorityTable(r.e2e))
	}
	if r.has("workers") {
		b.WriteString(workersTable(r.workers))
	}
	if r.has("ocr") {
		b.WriteString(ocrTable(r.ocr, r.ocrOpts))
	}
	if r.has("launch") {
		b.WriteString(launchTable(r.launches))
	}
	if r.has("documents") {
		b.WriteString(documentsTable(r.documents))
	}
	if r.has("pools") {
		b.WriteString(poolsTable(r.pools))
	}
	if r.has("search") {
		b.WriteString(searchTable(r.search))
	}
	return b.String()
}

func (r *results) markdown(table string) string {
	host, _ := os.Hostname()
	var b strings.Builder
	fmt.Fprintf(&b, `# Benchmarks

Produced by `+"`make bench`"+` on %s (%s, %d CPUs, %s RAM, Go %s, PostgreSQL %s with
fsync and synchronous_commit on). Every ratio compares figures of this one run.
Parts run: %s.

`+"```"+`
%s`+"```"+`

`, time.Now().UTC().Format("2006-01-02"), host, runtime.NumCPU(), memTotal(), runtime.Version(), r.pgVersion,
		strings.Join(r.parts, ", "), table)
	if r.has("baseline") {
		fmt.Fprintf(&b, `- **Baseline**: pgbench, a custom script doing one `+"`UPDATE`"+` by primary key on a
  100,000-row table; 8 clients, 2 threads, %d s. The per-transaction ceiling of
  this server.
`, r.seconds)
	}
	if r.has("ingest") {
		fmt.Fprintf(&b, `- **Callback ingest**: one phase of %d processing tasks with valid tokens; a load
  generator posts every success callback through the HTTP API with %d
  concurrent connections, with the River workers running. Every callback must
  be applied and the phase must transition exactly once (checked). The load
  generator runs in the same process as the orchestrator and shares its 2
  cores with it and Postgres, as pgbench's client does with Postgres; it is a
  plain keep-alive HTTP/1.1 client per connection whose requests are built
  before the clock starts (Go's net/http client took about a third of a core at
  this rate). Timed: from the first request to the last answer. The phase's
  size (`+"`-tasks`"+`) is 30,000 by default: a run of 10,000 lasts about 1.5 s, over
  which the warm-up weighs.
`, r.tasks, r.conns)
	}
	if r.pairs > 1 && (r.has("baseline") || r.has("ingest")) {
		fmt.Fprintf(&b, `- **%d runs of each**, alternating: baseline, ingest, baseline, ingest, ... Each
  figure above is the median of its runs, and the ingest / baseline ratio is the
  median of the pairs' ratios (each pair is a baseline and the ingest run right
  after it), so that a slow spell of the shared machine weighs on both sides of
  one pair.
`, r.pairs)
	}
	if r.has("e2e") {
		b.WriteString(e2eMarkdown(r.e2eOpts))
		b.WriteString(priorityMarkdown())
	}
	if r.has("workers") {
		fmt.Fprintf(&b, `- **Workers**: the TIFF worker's conversion and the image worker's variants on
  generated 24-megapixel inputs, against the vips command-line tools doing the
  same work on the same files; median of %d runs per side (see
  `+"`cmd/bench/workers.go`"+` for what is timed on each side). The worker's libvips
  starts once before its runs, while every CLI command starts a process and
  libvips; that start-up is timed alone (the same tools printing their
  version), and the headline ratio is *worker / (vips CLI - start-up)*. The
  ratio against the whole command, start-up included, follows it.
`, r.workerRuns)
	}
	if r.has("ocr") {
		b.WriteString(ocrMarkdown(r.ocrOpts))
	}
	if r.has("launch") {
		b.WriteString(launchMarkdown(r.launchTasks, r.pairs))
	}
	if r.has("documents") {
		b.WriteString(documentsMarkdown(r.documents))
	}
	if r.has("pools") {
		b.WriteString(poolsMarkdown(r.poolsOpts))
	}
	if r.has("search") {
		b.WriteString(searchMarkdown(r.search))
	}
	b.WriteString(r.targets())
	b.WriteString(`
Profiles' findings (where a callback's time goes, what grows with a batch), and
what bounds each goal a run misses, are in [docs/performance.md](docs/performance.md).

Reproduce: ` + "`make bench`" + ` (it starts a throwaway PostgreSQL cluster with production
durability; set BENCH_DATABASE_URL to use another server). One part alone:
` + "`scripts/postgres.sh bench go run ./cmd/bench -parts e2e -out /tmp/b.md`" + `
(parts: ` + strings.Join(allParts, ", ") + `).
`)
	return b.String()
}

// memTotal is the machine's RAM as /proc/meminfo reports it.
func memTotal() string {
	data, err := os.ReadFile("/proc/meminfo")
	if err != nil {
		return "unknown"
	}
	for _, line := range strings.Split(string(data), "\n") {
		if rest, ok := strings.CutPrefix(line, "MemTotal:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(rest), "kB")), 10, 64)
			if err == nil {
				return fmt.Sprintf("%.0f GiB", float64(kb)/(1<<20))
			}
		}
	}
	return "unknown"
}

// targets sets this run's figures against issue 33's goals for the
// ingest, end-to-end and worker figures, and the OCR, launch, documents,
// pools and search issues' goals.
func (r *results) targets() string {
	var rows []string
	row := func(figure, target, got string, met bool) {
		verdict := "missed"
		if met {
			verdict = "met"
		}
		rows = append(rows, fmt.Sprintf("| %s | %s | %s | %s |", figure, target, got, verdict))
	}
	if r.has("baseline") && r.has("ingest") {
		ratio := median(r.ratios())
		figure := "callback ingest / baseline TPS"
		if r.pairs > 1 {
			figure += fmt.Sprintf(" (median of %d pairs)", r.pairs)
		}
		row(figure, ">= 1.2x", fmt.Sprintf("%.2fx", ratio), ratio >= 1.2)
	}
	if r.has("e2e") {
		e2eTargets(r.e2e, row)
	}
	if r.has("workers") && len(r.workers) > 0 {
		worst := 0.0
		for _, f := range r.workers {
			worst = max(worst, f.vsWork())
		}
		row("workers vs vips CLI without its start-up (worst input)", fmt.Sprintf("<= %.1fx", workerTarget), fmt.Sprintf("%.2fx", worst), worst <= workerTarget)
	}
	if r.has("ocr") {
		ocrTargets(r.ocr, row)
	}
	for _, s := range summarizeLaunch(r.launches) {
		got := s.ratio[urlsPresigned]
		row(fmt.Sprintf("launch time, presigned / unsigned URLs (%s)", s.backend), "<= 1.10x", fmt.Sprintf("%.3fx", got), got <= 1.10)
	}
	if r.has("documents") {
		documentsTargets(r.documents, row)
	}
	if r.has("pools") {
		poolsTargets(r.pools, row)
	}
	if r.has("search") {
		searchTargets(r.search, row)
	}
	if len(rows) == 0 {
		return ""
	}
	return "\n## Against the targets\n\n| figure | target | this run | |\n| --- | --- | --- | --- |\n" + strings.Join(rows, "\n") + "\n"
}

// e2eTargets adds the end-to-end rows of the targets (issue 33's goals)
// for the sizes measured (none in an A/B comparison). The transitions'
// goals are stated for 100,000 files and held to at
// every size.
func e2eTargets(sizes []e2eSize, row func(figure, target, got string, met bool)) {
	byFiles := map[int]e2eSummary{}
	for _, s := range sizes {
		if s.label == "" {
			byFiles[s.files] = s.summary()
		}
	}
	runs := func(s e2eSummary) string {
		if s.runs == 1 {
			return "one run"
		}
		return fmt.Sprintf("median of %d runs", s.runs)
	}
	t10, ok10 := byFiles[10000]
	t100, ok100 := byFiles[100000]
	if ok10 {
		row(fmt.Sprintf("10,000-file batch, end to end (%s)", runs(t10)), "<= 3 s", t10.wall.Round(time.Millisecond).String(), t10.wall <= 3*time.Second)
	}
	if ok10 && ok100 {
		scaling := float64(t100.wall) / float64(t10.wall)
		row("scaling t(100k)/t(10k) (medians)", "<= 10", fmt.Sprintf("%.2f", scaling), scaling <= 10)
	}
	if ok100 {
		row(fmt.Sprintf("orchestrator peak RSS at 100,000 files (max of %d runs)", t100.runs), "<= 120 MB",
			fmt.Sprintf("%.0f MB", float64(t100.peakRSS)/1e6), t100.peakRSS <= 120e6)
	}
	for _, n := range slices.Sorted(maps.Keys(byFiles)) {
		s := byFiles[n]
		row(fmt.Sprintf("phase transition p50, %d files (median of %d)", n, len(s.transitions)), "<= 200 ms",
			s.transitionP50.Round(time.Millisecond).String(), s.transitionP50 <= 200*time.Millisecond)
		row(fmt.Sprintf("phase transition max, %d files (of %d)", n, len(s.transitions)), "<= 500 ms",
			s.transitionMax.Round(time.Millisecond).String(), s.transitionMax <= 500*time.Millisecond)
	}
}

// serveAPI serves the API of s and p on a port of its own until stop,
// which also ends the API's background work (River UI's caches), so that
// none of it outlives the run's database pool.
func serveAPI(ctx context.Context, s api.Settings, p api.Parts) (net.Listener, func(), error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, nil, err
	}
	apiCtx, cancel := context.WithCancel(ctx)
	cfg := api.ConfigOf(s, p)
	cfg.Context = apiCtx
	srv := &http.Server{Handler: api.New(cfg)}
	go srv.Serve(ln) //nolint:errcheck // ends with Close
	return ln, func() { _ = srv.Close(); cancel() }, nil
}
