package main

import (
	"cmp"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/pprof"
	"os"
	"path/filepath"
	"runtime"
	"runtime/debug"
	rpprof "runtime/pprof"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/propagation"

	"github.com/arke-institute/orchestrator/api"
	"github.com/arke-institute/orchestrator/blob"
	"github.com/arke-institute/orchestrator/compute"
	"github.com/arke-institute/orchestrator/compute/flycompute"
	"github.com/arke-institute/orchestrator/compute/localcompute"
	"github.com/arke-institute/orchestrator/config"
	"github.com/arke-institute/orchestrator/db"
	"github.com/arke-institute/orchestrator/executor"
	"github.com/arke-institute/orchestrator/jobs"
	"github.com/arke-institute/orchestrator/locals3"
	"github.com/arke-institute/orchestrator/logcoalesce"
	"github.com/arke-institute/orchestrator/metrics"
	"github.com/arke-institute/orchestrator/pause"
	"github.com/arke-institute/orchestrator/phases"
	"github.com/arke-institute/orchestrator/tracing"
	"github.com/arke-institute/orchestrator/webhook"
)

func migrate(ctx context.Context, args []string, stderr io.Writer) error {
	fs := flag.NewFlagSet("migrate", flag.ContinueOnError)
	fs.SetOutput(stderr)
	if err := fs.Parse(args); err != nil {
		return usageError{err.Error()}
	}
	_, logger, pool, err := begin(ctx, stderr, (*config.Config).CheckMigrate)
	if err != nil {
		return err
	}
	defer pool.Close()
	if err := db.Migrate(ctx, pool, logger); err != nil {
		return err
	}
	logger.Info("database is up to date")
	return nil
}

