// Command worker is the program the orchestrator's machines run, one
// process per task: on Fly.io (Dockerfile.tiff-worker,
// Dockerfile.image-worker) and as a local subprocess in development. It
// processes one file, POSTs one callback and exits.
//
// Usage:
//
//	worker tiff    convert the TIFF at INPUT_R2_KEY to JPEG, one per page
//	worker image   make CDN variants of the image at INPUT_R2_KEY, archive
//	               it and write its .ref.json
//	worker help    print this help
//
// Configuration is the environment described in package worker (TASK_ID,
// BATCH_ID, INPUT_R2_KEY, R2_*, CALLBACK_URL, CALLBACK_TOKEN, and for
// images ARCHIVE_BUCKET, CDN_BUCKET, CDN_PUBLIC_URL, VARIANT_SIZES), plus:
//
//	JPEG_QUALITY       1-100, default 90
//	LOG_LEVEL          debug, info (default), warn or error; debug also
//	                   lets libvips's own warnings through
//	LOG_FORMAT         json (default) or text, on stderr
//	VIPS_CONCURRENCY   libvips threads; default: the CPUs, at most 4
//	TMPDIR             where the input is downloaded
//
// Exit status: 0 once a callback is delivered, whether it reports success
// or an error (and when the orchestrator answers 409: it no longer wants
// the result); 1 when no callback could be delivered; 2 when there is
// nothing to report to (bad usage, or CALLBACK_URL, CALLBACK_TOKEN,
// TASK_ID or BATCH_ID unset). Every other problem, a missing R2 variable
// included, is reported through the callback.
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

	"github.com/arke-institute/orchestrator/phases"
	"github.com/arke-institute/orchestrator/worker"
	"github.com/arke-institute/orchestrator/worker/imageworker"
	"github.com/arke-institute/orchestrator/worker/tiffworker"
	"github.com/arke-institute/orchestrator/worker/vips"
)

const usage = `usage: worker tiff|image

  tiff    convert the TIFF at INPUT_R2_KEY to JPEG, one per page
  image   make CDN variants of the image at INPUT_R2_KEY, archive it and
          write its .ref.json

Configured by the environment: TASK_ID, BATCH_ID, INPUT_R2_KEY, R2_BUCKET,
R2_ACCOUNT_ID or R2_ENDPOINT, R2_ACCESS_KEY_ID, R2_SECRET_ACCESS_KEY,
CALLBACK_URL, CALLBACK_TOKEN; optional INPUT_CID, INPUT_CONTENT_TYPE,
INPUT_FILE_NAME, JPEG_QUALITY (90), LOG_LEVEL, LOG_FORMAT, VIPS_CONCURRENCY.
image also: ARCHIVE_BUCKET, CDN_PUBLIC_URL, CDN_BUCKET (arke-cdn),
VARIANT_SIZES (200,800,1600).
`

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
		fmt.Fprint(stdout, usage)
		return 0
	}
	if len(args) != 1 || (args[0] != string(worker.KindTIFF) && args[0] != string(worker.KindImage)) {
		fmt.Fprint(stderr, usage)
		return 2
	}
	kind := worker.Kind(args[0])

	phase := phases.TIFFConversion
	if kind == worker.KindImage {
		phase = phases.ImageProcessing
	}
	log := newLogger(getenv, stderr).With("worker", string(kind),
		"task_id", getenv("TASK_ID"), "batch_id", getenv("BATCH_ID"), "phase", string(phase))
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
		store, err := cfg.NewStore()
		if err != nil {
			return nil, err
		}
		log.Info("starting", "r2_key", cfg.Input.Key, "libvips", vips.Version())
		if kind == worker.KindTIFF {
			return tiffworker.Convert(ctx, cfg, store, log)
		}
		return imageworker.Process(ctx, cfg, store, log)
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
