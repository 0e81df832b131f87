// Package jobs holds the River jobs that move batches along. Each job loads
// rows, calls pure phase logic, then writes rows, enqueues follow-up jobs and
// completes itself in one transaction, so a crash at any point either leaves
// the job to run again or leaves its whole effect in place. (A job that
// snoozes, such as a launcher with tasks still pending or a fan-in check
// waiting out an open phase, has written nothing it would lose.)
//
// This package is the pipeline's core: it knows batches, phases and file
// generations. How a phase's work runs (machines, chunks, documents) is its
// executor's business (Executor; the kinds are the packages under
// executor/), which the core asks whatever depends on it.
//
// The core's jobs:
//   - batch_start: read and validate the manifest, write generation 0,
//     enter the first phase with work;
//   - phase_check: the fan-in; when no work of the phase is open, transform
//     the file list and enter the next phase (or finish);
//   - phase_build: write the rest of a large next generation, and its
//     work, in chunks while its phase already runs;
//   - task_sweep (periodic): the executors' sweeps (timeouts), and nudge
//     batches whose wake-up was lost;
//   - batch_finalize: deliver the final manifest to ingest (an outbox);
//   - retention (periodic): remove the processing state of batches that
//     finished more than RETENTION_DAYS ago.
package jobs

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"math/rand/v2"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/riverqueue/river/rivertype"
	"github.com/riverqueue/rivercontrib/otelriver"

	"github.com/arke-institute/orchestrator/blob"
	"github.com/arke-institute/orchestrator/compute"
	"github.com/arke-institute/orchestrator/db"
	"github.com/arke-institute/orchestrator/logcoalesce"
	"github.com/arke-institute/orchestrator/metrics"
	"github.com/arke-institute/orchestrator/pause"
	"github.com/arke-institute/orchestrator/tracing"
	"github.com/arke-institute/orchestrator/webhook"
)

// Deps are the outside things the workers use.
type Deps struct {
	Pool *pgxpool.Pool
	// Store reads manifests and writes the processed manifest when there is
	// no ingest service to call.
	Store blob.Store
	// Compute launches and destroys the phases' machines.
	Compute compute.Backend
	// Executors run the phases' work (package executor registers them).
	Executors *Executors
	// Settings are the pipeline's: buckets, URLs, limits, retention.
	Settings Settings
	Logger   *slog.Logger
	// HTTPClient calls the ingest service; nil uses a client with a 30 s
	// timeout.
	HTTPClient *http.Client
	// Metrics counts batches, tasks, launches and deliveries; nil counts
	// nothing.
	Metrics *metrics.Metrics
	// Pauses tell the executors whether work is paused (POST
	// /admin/pause): they launch, lease, call providers and step
	// documents only when not. nil pauses nothing.
	Pauses *pause.Gate
	// Webhooks deliver events to subscribed receivers: their jobs are
	// registered with the client's. nil delivers none.
	Webhooks *webhook.Service
	// Tracer starts the spans of batches' steps and of their work, and
	// the River client traces every job with it; nil traces nothing.
	Tracer *tracing.Tracer
}

// ClientConfig tunes the River client.
type ClientConfig struct {
	// MaxWorkers is how many jobs run at once in this process; default 50.
	MaxWorkers int
	// FetchPollInterval bounds how late a job inserted without a notification
	// is picked up; default DefaultFetchPollInterval.
	FetchPollInterval time.Duration
	// NoSweep leaves out the periodic task_sweep, for tests that must show
	// that no wake-up is lost without the sweep's backstop.
	NoSweep bool
	// Listener is this process's (its Run beats); the sweep beats with it
	// before it times anything out, so that a silence of the fleet is made
	// up for first. nil: the sweep does not.
	Listener *Listener
	// Build decides when a transition writes the next generation in
	// chunks; zero values take the defaults.
	Build BuildSizes
	// TestHooks, for tests only, watch and steer this client's workers.
	TestHooks *TestHooks
	// Queues, when set, are the only queues this client works (e.g. "ocr":
	// a process that works chunks and nothing else). Jobs of other queues
	// are left to other processes.
	Queues []string
}

