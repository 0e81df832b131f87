// Command worker is the program the orchestrator's machines run: on Fly.io
// (one image per kind, Dockerfile.<kind>-worker) and as a local subprocess
// in development. A machine of one task processes its file, POSTs one
// callback and exits; a pool machine (POOL_LEASE_URL set) leases task
// after task, runs each the same way, and exits when its pool is done.
//
// Usage:
//
//	worker KIND    run the task of a registered phase whose worker is KIND
//	               (tiff, image, ...: programs.gen.go, made from phases/)
//	worker help    print this help
//
// Configuration is the environment described in package worker (TASK_ID,
// BATCH_ID, INPUT_R2_KEY, INPUT_URL, OUTPUT_URLS, R2_BUCKET, CALLBACK_URL,
// CALLBACK_TOKEN, and for images ARCHIVE_BUCKET, CDN_BUCKET,
// CDN_PUBLIC_URL, VARIANT_SIZES), the settings a phase passes to its
// machines, plus:
//
//	JPEG_QUALITY       1-100, default 90
//	LOG_LEVEL          debug, info (default), warn or error; debug also
//	                   lets libvips's own warnings through
//	LOG_FORMAT         json (default) or text, on stderr
//	VIPS_CONCURRENCY   libvips threads; default: the CPUs, at most 4
//	TMPDIR             where the input is downloaded
//
// A pool machine's environment is POOL_LEASE_URL, POOL_TOKEN (its pool
// credential), POOL_IDLE_SECONDS and CALLBACK_RETRY_WINDOW; each leased
// task brings its own variables above, and the worker heartbeats at
// CALLBACK_URL/heartbeat while it works.
//
// Exit status: 0 once a callback is delivered, whether it reports success
// or an error (and when the orchestrator answers 409: it no longer wants
// the result); 1 when no callback could be delivered; 2 when there is
// nothing to report to (bad usage, or CALLBACK_URL, CALLBACK_TOKEN,
// TASK_ID or BATCH_ID unset). Every other problem, a missing INPUT_URL
// included, is reported through the callback.
//
// The worker holds no storage credentials: it reads its input with
// INPUT_URL, writes with the presigned requests of OUTPUT_URLS, and asks
// for any other URL at POST CALLBACK_URL/urls with its callback token.
package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"runtime"
	"strings"
	"syscall"

	"github.com/arke-institute/orchestrator/worker"
	"github.com/arke-institute/orchestrator/worker/vips"
)

// program is one worker kind cmd/worker runs (see programs.gen.go).
type program struct {
	kind  string
	phase string
	title string
	run   worker.Program
}

// usage lists the kinds of programs.gen.go.
func usage() string {
	var kinds []string
	var b strings.Builder
	for _, p := range programs {
		kinds = append(kinds, p.kind)
		fmt.Fprintf(&b, "  %-8s %s (phase %s)\n", p.kind, p.title, p.phase)
	}
	return "usage: worker " + strings.Join(kinds, "|") + "\n\n" + b.String() + `
Configured by the environment: TASK_ID, BATCH_ID, INPUT_R2_KEY, R2_BUCKET,
INPUT_URL (a presigned GET of the input), CALLBACK_URL, CALLBACK_TOKEN;
optional OUTPUT_URLS (presigned PUTs of the usual outputs, signed with
INPUT_URL, a line "METHOD BUCKET KEY SIGNATURE" each; others are asked for
at CALLBACK_URL/urls), INPUT_CID, INPUT_CONTENT_TYPE,
INPUT_FILE_NAME, JPEG_QUALITY (90), LOG_LEVEL, LOG_FORMAT, VIPS_CONCURRENCY.
No storage credentials.
image also: ARCHIVE_BUCKET, CDN_PUBLIC_URL, CDN_BUCKET (arke-cdn),
VARIANT_SIZES (200,800,1600). Each phase's own settings (docs/configuration.md) reach its
machines under their names.
`
}

// lookup is the program of kind, false if none.
func lookup(kind string) (program, bool) {
	for _, p := range programs {
		if p.kind == kind {
			return p, true
		}
	}
	return program{}, false
}

