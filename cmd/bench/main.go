// Command bench measures the orchestrator against Postgres' own ceiling on
// the same machine and server (`make bench`, which starts a throwaway
// cluster with production durability: fsync and synchronous_commit on). It
// prints a table and writes BENCHMARKS.md. Every ratio compares figures from
// the same run, because these machines are noisy.
//
//  1. Baseline: pgbench, single-row UPDATE by primary key on a 100k-row
//     table, 8 clients, 2 threads.
//  2. Callback ingest: one phase of N processing tasks with valid tokens;
//     every success callback is posted through the HTTP API with 32
//     concurrent connections. Every callback must be applied and the phase
//     must transition exactly once.
package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
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
	"github.com/arke-institute/orchestrator/jobs"
	"github.com/arke-institute/orchestrator/service"
)

func main() {
	out := flag.String("out", "BENCHMARKS.md", "write the results here")
	tasks := flag.Int("tasks", 10000, "tasks in the callback-ingest phase")
	conns := flag.Int("conns", 32, "concurrent connections of the load generator")
	seconds := flag.Int("pgbench-seconds", 20, "duration of the pgbench baseline")
	flag.Parse()
	base := os.Getenv("BENCH_DATABASE_URL")
	if base == "" {
		fmt.Fprintln(os.Stderr, "bench: BENCH_DATABASE_URL is not set; run it with `make bench`")
		os.Exit(2)
	}
	ctx := context.Background()
	res, err := run(ctx, base, *tasks, *conns, *seconds)
	if err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		os.Exit(1)
	}
	table := res.table()
	fmt.Print(table)
	if err := os.WriteFile(*out, []byte(res.markdown(table)), 0o644); err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		os.Exit(1)
	}
	fmt.Println("wrote", *out)
}

type results struct {
	pgVersion   string
	baselineTPS float64
	tasks       int
	conns       int
	seconds     int
	ingestRate  float64
	p50, p99    time.Duration
	transition  time.Duration // from the last callback's answer to the phase's transition
}