// BuildSizes decide when a phase transition writes the next file
// generation in chunks (PhaseBuildArgs) rather than in its own transaction.
type BuildSizes struct {
	// FirstFiles is how many files of a generation the transition reads
	// before it may hand the rest to phase_build; a generation that is no
	// larger is written whole, in the transition's transaction. Default
	// 2,000; negative: never chunk.
	FirstFiles int
	// ChunkFiles is how many files of the next generation each of
	// phase_build's transactions writes, and how many of generation 0
	// batch_start reads and writes at a time. Default 5,000.
	ChunkFiles int
	// MaxAttempts is how many times a build is tried before its batch
	// fails; 0 takes PhaseBuildArgs' default (10).
	MaxAttempts int
}

func (b BuildSizes) withDefaults() BuildSizes {
	if b.FirstFiles == 0 {
		b.FirstFiles = 2000
	}
	if b.ChunkFiles <= 0 {
		b.ChunkFiles = 5000
	}
	return b
}

// DefaultFetchPollInterval is how often River looks for jobs it was not
// notified of. River notifies a queue of inserted jobs at most once per
// FetchCooldown (100 ms) per process, so while callbacks insert phase_check
// jobs, the phase_launch that a transition inserts right after is often not
// notified at all: with River's default of 1 s each transition then
// waited up to a second (docs/architecture.md, How fast, has the figure).
// A fetch that finds nothing is one cheap index probe.
const DefaultFetchPollInterval = 100 * time.Millisecond

// NewClient builds the River client with every worker registered: the
// core's and each executor's. The client both inserts jobs (intake,
// callbacks) and, once started, works them.
func NewClient(deps Deps, cfg ClientConfig) (*river.Client[pgx.Tx], error) {
	if deps.Pool == nil || deps.Store == nil || deps.Logger == nil || deps.Executors == nil {
		return nil, errors.New("jobs: Pool, Store, Executors and Logger are required")
	}
	if deps.HTTPClient == nil {
		deps.HTTPClient = &http.Client{Timeout: 30 * time.Second}
	}
	if cfg.MaxWorkers <= 0 {
		cfg.MaxWorkers = 50
	}
	if cfg.FetchPollInterval <= 0 {
		cfg.FetchPollInterval = DefaultFetchPollInterval
	}
	workers := river.NewWorkers()
	build := cfg.Build.withDefaults()
	river.AddWorker(workers, &BatchStartWorker{deps: deps, build: build})
	river.AddWorker(workers, &PhaseCheckWorker{deps: deps, build: build, hooks: cfg.TestHooks})
	river.AddWorker(workers, &PhaseBuildWorker{deps: deps, build: build, hooks: cfg.TestHooks})
	river.AddWorker(workers, &TaskSweepWorker{deps: deps, listener: cfg.Listener})
	river.AddWorker(workers, &BatchFinalizeWorker{deps: deps})
	river.AddWorker(workers, &RetentionWorker{deps: deps})
	river.AddWorker(workers, &PriorityAgeWorker{deps: deps})
	// River rescues no job sooner than this, and refuses a JobTimeout
	// above it; every worker sets its own Timeout.
	rescueAfter := ShortTimeout
	queues := map[string]river.QueueConfig{
		river.QueueDefault: {MaxWorkers: cfg.MaxWorkers},
		BuildQueue:         {MaxWorkers: buildWorkers},
	}
	var periodic []*river.PeriodicJob
	for _, e := range deps.Executors.All() {
		j := e.Jobs(workers)
		for q, qc := range j.Queues {
			queues[q] = qc
		}
		periodic = append(periodic, j.Periodic...)
		if j.Timeout > 0 {
			rescueAfter = min(rescueAfter, j.Timeout)
		}
	}
	if deps.Webhooks != nil {
		q, p := deps.Webhooks.Register(workers)
		maps.Copy(queues, q)
		periodic = append(periodic, p...)
	}
	if !cfg.NoSweep {
		periodic = append(periodic, river.NewPeriodicJob(
			river.PeriodicInterval(deps.Settings.SweepInterval),
			func() (river.JobArgs, *river.InsertOpts) { return TaskSweepArgs{}, nil },
			&river.PeriodicJobOpts{RunOnStart: true, ID: "task_sweep"},
		))
	}
	if deps.Settings.Retention.Days > 0 {
		if _, ok := deps.Store.(blob.Deleter); deps.Settings.Retention.Staging && !ok {
			return nil, errors.New("jobs: RETENTION_STAGING needs a store that can list and delete objects")
		}
		periodic = append(periodic, river.NewPeriodicJob(
			river.PeriodicInterval(deps.Settings.Retention.Interval),
			func() (river.JobArgs, *river.InsertOpts) { return RetentionArgs{}, nil },
			&river.PeriodicJobOpts{RunOnStart: true, ID: "retention"},
		))
	}
	if aging := deps.Settings.Priorities.Aging; aging > 0 {
		periodic = append(periodic, river.NewPeriodicJob(
			river.PeriodicInterval(aging),
			func() (river.JobArgs, *river.InsertOpts) { return PriorityAgeArgs{}, nil },
			&river.PeriodicJobOpts{ID: "priority_age"},
		))
	}
	if len(cfg.Queues) > 0 {
		if err := checkQueues(queues, cfg.Queues); err != nil {
			return nil, err
		}
		picked := make(map[string]river.QueueConfig, len(cfg.Queues))
		for _, q := range cfg.Queues {
			picked[q] = queues[q]
		}
		queues = picked
	}
	var middleware []rivertype.Middleware
	if deps.Tracer != nil {
		// Every job run is a span of a trace of its own, linked to the
		// span that inserted the job (through the job's metadata): jobs
		// run late and many times, and would make one endless trace.
		middleware = append(middleware, otelriver.NewMiddleware(&otelriver.MiddlewareConfig{
			TracerProvider: deps.Tracer.Provider(), EnableTracePropagation: true, EnableWorkSpanJobKindSuffix: true,
		}))
	}
	return river.NewClient(riverpgxv5.New(deps.Pool), &river.Config{
		Middleware: middleware,
		// River logs an error per poll while Postgres is away: a given
		// message is written once per riverLogEvery, with the count held
		// back. Its routine information is debug (quieter).
		Logger:            slog.New(logcoalesce.New(quieter{deps.Logger.Handler()}, riverLogEvery)),
		Queues:            queues,
		Workers:           workers,
		ErrorHandler:      jobErrorLogger{deps.Logger},
		PeriodicJobs:      periodic,
		FetchPollInterval: cfg.FetchPollInterval,
		// A job of a killed process must not hold its unique slot (a
		// batch's launcher or fan-in check) for River's default hour.
		// River rescues a running job once both this and the job's own
		// Timeout have passed, at its next rescue round (every 30 s), so
		// most jobs run again within ShortTimeout + 30 s of a crash;
		// an executor's longer jobs within their own bound + 30 s.
		JobTimeout:           rescueAfter,
		RescueStuckJobsAfter: rescueAfter,
	})
}