func serve(ctx context.Context, args []string, stderr io.Writer) error {
	fs := flag.NewFlagSet("serve", flag.ContinueOnError)
	fs.SetOutput(stderr)
	noMigrate := fs.Bool("no-migrate", false, "do not apply pending migrations on start")
	queuesFlag := fs.String("queues", "", "work only these job queues, comma-separated (e.g. ocr: a process that works OCR chunks and nothing else); default all")
	if err := fs.Parse(args); err != nil {
		return usageError{err.Error()}
	}
	var queues []string
	for q := range strings.SplitSeq(*queuesFlag, ",") {
		if q = strings.TrimSpace(q); q != "" {
			queues = append(queues, q)
		}
	}
	if err := executor.CheckQueues(queues); err != nil {
		return usageError{err.Error()}
	}
	cfg, logger, pool, err := begin(ctx, stderr, (*config.Config).CheckServe)
	if err != nil {
		return err
	}
	defer pool.Close()
	tracer, logger, stopTracing, err := startTracing(ctx, cfg, logger)
	if err != nil {
		return err
	}
	defer stopTracing()
	// Resolved before the local S3 server changes the working directory.
	embedded, tokenFiles, dataDir := embeddedDefault(cfg), map[string]string{}, ""
	if embedded {
		if dataDir, err = filepath.Abs(cfg.LocalDataDir); err != nil {
			return err
		}
		if tokenFiles, err = generateTokens(cfg, dataDir); err != nil {
			return err
		}
		if err := localWebhooks(cfg, dataDir); err != nil {
			return err
		}
	}
	stopProfiling, err := startProfiling(cfg, logger)
	if err != nil {
		return err
	}
	defer stopProfiling()
	if !*noMigrate {
		if err := db.Migrate(ctx, pool, logger); err != nil {
			return err
		}
		// goose's SQL parser pools a 4 MB buffer for each migration it
		// reads at once, 16 MB in all. A pool's unused items go at the
		// second collection after, which an idle process may not run for
		// minutes: the first batch's intake then collected with them in
		// its heap and doubled them in its goal.
		runtime.GC()
		debug.FreeOSMemory()
	}

	// Compute first: it resolves the worker program's path, and the local S3
	// server changes the working directory when it starts.
	backend, closeCompute, err := openCompute(ctx, cfg, logger)
	if err != nil {
		return err
	}
	defer closeCompute()
	store, stopStore, err := openStore(ctx, cfg, logger)
	if err != nil {
		return err
	}
	defer stopStore()
	m := metrics.New(metrics.Config{Pool: pool, Runtime: true, Logger: logger, RateFloors: cfg.Executors.RateFloors(), Prices: cfg.Prices})
	stopMetrics, err := startMetrics(cfg, m, logger)
	if err != nil {
		return err
	}
	defer stopMetrics()
	pauses := pause.NewGate(pool)
	hooks, err := webhook.New(pool, cfg.Webhook(), logger, m)
	if err != nil {
		return err
	}
	deps, err := executor.Register(jobs.Deps{
		Pool: pool, Store: store, Compute: backend, Settings: cfg.Jobs(), Logger: logger, Metrics: m, Pauses: pauses, Webhooks: hooks, Tracer: tracer,
	}, cfg.Executors, executor.Options{})
	if err != nil {
		return err
	}
	listener := &jobs.Listener{Pool: pool, ProcessID: jobs.NewProcessID(), Allowance: cfg.SweepRestartGrace, Logger: logger}
	riverClient, err := jobs.NewClient(deps, jobs.ClientConfig{Queues: queues, Listener: listener})
	if err != nil {
		return err
	}
	go listener.Run(ctx)
	if err := riverClient.Start(ctx); err != nil {
		return fmt.Errorf("starting job workers: %w", err)
	}

	warnClosedRoutes(cfg, logger)
	apiCfg := api.ConfigOf(cfg.API(), api.Parts{Pool: pool, River: riverClient, Executors: deps.Executors, Store: store, Logger: logger, Metrics: m, Pauses: pauses,
		Webhooks: hooks, Tracer: tracer})
	apiCfg.Context = ctx
	e := api.New(apiCfg)
	ln, err := net.Listen("tcp", cfg.ListenAddr)
	if err != nil {
		return fmt.Errorf("listening on %s (LISTEN_ADDR): %w", cfg.ListenAddr, err)
	}
	// Bounds on every connection: a client that sends its request or reads
	// its answer slowly cannot hold a connection (and its goroutine) for
	// ever. The event stream clears its own write deadline.
	srv := &http.Server{Handler: e, ReadHeaderTimeout: 10 * time.Second, ReadTimeout: 30 * time.Second,
		WriteTimeout: 60 * time.Second, IdleTimeout: 2 * time.Minute}
	serveErr := make(chan error, 1)
	go func() { serveErr <- srv.Serve(ln) }()
	logger.Info("orchestrator serving", "addr", ln.Addr().String(), "bucket", cfg.R2Bucket, "callback_base", cfg.OrchestratorURL)
	if embedded {
		greet(cfg, ln.Addr().String(), dataDir, tokenFiles, logger, stderr)
	}

	select {
	case <-ctx.Done():
	case err := <-serveErr:
		if !errors.Is(err, http.ErrServerClosed) {
			return fmt.Errorf("serving HTTP: %w", err)
		}
	}
	drain(context.WithoutCancel(ctx), srv, riverClient, cfg.ShutdownTimeout, logger)
	return nil
}

// drainer is what a drain stops: River's client (Stop lets the running
// jobs finish, StopAndCancel cancels them).
type drainer interface {
	Stop(ctx context.Context) error
	StopAndCancel(ctx context.Context) error
}

// cancelWait bounds the wait for cancelled jobs to return once a drain's
// time is up.
const cancelWait = 5 * time.Second

// drain stops a process within about timeout (SHUTDOWN_TIMEOUT): at once it
// takes no new connection and no new job; it answers the requests it holds
// and lets its running jobs finish, both at once. When timeout is up it
// cancels the jobs still running (River gives them back, to be run again
// by another process; every job is idempotent) and closes the connections
// left, then waits up to cancelWait for the jobs to return.
func drain(ctx context.Context, srv *http.Server, jobs drainer, timeout time.Duration, logger *slog.Logger) {
	start := time.Now()
	logger.Info("draining: no new jobs or connections; finishing the requests and jobs held", "within", timeout.String())
	soft, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	httpDone, jobsDone := make(chan error, 1), make(chan error, 1)
	go func() { httpDone <- srv.Shutdown(soft) }()
	go func() { jobsDone <- jobs.Stop(soft) }()
	httpErr, jobsErr := <-httpDone, <-jobsDone
	if jobsErr != nil {
		logger.Warn("jobs still running when the drain's time was up: cancelled, they go back to River", "error", jobsErr.Error())
		hard, cancelHard := context.WithTimeout(ctx, cancelWait)
		defer cancelHard()
		if err := jobs.StopAndCancel(hard); err != nil {
			logger.Warn("cancelled jobs did not return in time", "error", err.Error(), "waited", cancelWait.String())
		}
	}
	if httpErr != nil {
		logger.Warn("requests still open when the drain's time was up: connections closed", "error", httpErr.Error())
		_ = srv.Close()
	}
	logger.Info("drained", "took", time.Since(start).Round(time.Millisecond).String())
}

