// Package service holds the orchestrator's operations on batches as the API
// and the CLI see them: accept a batch, report its status. Handlers stay thin
// by calling exactly one of these.
package service

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/jackc/pgerrcode"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"

	"github.com/arke-institute/orchestrator/batchurls"
	"github.com/arke-institute/orchestrator/blob"
	"github.com/arke-institute/orchestrator/config"
	"github.com/arke-institute/orchestrator/db"
	"github.com/arke-institute/orchestrator/docindex"
	"github.com/arke-institute/orchestrator/embedding"
	"github.com/arke-institute/orchestrator/jobs"
	"github.com/arke-institute/orchestrator/manifest"
	"github.com/arke-institute/orchestrator/metrics"
	"github.com/arke-institute/orchestrator/phases"
)

// ErrNotFound is returned for an unknown batch.
var ErrNotFound = db.ErrNotFound

// Service carries out batch operations against the database and River.
type Service struct {
	pool   *pgxpool.Pool
	river  *river.Client[pgx.Tx]
	logger *slog.Logger
	// executors run the phases' work: they count it, retry it, stop it.
	executors *jobs.Executors
	// hub shares the reads of batch watches (Watch).
	hub *eventHub
	// metrics counts batches started and ended here; nil counts nothing.
	metrics *metrics.Metrics
	// store reads image variants from cdnBucket for the dashboard; nil
	// serves no thumbnail. cdnPublicURL maps variant URLs to keys.
	store        blob.Store
	cdnBucket    string
	cdnPublicURL string
	cfg          *config.Config
	// embedder embeds search queries as the document steps embed chunks;
	// search is the in-memory copy of the stored chunks' vectors.
	embedder embedding.Embedder
	search   *searchIndex
	// urls presigns workers' URLs (URLs); nil when store cannot presign.
	urls *batchurls.Signer
}

// New returns a Service. river is used only to insert jobs, so it need not
// be started in processes that do not work jobs. m may be nil. store reads
// the dashboard's thumbnails from CDN_BUCKET (nil serves none) and, if it
// is a blob.Presigner, presigns the URLs workers ask for (URLs).
func New(pool *pgxpool.Pool, riverClient *river.Client[pgx.Tx], executors *jobs.Executors, cfg *config.Config, store blob.Store, logger *slog.Logger, m *metrics.Metrics) *Service {
	s := &Service{pool: pool, river: riverClient, logger: logger, executors: executors, metrics: m,
		store: store, cdnBucket: cfg.CDNBucket, cdnPublicURL: cfg.CDNPublicURL, cfg: cfg}
	s.hub = newEventHub(pool, logger, s.readRound)
	if docs, err := docindex.NewProviders(cfg); err != nil {
		logger.Error("document search is unavailable", "error", err)
	} else {
		s.embedder, s.search = docs.Embedder, newSearchIndex(docs.Embedder.Dimensions())
	}
	if p, ok := store.(blob.Presigner); ok {
		var err error
		if s.urls, err = batchurls.New(p, batchurls.BucketsOf(cfg)); err != nil {
			logger.Error("workers' requests for URLs will fail", "error", err)
		}
	}
	return s
}

// Accepted is the answer to a batch submission.
type Accepted struct {
	BatchID string `json:"batch_id"`
	Status  string `json:"status"`
	// Created is false when the batch was already known (a repeat delivery):
	// nothing was changed and Status is its current status.
	Created bool `json:"-"`
}

// Create accepts a batch: in one transaction it inserts the batch row, its
// batch.created event and a unique batch_start job. Submitting the same
// batch_id again changes nothing and reports the batch's current status, so
// upstream redeliveries are harmless.
func (s *Service) Create(ctx context.Context, msg manifest.QueueMessage, raw []byte) (Accepted, error) {
	var out Accepted
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		q := db.New(tx)
		b, err := q.BatchInsert(ctx, db.BatchInsertParams{ID: msg.BatchID, Uploader: msg.Uploader, QueueMessage: raw})
		if errors.Is(err, pgx.ErrNoRows) {
			existing, err := q.BatchGetByID(ctx, msg.BatchID)
			if err != nil {
				return fmt.Errorf("reading existing batch %s: %w", msg.BatchID, err)
			}
			out = Accepted{BatchID: existing.ID, Status: existing.Status}
			return nil
		}
		var pgErr *pgconn.PgError
		if errors.As(err, &pgErr) && pgErr.Code == pgerrcode.UntranslatableCharacter {
			// Valid JSON, but jsonb cannot hold a \u0000 in a string.
			return &manifest.ValidationError{Subject: "batch message", Problems: []string{`strings must not contain the NUL character (\u0000)`}}
		}
		if err != nil {
			return fmt.Errorf("inserting batch %s: %w", msg.BatchID, err)
		}
		if err := q.EventRecord(ctx, db.Event{BatchID: b.ID, Type: db.EventBatchCreated, Data: map[string]any{
			"uploader": msg.Uploader, "total_files": msg.TotalFiles, "total_bytes": msg.TotalBytes,
		}}); err != nil {
			return err
		}
		if _, err := s.river.InsertTx(ctx, tx, jobs.BatchStartArgs{BatchID: b.ID}, nil); err != nil {
			return fmt.Errorf("enqueueing batch_start for %s: %w", b.ID, err)
		}
		out = Accepted{BatchID: b.ID, Status: b.Status, Created: true}
		return nil
	})
	if err != nil {
		return Accepted{}, err
	}
	if out.Created {
		s.metrics.BatchStarted()
		s.logger.Info("batch accepted", "batch_id", out.BatchID, "uploader", msg.Uploader, "total_files", msg.TotalFiles)
	}
	return out, nil
}

