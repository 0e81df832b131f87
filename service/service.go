// Package service holds the orchestrator's operations on batches as the API
// and the CLI see them: accept a batch, report its status. Handlers stay thin
// by calling exactly one of these.
package service

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/jackc/pgerrcode"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"

	"github.com/arke-institute/orchestrator/blob"
	"github.com/arke-institute/orchestrator/config"
	"github.com/arke-institute/orchestrator/db"
	"github.com/arke-institute/orchestrator/embedding"
	"github.com/arke-institute/orchestrator/internal/batchurls"
	"github.com/arke-institute/orchestrator/internal/callbackcommit"
	"github.com/arke-institute/orchestrator/jobs"
	"github.com/arke-institute/orchestrator/manifest"
	"github.com/arke-institute/orchestrator/metrics"
	"github.com/arke-institute/orchestrator/phases"
)

// ErrNotFound is returned for an unknown batch.
var ErrNotFound = db.ErrNotFound

// ErrBusy refuses a callback while too many wait to be committed
// (CALLBACK_QUEUE_MAX): the worker should try again shortly.
var ErrBusy = callbackcommit.ErrBusy

// Service carries out batch operations against the database and River.
type Service struct {
	pool   *pgxpool.Pool
	river  *river.Client[pgx.Tx]
	logger *slog.Logger
	apps   map[phases.Name]string // phase -> Fly app, to destroy machines
	// callbacks commits workers' callbacks in groups.
	callbacks *callbackcommit.Committer
	// hub shares the reads of batch watches (Watch).
	hub *eventHub
	// metrics counts batches started and ended here; nil counts nothing.
	metrics *metrics.Metrics
	// store reads image variants from cdnBucket for the dashboard; nil
	// serves no thumbnail. cdnPublicURL maps variant URLs to keys.
	store        blob.Store
	cdnBucket    string
	cdnPublicURL string
	// chunkAttempts is a chunk job's attempts (MAX_GLOBAL_RETRIES + 1),
	// for the jobs a retry enqueues.
	chunkAttempts int
	// cfg names the OCR limiter's bucket and shape, for chunk status.
	cfg *config.Config
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
func New(pool *pgxpool.Pool, riverClient *river.Client[pgx.Tx], cfg *config.Config, store blob.Store, logger *slog.Logger, m *metrics.Metrics) *Service {
	apps := make(map[phases.Name]string, len(cfg.Phases))
	for name, p := range cfg.Phases {
		apps[name] = p.FlyAppName
	}
	s := &Service{pool: pool, river: riverClient, logger: logger, apps: apps, metrics: m,
		callbacks: callbackcommit.New(callbackcommit.Config{Pool: pool, River: riverClient, Committers: cfg.CallbackCommitters, MaxQueued: cfg.CallbackQueueMax,
			MaxOutputs: cfg.MaxOutputsPerTask, TaskMaxAttempts: cfg.TaskMaxAttempts, TaskRetireLimit: cfg.TaskRetireLimit, Logger: logger, Metrics: m}),
		store: store, cdnBucket: cfg.CDNBucket, cdnPublicURL: cfg.CDNPublicURL, chunkAttempts: cfg.OCR.MaxGlobalRetries + 1, cfg: cfg}
	s.hub = newEventHub(pool, logger, s.readRound)
	if docs, err := jobs.NewDocuments(cfg); err != nil {
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

// Progress counts the tasks of one phase (spec 000 §5.1).
type Progress struct {
	TasksTotal     int64 `json:"tasks_total"`
	TasksCompleted int64 `json:"tasks_completed"`
	TasksFailed    int64 `json:"tasks_failed"`
}

// PhaseProgress is Progress for a named phase, with the open tasks split out.
type PhaseProgress struct {
	Phase           string `json:"phase"`
	TasksTotal      int64  `json:"tasks_total"`
	TasksPending    int64  `json:"tasks_pending"`
	TasksProcessing int64  `json:"tasks_processing"`
	TasksCompleted  int64  `json:"tasks_completed"`
	TasksFailed     int64  `json:"tasks_failed"`
}

// Status is the status document of GET /status/:batchId: spec 000 §5.1's
// shape plus the error, completion time and per-phase counts.
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
	// OCR is the batch's OCR phase, while it has one (chunks written).
	OCR *OCRProgress `json:"ocr,omitempty"`
	// Documents is the batch's DOCUMENT_INDEXING phase, while it has one
	// (documents written).
	Documents *DocumentsProgress `json:"documents,omitempty"`
	// Pruned is set once retention removed the batch's processing
	// details; Phases, Progress and OCR are then as they were when it
	// began.
	Pruned *Pruned `json:"pruned,omitempty"`
}

// HasFailures reports whether the batch has failed work an admin retry
// would rerun: failed tasks in any phase, OCR refs not done nor skipped,
// failed documents.
func (s Status) HasFailures() bool {
	for _, p := range s.Phases {
		if p.TasksFailed > 0 {
			return true
		}
	}
	if s.OCR != nil && s.OCR.RefsDone+s.OCR.RefsSkipped < s.OCR.RefsTotal {
		return true
	}
	return s.Documents != nil && s.Documents.Failed > 0
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
	counts, keptOCR, pruned, err := s.prunedProgress(b)
	if err != nil {
		return Status{}, err
	}
	if pruned == nil {
		if counts, err = q.TaskCountByBatch(ctx, batchID); err != nil {
			return Status{}, fmt.Errorf("counting tasks of batch %s: %w", batchID, err)
		}
	}
	st := Status{
		BatchID: b.ID, Status: b.Status, StartedAt: b.StartedAt, UpdatedAt: b.UpdatedAt,
		CompletedAt: b.CompletedAt, Error: b.Error, Phase: b.Phase, Phases: phaseProgress(counts),
		Ingest: Ingest{Status: b.IngestStatus, Attempts: b.IngestAttempts, LastError: b.IngestLastError, DeliveredAt: b.IngestDeliveredAt},
		Pruned: pruned,
	}
	for _, p := range st.Phases {
		if b.Phase != nil && p.Phase == *b.Phase {
			st.Progress = Progress{TasksTotal: p.TasksTotal, TasksCompleted: p.TasksCompleted, TasksFailed: p.TasksFailed}
		}
	}
	st.OCR = keptOCR
	if pruned == nil {
		if st.OCR, err = ocrProgress(ctx, q, batchID); err != nil {
			return Status{}, err
		}
	}
	if st.OCR != nil && b.Phase != nil && *b.Phase == string(phases.OCR) {
		// The phase's progress is its refs (it has no tasks); a skipped ref
		// needed nothing and is complete.
		st.Progress = Progress{TasksTotal: int64(st.OCR.RefsTotal), TasksCompleted: int64(st.OCR.RefsDone + st.OCR.RefsSkipped), TasksFailed: int64(st.OCR.RefsFailed)}
	}
	if st.Documents, err = documentsProgress(ctx, q, batchID); err != nil {
		return Status{}, err
	}
	if st.Documents != nil && b.Phase != nil && *b.Phase == string(phases.DocumentIndexing) {
		// The phase's progress is its documents (it has no tasks).
		d := st.Documents
		st.Progress = Progress{TasksTotal: int64(d.Total), TasksCompleted: int64(d.Completed), TasksFailed: int64(d.Failed)}
	}
	return st, nil
}

// phaseProgress folds (phase, status, count) rows into one entry per phase,
// in pipeline order; phases without tasks are left out.
func phaseProgress(rows []db.TaskCountByBatchRow) []PhaseProgress {
	byPhase := make(map[string]*PhaseProgress)
	for _, r := range rows {
		p := byPhase[r.Phase]
		if p == nil {
			p = &PhaseProgress{Phase: r.Phase}
			byPhase[r.Phase] = p
		}
		p.TasksTotal += r.Count
		switch phases.TaskStatus(r.Status) {
		case phases.TaskPending:
			p.TasksPending += r.Count
		case phases.TaskProcessing:
			p.TasksProcessing += r.Count
		case phases.TaskCompleted:
			p.TasksCompleted += r.Count
		case phases.TaskFailed:
			p.TasksFailed += r.Count
		}
	}
	out := []PhaseProgress{}
	for _, ph := range phases.All() {
		if p := byPhase[string(ph.Spec().Name)]; p != nil {
			out = append(out, *p)
			delete(byPhase, string(ph.Spec().Name))
		}
	}
	for _, p := range byPhase { // a phase no longer registered: still shown
		out = append(out, *p)
	}
	return out
}