// generateTokens gives the embedded default the tokens its environment
// does not set (admin, read, ingest), kept in dataDir, and returns their
// files by setting.
func generateTokens(cfg *config.Config, dataDir string) (map[string]string, error) {
	files := map[string]string{}
	for _, tok := range localTokens {
		dst := tokenSetting(cfg, tok.Setting)
		if *dst != "" {
			continue
		}
		value, path, err := localToken(dataDir, tok.File)
		if err != nil {
			return nil, err
		}
		*dst, files[tok.Setting] = value, path
	}
	return files, nil
}

// localWebhooks gives the embedded default what its webhooks need that
// the environment does not set: a WEBHOOK_SECRET_KEY kept in dataDir, and
// loopback allowed, so that a receiver on this machine can be subscribed.
func localWebhooks(cfg *config.Config, dataDir string) error {
	if cfg.Webhooks.SecretKey == "" {
		key, _, err := localWebhookKey(dataDir)
		if err != nil {
			return fmt.Errorf("generating WEBHOOK_SECRET_KEY: %w", err)
		}
		cfg.Webhooks.SecretKey = key
	}
	if cfg.Webhooks.AllowNetworks == "" {
		cfg.Webhooks.AllowNetworks = localWebhookNetworks
	}
	return nil
}

// localWebhookNetworks are the networks the embedded default's webhooks
// may reach beyond the public ones: this machine's loopback.
const localWebhookNetworks = "127.0.0.0/8,::1/128"

// tokenSetting is the field of cfg holding the token setting names.
func tokenSetting(cfg *config.Config, setting string) *string {
	switch setting {
	case "ADMIN_TOKEN":
		return &cfg.AdminToken
	case "READ_TOKEN":
		return &cfg.ReadToken
	case "INGEST_TOKEN":
		return &cfg.IngestToken
	}
	panic("no token setting " + setting)
}

// warnClosedRoutes says which routes no credential opens.
func warnClosedRoutes(cfg *config.Config, logger *slog.Logger) {
	if cfg.AdminToken == "" {
		logger.Warn("ADMIN_TOKEN is not set: admin routes and River UI refuse every request")
	}
	if cfg.AdminToken == "" && cfg.ReadToken == "" && !cfg.StatusPublic {
		logger.Warn("neither READ_TOKEN nor ADMIN_TOKEN is set: reads and the dashboard refuse every request")
	}
	if cfg.IngestToken == "" && cfg.IngestSigningSecret == "" {
		logger.Warn("neither INGEST_TOKEN nor INGEST_SIGNING_SECRET is set: intake (POST /batches) refuses every request")
	}
	if cfg.Webhooks.SecretKey == "" {
		logger.Warn("WEBHOOK_SECRET_KEY is not set: webhooks are off (no subscription can be made, none is delivered)")
	}
}

// greet writes the run.env of the operator commands and prints the
// newcomer's banner: the embedded default's URLs, tokens and keys, as plain
// text (the tokens never go through the logger, and are shown on a
// terminal only).
func greet(cfg *config.Config, addr, dataDir string, tokenFiles map[string]string, logger *slog.Logger, stderr io.Writer) {
	apiURL := "http://" + loopback(addr)
	runEnv, err := writeRunEnv(dataDir, runInstance{
		DatabaseURL: cfg.DatabaseURL, OrchestratorURL: apiURL, TokenFiles: tokenFiles,
		S3Addr: cfg.LocalS3Addr, S3AccessKey: cfg.LocalS3AccessKey, S3SecretKey: cfg.LocalS3SecretKey,
	})
	if err != nil {
		logger.Warn("writing run.env for the operator commands", "error", err)
	}
	nb := newcomerBanner{
		URL:        apiURL,
		S3Endpoint: cfg.R2Endpoint, S3Access: cfg.R2AccessKeyID, S3Secret: cfg.R2SecretAccessKey,
		Buckets:     []string{cfg.R2Bucket, cfg.ArchiveBucket, cfg.CDNBucket},
		DatabaseURL: cfg.DatabaseURL, RunEnv: runEnv, ShowSecrets: isTerminal(stderr),
	}
	for _, tok := range localTokens {
		nb.Tokens = append(nb.Tokens, bannerToken{Setting: tok.Setting, Value: *tokenSetting(cfg, tok.Setting), File: tokenFiles[tok.Setting]})
	}
	nb.write(stderr)
}