// Progress counts the work of one phase (spec 000 §5.1's tasks; the
// phase's executor says what a unit of work is).
type Progress struct {
	TasksTotal     int64 `json:"tasks_total"`
	TasksCompleted int64 `json:"tasks_completed"`
	TasksFailed    int64 `json:"tasks_failed"`
}

// PhaseProgress is one phase's work at a glance, as its executor counts it.
type PhaseProgress = jobs.PhaseProgress

// Status is the status document of GET /status/:batchId: spec 000 §5.1's
// shape plus the error, completion time and each phase's progress.
type Status struct {
	BatchID string `json:"batch_id"`
	// Status is PENDING, a phase name, DONE or ERROR.
	Status string `json:"status"`
	// Progress is for the current phase (the last one once the batch ended).
	Progress    Progress        `json:"progress"`
	StartedAt   time.Time       `json:"started_at"`
	UpdatedAt   time.Time       `json:"updated_at"`
	CompletedAt *time.Time      `json:"completed_at"`
	Error       *string         `json:"error"`
	Phase       *string         `json:"phase"`
	Phases      []PhaseProgress `json:"phases"`
	// Ingest is the delivery of the final manifest to the ingest service.
	Ingest Ingest `json:"ingest"`
	// Pruned is set once retention removed the batch's processing
	// details; Phases and Progress are then as they were when it began.
	Pruned *Pruned `json:"pruned,omitempty"`
}

// HasFailures reports whether the batch has failed work an admin retry
// would rerun: failed work in any phase, or work left open in a batch
// that has finished.
func (s Status) HasFailures() bool {
	for _, p := range s.Phases {
		if p.TasksFailed > 0 || phases.BatchStatus(s.Status).Terminal() && p.Open() > 0 {
			return true
		}
	}
	return false
}

// Ingest reports delivery of a finished batch to the ingest service.
type Ingest struct {
	// Status is none (not finished yet), pending (being delivered, retried
	// with backoff), delivered, or failed (gave up; see LastError).
	Status      string     `json:"status"`
	Attempts    int32      `json:"attempts"`
	LastError   *string    `json:"last_error"`
	DeliveredAt *time.Time `json:"delivered_at"`
}

// Status reports a batch's status; ErrNotFound for an unknown batch.
func (s *Service) Status(ctx context.Context, batchID string) (Status, error) {
	q := db.New(s.pool)
	b, err := q.BatchGetByID(ctx, batchID)
	if err != nil {
		return Status{}, db.NotFound(err, "batch "+batchID)
	}
	progress, err := s.progress(ctx, q, []db.Batch{b})
	if err != nil {
		return Status{}, err
	}
	st := Status{
		BatchID: b.ID, Status: b.Status, StartedAt: b.StartedAt, UpdatedAt: b.UpdatedAt,
		CompletedAt: b.CompletedAt, Error: b.Error, Phase: b.Phase, Phases: progress[b.ID],
		Ingest: Ingest{Status: b.IngestStatus, Attempts: b.IngestAttempts, LastError: b.IngestLastError, DeliveredAt: b.IngestDeliveredAt},
	}
	if b.PrunedCounts != nil {
		st.Pruned = &Pruned{At: b.PrunedAt, Note: s.prunedNote()}
	}
	if st.Phases == nil {
		st.Phases = []PhaseProgress{}
	}
	for _, p := range st.Phases {
		if b.Phase != nil && p.Phase == *b.Phase {
			st.Progress = Progress{TasksTotal: p.TasksTotal, TasksCompleted: p.TasksCompleted, TasksFailed: p.TasksFailed}
		}
	}
	return st, nil
}

// progress is each batch's phases' progress: as their executors count it
// now, or, for a batch whose processing state retention removed, as it
// was then (batches.pruned_counts).
func (s *Service) progress(ctx context.Context, q *db.Queries, batches []db.Batch) (map[string][]PhaseProgress, error) {
	out := map[string][]PhaseProgress{}
	var live []string
	for _, b := range batches {
		if b.PrunedCounts == nil {
			live = append(live, b.ID)
			continue
		}
		var kept struct {
			Phases []PhaseProgress `json:"phases"`
		}
		if err := json.Unmarshal(b.PrunedCounts, &kept); err != nil {
			return nil, fmt.Errorf("reading the kept progress of pruned batch %s: %w", b.ID, err)
		}
		out[b.ID] = jobs.SortProgress(kept.Phases)
	}
	if len(live) == 0 {
		return out, nil
	}
	now, err := s.executors.Progress(ctx, q, live)
	if err != nil {
		return nil, err
	}
	for id, ps := range now {
		out[id] = ps
	}
	return out, nil
}
