package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/arke-institute/orchestrator/api"
	"github.com/arke-institute/orchestrator/blob"
	"github.com/arke-institute/orchestrator/compute"
	"github.com/arke-institute/orchestrator/compute/flycompute"
	"github.com/arke-institute/orchestrator/config"
	"github.com/arke-institute/orchestrator/db"
	"github.com/arke-institute/orchestrator/internal/locals3"
	"github.com/arke-institute/orchestrator/jobs"
	"github.com/arke-institute/orchestrator/service"
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
	if err := fs.Parse(args); err != nil {
		return usageError{err.Error()}
	}
	cfg, logger, pool, err := begin(ctx, stderr, (*config.Config).CheckServe)
	if err != nil {
		return err
	}
	defer pool.Close()
	if !*noMigrate {
		if err := db.Migrate(ctx, pool, logger); err != nil {
			return err
		}
	}

	store, err := openStore(ctx, cfg, logger)
	if err != nil {
		return err
	}

	backend, err := openCompute(ctx, cfg, logger)
	if err != nil {
		return err
	}
	riverClient, err := jobs.NewClient(jobs.Deps{
		Pool: pool, Store: store, Compute: backend, Config: cfg, Logger: logger,
	}, jobs.ClientConfig{})
	if err != nil {
		return err
	}
	if err := riverClient.Start(ctx); err != nil {
		return fmt.Errorf("starting job workers: %w", err)
	}

	if cfg.AdminToken == "" {
		logger.Warn("ADMIN_TOKEN is not set: admin routes refuse every request")
	}
	e := api.New(api.Config{
		Service: service.New(pool, riverClient, cfg, logger), Pool: pool, Logger: logger, AdminToken: cfg.AdminToken,
	})
	ln, err := net.Listen("tcp", cfg.ListenAddr)
	if err != nil {
		return fmt.Errorf("listening on %s (LISTEN_ADDR): %w", cfg.ListenAddr, err)
	}
	srv := &http.Server{Handler: e, ReadHeaderTimeout: 10 * time.Second}
	serveErr := make(chan error, 1)
	go func() { serveErr <- srv.Serve(ln) }()
	logger.Info("orchestrator serving", "addr", ln.Addr().String(), "bucket", cfg.R2Bucket, "callback_base", cfg.OrchestratorURL)

	select {
	case <-ctx.Done():
	case err := <-serveErr:
		if !errors.Is(err, http.ErrServerClosed) {
			return fmt.Errorf("serving HTTP: %w", err)
		}
	}
	logger.Info("shutting down")
	shutdownCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
	defer cancel()
	if err := srv.Shutdown(shutdownCtx); err != nil {
		logger.Warn("HTTP shutdown", "error", err)
	}
	if err := riverClient.Stop(shutdownCtx); err != nil {
		logger.Warn("job workers shutdown", "error", err)
	}
	return nil
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
// workers' environment included) sees one configuration.
func openStore(ctx context.Context, cfg *config.Config, logger *slog.Logger) (blob.Store, error) {
	if cfg.LocalStorage() {
		srv, err := locals3.Start(ctx, locals3.Options{
			Dir: cfg.LocalS3Dir, Addr: cfg.LocalS3Addr,
			AccessKey: cfg.LocalS3AccessKey, SecretKey: cfg.LocalS3SecretKey,
		})
		if err != nil {
			return nil, fmt.Errorf("starting the local S3 server (no R2 settings given; LOCAL_S3_ADDR=%s): %w", cfg.LocalS3Addr, err)
		}
		s3cfg := srv.Config()
		cfg.R2Endpoint, cfg.R2AccessKeyID, cfg.R2SecretAccessKey = s3cfg.Endpoint, s3cfg.AccessKeyID, s3cfg.SecretAccessKey
		store, err := blob.NewS3(s3cfg)
		if err != nil {
			return nil, err
		}
		for _, b := range []string{cfg.R2Bucket, cfg.ArchiveBucket} {
			if err := store.EnsureBucket(ctx, b); err != nil {
				return nil, fmt.Errorf("creating bucket %s on the local S3 server: %w", b, err)
			}
		}
		logger.Info("no R2 settings: using the local S3 server", "endpoint", srv.Endpoint, "data_dir", srv.DataDir,
			"access_key", cfg.LocalS3AccessKey, "buckets", []string{cfg.R2Bucket, cfg.ArchiveBucket})
		return store, nil
	}
	return blob.NewS3(blob.S3Config{
		AccountID:       cfg.R2AccountID,
		Endpoint:        cfg.R2Endpoint,
		AccessKeyID:     cfg.R2AccessKeyID,
		SecretAccessKey: cfg.R2SecretAccessKey,
	})
}

// openCompute picks the machine backend: Fly.io when FLY_API_TOKEN is set.
// Without it there is nothing to launch on yet, and launches fail with a
// message that says so (the batch goes to ERROR after the phase retries).
func openCompute(ctx context.Context, cfg *config.Config, logger *slog.Logger) (compute.Backend, error) {
	if cfg.FlyAPIToken == "" {
		logger.Warn("FLY_API_TOKEN is not set: machines cannot be launched")
		return noCompute{}, nil
	}
	return flycompute.New(ctx, flycompute.Config{APIToken: cfg.FlyAPIToken, BaseURL: cfg.FlyFlapsBaseURL, Logger: logger})
}

// noCompute is the backend when none is configured.
type noCompute struct{}

var errNoCompute = errors.New("no compute backend is configured: set FLY_API_TOKEN")

func (noCompute) Launch(context.Context, compute.MachineSpec) (compute.Machine, error) {
	return compute.Machine{}, compute.Permanent(errNoCompute, 0)
}

func (noCompute) FindByTask(context.Context, string, string) ([]compute.Machine, error) {
	return nil, nil
}

func (noCompute) Destroy(context.Context, string, string) error { return nil }