// begin is how every database command starts: read the configuration,
// check that what the command needs is there, make the logger and connect.
func begin(ctx context.Context, stderr io.Writer, check func(*config.Config) error) (*config.Config, *slog.Logger, *pgxpool.Pool, error) {
	cfg, err := loadConfig()
	if err != nil {
		return nil, nil, nil, err
	}
	if err := check(cfg); err != nil {
		return nil, nil, nil, err
	}
	logger := newLogger(cfg, stderr)
	pool, err := openPool(ctx, cfg)
	if err != nil {
		return nil, nil, nil, err
	}
	return cfg, logger, pool, nil
}

// openPool connects to the database and checks that it answers, so a wrong
// DATABASE_URL stops the process with a clear message at once.
func openPool(ctx context.Context, cfg *config.Config) (*pgxpool.Pool, error) {
	pcfg, err := pgxpool.ParseConfig(cfg.DatabaseURL)
	if err != nil {
		return nil, fmt.Errorf("DATABASE_URL is not a valid PostgreSQL URL: %w", err)
	}
	pcfg.MaxConns = int32(cfg.DatabaseMaxConns)
	pool, err := pgxpool.NewWithConfig(ctx, pcfg)
	if err != nil {
		return nil, fmt.Errorf("connecting to the database: %w", err)
	}
	pingCtx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := pool.Ping(pingCtx); err != nil {
		pool.Close()
		return nil, fmt.Errorf("connecting to the database at %s: %w", redactURL(pcfg.ConnConfig.Host, pcfg.ConnConfig.Port, pcfg.ConnConfig.Database), err)
	}
	return pool, nil
}

// redactURL names a database without its credentials.
func redactURL(host string, port uint16, database string) string {
	return fmt.Sprintf("%s:%d/%s", host, port, database)
}

// openStore connects to R2 (or any S3 server at R2_ENDPOINT). With no R2
// setting at all it starts the embedded local S3 server instead, creates the
// buckets, and points the R2 settings at it, so everything downstream (the
// workers' environment included) sees one configuration. stop ends the
// local S3 server and waits for it (the gateway runs once per process at a
// time, so a serve run in process, as by the tests, must leave it stopped).
func openStore(ctx context.Context, cfg *config.Config, logger *slog.Logger) (store blob.Store, stop func(), err error) {
	if cfg.LocalStorage() {
		s3ctx, cancel := context.WithCancel(ctx)
		srv, err := locals3.Start(s3ctx, locals3.Options{
			Dir: cfg.LocalS3Dir, Addr: cfg.LocalS3Addr,
			AccessKey: cfg.LocalS3AccessKey, SecretKey: cfg.LocalS3SecretKey,
		})
		if err != nil {
			cancel()
			return nil, nil, fmt.Errorf("starting the local S3 server (no R2 settings given; LOCAL_S3_ADDR=%s): %w", cfg.LocalS3Addr, err)
		}
		stop = func() {
			cancel()
			select {
			case <-srv.Stopped():
			case <-time.After(10 * time.Second):
				logger.Warn("the local S3 server did not stop within 10 s")
			}
		}
		local, err := openLocalStore(ctx, cfg, srv, logger)
		if err != nil {
			stop()
			return nil, nil, err
		}
		return local, stop, nil
	}
	store, err = blob.NewS3(blob.S3Config{
		AccountID:       cfg.R2AccountID,
		Endpoint:        cfg.R2Endpoint,
		AccessKeyID:     cfg.R2AccessKeyID,
		SecretAccessKey: cfg.R2SecretAccessKey,
	})
	return store, func() {}, err
}