func run(ctx context.Context, base string, tasks, conns, seconds int) (*results, error) {
	admin, err := pgx.Connect(ctx, base)
	if err != nil {
		return nil, err
	}
	defer admin.Close(ctx)
	r := &results{tasks: tasks, conns: conns, seconds: seconds}
	if err := admin.QueryRow(ctx, "SHOW server_version").Scan(&r.pgVersion); err != nil {
		return nil, err
	}
	var fsync, syncCommit string
	_ = admin.QueryRow(ctx, "SHOW fsync").Scan(&fsync)
	_ = admin.QueryRow(ctx, "SHOW synchronous_commit").Scan(&syncCommit)
	if fsync != "on" || syncCommit != "on" {
		return nil, fmt.Errorf("the server runs with fsync=%s synchronous_commit=%s: benchmarks need production durability", fsync, syncCommit)
	}

	fmt.Fprintf(os.Stderr, "baseline: pgbench for %ds...\n", seconds)
	if r.baselineTPS, err = pgbenchBaseline(ctx, admin, base, seconds); err != nil {
		return nil, fmt.Errorf("baseline: %w", err)
	}
	fmt.Fprintf(os.Stderr, "callback ingest: %d callbacks over %d connections...\n", tasks, conns)
	if err := callbackIngest(ctx, admin, base, r); err != nil {
		return nil, fmt.Errorf("callback ingest: %w", err)
	}
	return r, nil
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

// callbackIngest seeds one phase of processing tasks and posts all their
// callbacks through the real HTTP API, with the real River workers running.
func callbackIngest(ctx context.Context, admin *pgx.Conn, base string, r *results) error {
	dbURL, err := freshDatabase(ctx, admin, base, "bench_ingest")
	if err != nil {
		return err
	}
	pcfg, err := pgxpool.ParseConfig(dbURL)
	if err != nil {
		return err
	}
	pcfg.MaxConns = int32(config.DefaultDatabaseMaxConns) // as serve does
	pool, err := pgxpool.NewWithConfig(ctx, pcfg)
	if err != nil {
		return err
	}
	defer pool.Close()
	logger := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	if err := db.Migrate(ctx, pool, logger); err != nil {
		return err
	}
	cfg, err := config.Load(func(k string) (string, bool) {
		v, ok := map[string]string{"R2_ENDPOINT": "http://127.0.0.1:1", "R2_ACCESS_KEY_ID": "x", "R2_SECRET_ACCESS_KEY": "x",
			"FLY_LAUNCH_RATE": "100000", "FLY_LAUNCH_BURST": "100000"}[k]
		return v, ok
	})
	if err != nil {
		return err
	}
	store, err := blob.NewS3(blob.S3Config{Endpoint: cfg.R2Endpoint, AccessKeyID: "x", SecretAccessKey: "x"})
	if err != nil {
		return err
	}
	client, err := jobs.NewClient(jobs.Deps{Pool: pool, Store: store, Compute: instantBackend{}, Config: cfg, Logger: logger},
		jobs.ClientConfig{FetchPollInterval: 100 * time.Millisecond})
	if err != nil {
		return err
	}
	if err := client.Start(ctx); err != nil {
		return err
	}
	defer client.Stop(context.WithoutCancel(ctx)) //nolint:errcheck
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	srv := &http.Server{Handler: api.New(api.Config{Service: service.New(pool, client, cfg, logger), Pool: pool, Logger: logger})}
	go srv.Serve(ln) //nolint:errcheck
	defer srv.Close()

	const batchID, phase = "BENCH", "TIFF_CONVERSION"
	ids, err := seedPhase(ctx, pool, batchID, phase, r.tasks)
	if err != nil {
		return err
	}

	// The load: every success callback, conns at a time.
	transport := &http.Transport{MaxIdleConnsPerHost: r.conns, MaxConnsPerHost: r.conns}
	httpc := &http.Client{Transport: transport, Timeout: 60 * time.Second}
	work := make(chan int)
	latencies := make([]time.Duration, len(ids))
	var failures sync.Map
	var wg sync.WaitGroup
	start := time.Now()
	for range r.conns {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range work {
				body, _ := json.Marshal(map[string]any{"status": "success", "output_r2_key": fmt.Sprintf("staging/BENCH/f%06d.jpg", i),
					"output_file_name": fmt.Sprintf("f%06d.jpg", i), "output_file_size": 1000})
				req, _ := http.NewRequest(http.MethodPost, "http://"+ln.Addr().String()+"/callback/"+batchID+"/"+ids[i], bytes.NewReader(body))
				req.Header.Set("Authorization", "Bearer "+token(ids[i]))
				t := time.Now()
				resp, err := httpc.Do(req)
				latencies[i] = time.Since(t)
				if err != nil {
					failures.Store(i, err.Error())
					continue
				}
				_, _ = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				if resp.StatusCode != http.StatusOK {
					failures.Store(i, resp.Status)
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
	elapsed := lastAnswer.Sub(start)
	var failed []string
	failures.Range(func(k, v any) bool { failed = append(failed, fmt.Sprintf("%v: %v", k, v)); return len(failed) < 5 })
	if len(failed) > 0 {
		return fmt.Errorf("callbacks failed, e.g. %s", strings.Join(failed, "; "))
	}
	r.ingestRate = float64(len(ids)) / elapsed.Seconds()
	slices.Sort(latencies)
	r.p50, r.p99 = latencies[len(latencies)/2], latencies[len(latencies)*99/100]

	// Every callback applied, and the phase transitioned exactly once.
	deadline := time.Now().Add(2 * time.Minute)
	for {
		var status string
		if err := pool.QueryRow(ctx, "SELECT status FROM batches WHERE id = $1", batchID).Scan(&status); err != nil {
			return err
		}
		if status != phase {
			r.transition = time.Since(lastAnswer)
			break
		}
		if time.Now().After(deadline) {
			return errors.New("the phase did not transition within 2 minutes of the last callback")
		}
		time.Sleep(5 * time.Millisecond)
	}
	var completed, transitions int
	if err := pool.QueryRow(ctx, `SELECT (SELECT count(*) FROM tasks WHERE batch_id = $1 AND phase = $2 AND status = 'completed'),
		(SELECT count(*) FROM batch_events WHERE batch_id = $1 AND phase = $2 AND type = 'phase.completed')`, batchID, phase).Scan(&completed, &transitions); err != nil {
		return err
	}
	if completed != len(ids) || transitions != 1 {
		return fmt.Errorf("%d of %d callbacks applied, phase transitioned %d times", completed, len(ids), transitions)
	}
	return nil
}

// seedPhase makes a batch in phase with n files and n processing tasks whose
// callback tokens are token(id).
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

func token(id string) string { return "tok-" + id }

// instantBackend accepts every launch at once: the phase after the measured
// one launches its machines here, outside the measurement.
type instantBackend struct{}

func (instantBackend) Launch(_ context.Context, s compute.MachineSpec) (compute.Machine, error) {
	return compute.Machine{ID: "m-" + s.TaskID, App: s.App, TaskID: s.TaskID, State: "started"}, nil
}
func (instantBackend) FindByTask(context.Context, string, string) ([]compute.Machine, error) {
	return nil, nil
}
func (instantBackend) Destroy(context.Context, string, string) error { return nil }

func (r *results) table() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%-44s %14s\n", "figure", "value")
	fmt.Fprintf(&b, "%-44s %14.0f\n", "baseline: pgbench single-row UPDATE, TPS", r.baselineTPS)
	fmt.Fprintf(&b, "%-44s %14.0f\n", fmt.Sprintf("callback ingest (%d, %d conns), callbacks/s", r.tasks, r.conns), r.ingestRate)
	fmt.Fprintf(&b, "%-44s %13.2fx\n", "callback ingest / baseline", r.ingestRate/r.baselineTPS)
	fmt.Fprintf(&b, "%-44s %14s\n", "callback latency p50", r.p50.Round(10*time.Microsecond))
	fmt.Fprintf(&b, "%-44s %14s\n", "callback latency p99", r.p99.Round(10*time.Microsecond))
	fmt.Fprintf(&b, "%-44s %14s\n", "last callback -> phase transition", r.transition.Round(time.Millisecond))
	return b.String()
}

func (r *results) markdown(table string) string {
	host, _ := os.Hostname()
	return fmt.Sprintf(`# Benchmarks

Produced by `+"`make bench`"+` on %s (%s, %d CPUs, Go %s, PostgreSQL %s with fsync and
synchronous_commit on). Every ratio compares figures of this one run.

`+"```"+`
%s`+"```"+`

- **Baseline**: pgbench, a custom script doing one `+"`UPDATE`"+` by primary key on a
  100,000-row table; 8 clients, 2 threads, %d s. The per-transaction ceiling of
  this server.
- **Callback ingest**: one phase of %d processing tasks with valid tokens; a load
  generator posts every success callback through the HTTP API with %d
  concurrent connections, with the River workers running. Every callback must
  be applied and the phase must transition exactly once (checked).

Not measured yet (issue 5): end to end at 1,000 / 10,000 / 100,000 files, and
the workers against the vips CLI.

Reproduce: `+"`make bench`"+` (it starts a throwaway PostgreSQL cluster with production
durability; set BENCH_DATABASE_URL to use another server).
`, time.Now().UTC().Format("2006-01-02"), host, runtime.NumCPU(), runtime.Version(), r.pgVersion, table, r.seconds, r.tasks, r.conns)
}