func main() {
	// A stopped machine gets SIGTERM (SIGINT locally): cancel the work, but
	// still report, with the signal as the reason.
	ctx, cancel := context.WithCancelCause(context.Background())
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT)
	go func() {
		sig := <-sigs
		cancel(fmt.Errorf("received %v", sig))
	}()
	os.Exit(run(ctx, os.Args[1:], os.Getenv, os.Stdout, os.Stderr))
}

// run is the whole program but for signals and os.Exit, so tests can run
// it in process.
func run(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) int {
	if len(args) == 1 && (args[0] == "help" || args[0] == "-h" || args[0] == "--help") {
		fmt.Fprint(stdout, usage())
		return 0
	}
	var prog program
	if len(args) == 1 {
		prog, _ = lookup(args[0])
	}
	if prog.run == nil {
		fmt.Fprint(stderr, usage())
		return 2
	}
	base := newLogger(getenv, stderr).With("worker", prog.kind, "phase", prog.phase)
	pool, pooled, err := worker.PoolFromEnv(getenv)
	switch {
	case err != nil:
		base.Error("cannot lease tasks", "error", err.Error())
		return 2
	case pooled:
		return runPool(ctx, prog, pool, getenv, base)
	}
	return runTask(ctx, prog, getenv, base)
}

// runPool is a pool machine's life: it leases task after task and runs
// each as a machine of its own would (runTask), until its pool is done
// or it has been idle for POOL_IDLE_SECONDS. Exit status: 0 then; 1 when
// the orchestrator could not be reached.
func runPool(ctx context.Context, prog program, pool worker.Pool, getenv func(string) string, base *slog.Logger) int {
	log := base.With("pool_machine", getenv("FLY_MACHINE_ID"))
	pool.Logger = log
	log.Info("pool machine starting", "idle", pool.Idle.String())
	n, err := pool.Run(ctx, getenv, func(ctx context.Context, getenv func(string) string) {
		runTask(ctx, prog, getenv, base)
	})
	if err != nil {
		log.Error("pool machine stopped", "tasks", n, "error", err.Error())
		return 1
	}
	return 0
}

// runTask runs one task from its environment and reports it (worker.Run).
// Exit status: 0 once a callback is delivered; 1 when none could be; 2
// when there is nothing to report to.
func runTask(ctx context.Context, prog program, getenv func(string) string, base *slog.Logger) int {
	kind := worker.Kind(prog.kind)
	log := base.With("task_id", getenv("TASK_ID"), "batch_id", getenv("BATCH_ID"))
	cfg, envErr := worker.ParseEnv(kind, getenv)
	if !cfg.Callback.Complete() {
		log.Error("cannot report to the orchestrator", "error", envErr.Error())
		return 2
	}
	cfg.Callback.Logger = log

	work := func(ctx context.Context) (any, error) {
		if envErr != nil {
			return nil, envErr
		}
		if err := vips.Startup(vips.Config{Concurrency: concurrency(getenv), Verbose: getenv("LOG_LEVEL") == "debug"}); err != nil {
			return nil, err
		}
		store := cfg.NewStore(log)
		log.Info("starting", "r2_key", cfg.Input.Key, "libvips", vips.Version(), "planned_urls", len(cfg.OutputURLs))
		res, err := prog.run(ctx, worker.Task{Config: cfg, Getenv: getenv, Store: store, Log: log})
		log.Info("work done", "url_requests", store.Asked())
		return res, err
	}
	if err := worker.Run(ctx, cfg.Callback, log, work); err != nil {
		log.Error("no callback delivered", "error", err.Error())
		return 1
	}
	return 0
}

// concurrency is the libvips thread count: 0 (libvips's own choice) when
// VIPS_CONCURRENCY is set, since libvips reads it itself; else the CPUs,
// at most 4, which is all one file's pipeline uses well.
func concurrency(getenv func(string) string) int {
	if getenv("VIPS_CONCURRENCY") != "" {
		return 0
	}
	return min(runtime.NumCPU(), 4)
}

func newLogger(getenv func(string) string, w io.Writer) *slog.Logger {
	var level slog.Level
	if err := level.UnmarshalText([]byte(getenv("LOG_LEVEL"))); err != nil {
		level = slog.LevelInfo
	}
	opts := &slog.HandlerOptions{Level: level}
	if strings.EqualFold(getenv("LOG_FORMAT"), "text") {
		return slog.New(slog.NewTextHandler(w, opts))
	}
	return slog.New(slog.NewJSONHandler(w, opts))
}