// openLocalStore points the configuration at the local S3 server srv and
// creates the buckets.
func openLocalStore(ctx context.Context, cfg *config.Config, srv *locals3.Server, logger *slog.Logger) (blob.Store, error) {
	s3cfg := srv.Config()
	cfg.R2Endpoint, cfg.R2AccessKeyID, cfg.R2SecretAccessKey = s3cfg.Endpoint, s3cfg.AccessKeyID, s3cfg.SecretAccessKey
	store, err := blob.NewS3(s3cfg)
	if err != nil {
		return nil, err
	}
	if cfg.CDNPublicURL == "" {
		// Variants are served straight from the local S3 server.
		cfg.CDNPublicURL = srv.Endpoint + "/" + cfg.CDNBucket
	}
	for _, b := range []string{cfg.R2Bucket, cfg.ArchiveBucket, cfg.CDNBucket} {
		if err := store.EnsureBucket(ctx, b); err != nil {
			return nil, fmt.Errorf("creating bucket %s on the local S3 server: %w", b, err)
		}
	}
	logger.Info("no R2 settings: using the local S3 server", "endpoint", srv.Endpoint, "data_dir", srv.DataDir,
		"buckets", []string{cfg.R2Bucket, cfg.ArchiveBucket, cfg.CDNBucket})
	return store, nil
}

// openCompute picks the machine backend: Fly.io when FLY_API_TOKEN is set,
// otherwise the local machine runner, which runs the worker program as a
// subprocess with the same environment a Fly machine gets. It returns a
// function that stops whatever the backend still runs.
func openCompute(ctx context.Context, cfg *config.Config, logger *slog.Logger) (compute.Backend, func(), error) {
	if cfg.FlyAPIToken != "" {
		b, err := flycompute.New(ctx, flycompute.Config{APIToken: cfg.FlyAPIToken, BaseURL: cfg.FlyFlapsBaseURL, Logger: logger})
		return b, func() {}, err
	}
	bin, err := workerBinary(cfg.LocalWorkerBin)
	if err != nil {
		return nil, nil, err
	}
	// Each machine phase's app runs its worker kind, as its image would.
	commands := make(map[string][]string)
	for _, p := range phases.All() {
		if spec := p.Spec(); spec.Worker != "" {
			commands[cfg.Executors.Machine.Phases[spec.Name].App] = []string{bin, spec.Worker}
		}
	}
	// A pool's machines are local processes, at most LocalMaxMachines at a
	// time: a larger pool would only queue machines that find its work
	// done when they start.
	for name, size := range cfg.Executors.Pool.Size {
		if size > cfg.LocalMaxMachines {
			cfg.Executors.Pool.Size[name] = cfg.LocalMaxMachines
			logger.Info("pool size capped at the local machines", "phase", string(name), "pool_size", cfg.LocalMaxMachines, "local_max_machines", cfg.LocalMaxMachines)
		}
	}
	b, err := localcompute.New(localcompute.Config{
		Commands:      commands,
		MaxConcurrent: cfg.LocalMaxMachines,
		Dir:           os.TempDir(),
		// One libvips thread per worker: the runner already runs one worker
		// per CPU.
		BaseEnv: []string{"VIPS_CONCURRENCY=1", "LOG_FORMAT=" + cmp.Or(cfg.LogFormat, "json")},
		Logger:  logger,
	})
	if err != nil {
		return nil, nil, err
	}
	logger.Info("no FLY_API_TOKEN: running machines as local processes", "worker", bin, "max_machines", cfg.LocalMaxMachines)
	return b, func() {
		stopCtx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = b.Shutdown(stopCtx)
	}, nil
}

// workerBinary finds the worker program for the local runner, as an
// absolute path: LOCAL_WORKER_BIN if set, else bin/worker (what `make run`
// builds), else "worker" beside the orchestrator's own binary.
func workerBinary(configured string) (string, error) {
	candidates := []string{configured}
	if configured == "" {
		candidates = []string{"bin/worker"}
		if exe, err := os.Executable(); err == nil {
			candidates = append(candidates, filepath.Join(filepath.Dir(exe), "worker"))
		}
	}
	for _, c := range candidates {
		abs, err := filepath.Abs(c)
		if err != nil {
			continue
		}
		if fi, err := os.Stat(abs); err == nil && !fi.IsDir() && fi.Mode()&0o111 != 0 {
			return abs, nil
		}
	}
	return "", fmt.Errorf("no worker program for the local machine runner (looked for %s): build it with `make build` (it lands in bin/worker), set LOCAL_WORKER_BIN, or set FLY_API_TOKEN to run machines on Fly", strings.Join(candidates, ", "))
}

