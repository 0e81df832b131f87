// Package jobs holds the River jobs that move batches along. Each job loads
// rows, calls pure phase logic, then writes rows, enqueues follow-up jobs and
// completes itself in one transaction, so a crash at any point either leaves
// the job to run again or leaves its whole effect in place.
package jobs

import (
	"errors"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"

	"github.com/arke-institute/orchestrator/blob"
	"github.com/arke-institute/orchestrator/manifest"
)

// Deps are the outside things the workers use.
type Deps struct {
	Pool *pgxpool.Pool
	// Store reads manifests (and, later, everything else in the bucket).
	Store blob.Store
	// Bucket is the staging bucket (R2_BUCKET) holding manifests and files.
	Bucket string
	// Limits are the manifest size limits (MAX_FILE_SIZE, MAX_BATCH_SIZE).
	Limits manifest.Limits
	Logger *slog.Logger
}

// ClientConfig tunes the River client.
type ClientConfig struct {
	// MaxWorkers is how many jobs run at once in this process; default 50.
	MaxWorkers int
	// FetchPollInterval bounds how late a job inserted without a notification
	// is picked up; default River's 1 s.
	FetchPollInterval time.Duration
}

// NewClient builds the River client with every worker registered. The client
// both inserts jobs (intake) and, once started, works them.
func NewClient(deps Deps, cfg ClientConfig) (*river.Client[pgx.Tx], error) {
	if deps.Pool == nil || deps.Store == nil || deps.Logger == nil {
		return nil, errors.New("jobs: Pool, Store and Logger are required")
	}
	if deps.Bucket == "" {
		return nil, errors.New("jobs: Bucket is required")
	}
	if cfg.MaxWorkers <= 0 {
		cfg.MaxWorkers = 50
	}
	workers := river.NewWorkers()
	river.AddWorker(workers, &BatchStartWorker{deps: deps})
	return river.NewClient(riverpgxv5.New(deps.Pool), &river.Config{
		Logger:            deps.Logger,
		Queues:            map[string]river.QueueConfig{river.QueueDefault: {MaxWorkers: cfg.MaxWorkers}},
		Workers:           workers,
		FetchPollInterval: cfg.FetchPollInterval,
		// Our jobs are short; a worker killed mid-job should not hold a
		// unique slot for River's default hour before it is rescued.
		JobTimeout:           5 * time.Minute,
		RescueStuckJobsAfter: 10 * time.Minute,
	})
}