// CoreQueues are the River queues of the core's jobs: "default" (batches,
// phases, launches, callbacks' follow-ups), "phase_build" and "webhooks"
// (the webhooks' dispatcher and deliveries).
func CoreQueues() []string { return []string{river.QueueDefault, BuildQueue, webhook.Queue} }

// CheckQueues refuses a name that is none of queues.
func CheckQueues(queues, names []string) error {
	for _, q := range names {
		if !slices.Contains(queues, q) {
			return fmt.Errorf("no job queue %q (the queues are %s)", q, strings.Join(queues, ", "))
		}
	}
	return nil
}

func checkQueues(known map[string]river.QueueConfig, names []string) error {
	for _, q := range names {
		if _, ok := known[q]; !ok {
			all := make([]string, 0, len(known))
			for k := range known {
				all = append(all, k)
			}
			slices.Sort(all)
			return fmt.Errorf("no job queue %q (the queues are %s)", q, strings.Join(all, ", "))
		}
	}
	return nil
}

// Defaults is river.WorkerDefaults with our jobs' usual timeout,
// ShortTimeout: embed it in a worker.
type Defaults[T river.JobArgs] struct{ river.WorkerDefaults[T] }

// Timeout is ShortTimeout.
func (Defaults[T]) Timeout(*river.Job[T]) time.Duration { return ShortTimeout }

// ShortTimeout bounds one run of every job but phase_build and those an
// executor bounds otherwise (batch starts, launch rounds, fan-in checks,
// the sweep, deliveries, machine cleanup), and so how soon a killed
// process's job is rescued: within ShortTimeout and River's 30 s rescue
// interval, 75 s.
const ShortTimeout = 45 * time.Second