// startMetrics serves the Prometheus metrics at /metrics on METRICS_ADDR,
// when it is set (off by default). The listener is apart from the API's:
// the API is reached by workers and ingest, the metrics only by the
// operator's scraper, so they need no credential. The returned function
// stops it.
func startMetrics(cfg *config.Config, m *metrics.Metrics, logger *slog.Logger) (func(), error) {
	if cfg.MetricsAddr == "" {
		return func() {}, nil
	}
	ln, err := net.Listen("tcp", cfg.MetricsAddr)
	if err != nil {
		return nil, fmt.Errorf("listening on %s (METRICS_ADDR): %w", cfg.MetricsAddr, err)
	}
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", m.Handler())
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	go srv.Serve(ln) //nolint:errcheck // ends with Close
	logger.Info("serving metrics", "addr", ln.Addr().String(), "path", "/metrics")
	return func() { _ = srv.Close() }, nil
}

// startTracing turns tracing on when an OTLP endpoint is configured
// (OTEL_EXPORTER_OTLP_ENDPOINT): it returns the Tracer, the logger that
// names the trace and span of each line logged in one, and a function that
// exports the spans still buffered. Off, it returns nil and the logger as
// it was. The Tracer's provider is also OpenTelemetry's global one, for the
// libraries that trace through it (the Machines API client).
func startTracing(ctx context.Context, cfg *config.Config, logger *slog.Logger) (*tracing.Tracer, *slog.Logger, func(), error) {
	tracer, err := tracing.Setup(ctx, cfg.TracingConfig())
	if err != nil || tracer == nil {
		return nil, logger, func() {}, err
	}
	otel.SetTracerProvider(tracer.Provider())
	otel.SetTextMapPropagator(propagation.TraceContext{})
	// An unreachable collector fails every export: said once a minute.
	quiet := slog.New(logcoalesce.New(logger.Handler(), time.Minute))
	otel.SetErrorHandler(otel.ErrorHandlerFunc(func(err error) { quiet.Warn("exporting traces", "error", err.Error()) }))
	logger = slog.New(tracing.LogHandler(logger.Handler()))
	logger.Info("tracing on: spans go to the OTLP endpoint", "service", cfg.Tracing.ServiceName, "sampler", cfg.Tracing.Sampler)
	return tracer, logger, func() {
		stopCtx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := tracer.Shutdown(stopCtx); err != nil {
			logger.Warn("exporting the last spans", "error", err.Error())
		}
	}, nil
}

// startProfiling serves net/http/pprof on PPROF_ADDR and records a CPU
// profile into CPU_PROFILE, when they are set; both are off by default. The
// returned function stops both and writes the CPU profile.
func startProfiling(cfg *config.Config, logger *slog.Logger) (func(), error) {
	var stops []func()
	stop := func() {
		for i := len(stops) - 1; i >= 0; i-- {
			stops[i]()
		}
	}
	if cfg.PprofAddr != "" {
		ln, err := net.Listen("tcp", cfg.PprofAddr)
		if err != nil {
			return nil, fmt.Errorf("listening on %s (PPROF_ADDR): %w", cfg.PprofAddr, err)
		}
		// Sample contention too, so /debug/pprof/mutex and /block say something.
		runtime.SetMutexProfileFraction(100)
		runtime.SetBlockProfileRate(int(time.Millisecond))
		mux := http.NewServeMux()
		mux.HandleFunc("/debug/pprof/", pprof.Index)
		mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
		mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
		mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
		mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
		srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
		go srv.Serve(ln) //nolint:errcheck // ends with Close
		stops = append(stops, func() { _ = srv.Close() })
		logger.Info("serving pprof", "addr", ln.Addr().String())
	}
	if cfg.CPUProfile != "" {
		f, err := os.Create(cfg.CPUProfile)
		if err != nil {
			stop()
			return nil, fmt.Errorf("creating CPU_PROFILE: %w", err)
		}
		if err := rpprof.StartCPUProfile(f); err != nil {
			_ = f.Close()
			stop()
			return nil, fmt.Errorf("starting the CPU profile: %w", err)
		}
		stops = append(stops, func() {
			rpprof.StopCPUProfile()
			if err := f.Close(); err != nil {
				logger.Warn("writing CPU_PROFILE", "error", err)
			}
		})
	}
	return stop, nil
}