// riverLogEvery is how often River's log writes one message at warning
// level or above (logcoalesce).
const riverLogEvery = 5 * time.Second

// longJobTimeout bounds one run of phase_build, which writes a large
// generation chunk after chunk (a rescued build resumes from its cursor).
const longJobTimeout = 5 * time.Minute

// jobErrorLogger logs a job's error or panic with the batch_id and phase
// of its args, which River's own line about it lacks, so that everything
// about a batch is found by its id. River's retry schedule is left alone.
type jobErrorLogger struct{ logger *slog.Logger }

var _ river.ErrorHandler = jobErrorLogger{}

// HandleError implements river.ErrorHandler.
func (l jobErrorLogger) HandleError(ctx context.Context, job *rivertype.JobRow, err error) *river.ErrorHandlerResult {
	l.logger.WarnContext(ctx, "job failed", append(jobAttrs(job), "error", err)...)
	return nil
}

// HandlePanic implements river.ErrorHandler.
func (l jobErrorLogger) HandlePanic(ctx context.Context, job *rivertype.JobRow, panicVal any, trace string) *river.ErrorHandlerResult {
	l.logger.ErrorContext(ctx, "job panicked", append(jobAttrs(job), "panic", fmt.Sprint(panicVal), "trace", trace)...)
	return nil
}

// jobAttrs names a job and, when its args have them, its batch and phase.
func jobAttrs(job *rivertype.JobRow) []any {
	var args struct {
		BatchID string `json:"batch_id"`
		Phase   string `json:"phase"`
	}
	_ = json.Unmarshal(job.EncodedArgs, &args)
	attrs := []any{"job_id", job.ID, "kind", job.Kind, "attempt", job.Attempt, "max_attempts", job.MaxAttempts}
	if args.BatchID != "" {
		attrs = append(attrs, "batch_id", args.BatchID)
	}
	if args.Phase != "" {
		attrs = append(attrs, "phase", args.Phase)
	}
	return attrs
}

// BatchFinished counts a batch that a committed transaction moved to DONE
// or ERROR (b as BatchSetDone or BatchSetError returned it); nil is a batch
// that had already ended, and counts nothing.
func (d Deps) BatchFinished(b *db.Batch) {
	if b == nil {
		return
	}
	took := time.Duration(0)
	if b.CompletedAt != nil {
		took = b.CompletedAt.Sub(b.StartedAt)
	}
	d.Metrics.BatchFinished(b.Status, took)
	attrs := []any{"batch_id", b.ID, "status", b.Status, "duration_ms", took.Milliseconds()}
	if b.Phase != nil {
		attrs = append(attrs, "phase", *b.Phase)
	}
	if b.Error != nil {
		d.Logger.Warn("batch finished", append(attrs, "error", *b.Error)...)
		return
	}
	d.Logger.Info("batch finished", attrs...)
}

// JobBatch loads the batch a job is about. A batch that does not exist
// cancels the job (river.JobCancel): retrying would not make it appear.
func (d Deps) JobBatch(ctx context.Context, id string) (db.Batch, error) {
	batch, err := db.New(d.Pool).BatchGetByID(ctx, id)
	if errors.Is(err, pgx.ErrNoRows) {
		return db.Batch{}, river.JobCancel(fmt.Errorf("batch %s does not exist", id))
	}
	if err != nil {
		return db.Batch{}, fmt.Errorf("loading batch %s: %w", id, err)
	}
	return batch, nil
}

// NewEvent is a batch_events row for BatchEventInsertMany.
func NewEvent(batchID, typ, phase, taskID string, data any) db.BatchEventInsertManyParams {
	return db.Event{BatchID: batchID, Type: typ, Phase: phase, TaskID: taskID, Data: data}.Row()
}

// Backoff is 2^attempt seconds capped at limit, plus up to 20% jitter.
func Backoff(attempt int, limit time.Duration) time.Duration {
	d := limit
	if attempt < 20 {
		d = min(time.Duration(1<<attempt)*time.Second, limit)
	}
	return d + time.Duration(rand.Int64N(int64(d)/5+1))
}
