// Package status holds the read models of batches as the API, the
// dashboard and the command line show them: a batch's status document
// (spec 000's, with each phase's progress as its executor counts it), the
// batch listing, and the event log.
package status

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/arke-institute/orchestrator/cost"
	"github.com/arke-institute/orchestrator/db"
	"github.com/arke-institute/orchestrator/jobs"
	"github.com/arke-institute/orchestrator/pause"
	"github.com/arke-institute/orchestrator/phases"
)

// Reader reads batches.
type Reader struct {
	pool *pgxpool.Pool
	// executors count each phase's work.
	executors *jobs.Executors
	// retentionDays is RETENTION_DAYS, which a pruned batch's note names.
	retentionDays int
	// Prices price the status document's cost (PRICE_*); the zero Prices
	// price machines at Fly's prices and leave tokens unpriced.
	Prices cost.Prices
}

// New returns a Reader; retentionDays is RETENTION_DAYS.
func New(pool *pgxpool.Pool, executors *jobs.Executors, retentionDays int) *Reader {
	return &Reader{pool: pool, executors: executors, retentionDays: retentionDays}
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
	// Priority is the batch's priority: -10 (lowest) to 10 (highest), 0
	// when the queue message gave none (see docs/architecture.md,
	// Priorities).
	Priority int `json:"priority"`
	// Progress is for the current phase (the last one once the batch ended).
	Progress    Progress        `json:"progress"`
	StartedAt   time.Time       `json:"started_at"`
	UpdatedAt   time.Time       `json:"updated_at"`
	CompletedAt *time.Time      `json:"completed_at"`
	Error       *string         `json:"error"`
	Phase       *string         `json:"phase"`
	Phases      []PhaseProgress `json:"phases"`
	// Failures counts the batch's failed work over its phases, told apart
	// by cause.
	Failures Failures `json:"failures"`
	// Ingest is the delivery of the final manifest to the ingest service.
	Ingest Ingest `json:"ingest"`
	// Pruned is set once retention removed the batch's processing
	// details; Phases and Progress are then as they were when it began.
	Pruned *Pruning `json:"pruned,omitempty"`
	// Paused is the pause that holds the batch's work in its phase (POST
	// /admin/pause), if one does.
	Paused *pause.Pause `json:"paused,omitempty"`
	// Cost is what the batch consumed so far, per phase, and its estimated
	// price.
	Cost cost.Cost `json:"cost"`
}

// Failures are a batch's failed work by cause: Permanent failed because
// its file is bad (the worker or provider refused it), Infrastructure
// because its attempts or retries were spent by timeouts, dead machines,
// outages or a spent quota (POST /admin/retry/:batchId?mode=infrastructure
// reruns only these).
type Failures = jobs.Failures

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
func (r *Reader) Status(ctx context.Context, batchID string) (Status, error) {
	q := db.New(r.pool)
	b, err := q.BatchGetByID(ctx, batchID)
	if err != nil {
		return Status{}, db.NotFound(err, "batch "+batchID)
	}
	progress, err := r.progress(ctx, q, []db.Batch{b})
	if err != nil {
		return Status{}, err
	}
	st := Status{
		BatchID: b.ID, Status: b.Status, Priority: int(b.Priority), StartedAt: b.StartedAt, UpdatedAt: b.UpdatedAt,
		CompletedAt: b.CompletedAt, Error: b.Error, Phase: b.Phase, Phases: progress[b.ID],
		Ingest: Ingest{Status: b.IngestStatus, Attempts: b.IngestAttempts, LastError: b.IngestLastError, DeliveredAt: b.IngestDeliveredAt},
	}
	if b.PrunedCounts != nil {
		st.Pruned = &Pruning{At: b.PrunedAt, Note: r.PrunedNote()}
	}
	if st.Phases == nil {
		st.Phases = []PhaseProgress{}
	}
	st.Failures = jobs.FailuresOf(st.Phases)
	if b.Phase != nil && !phases.BatchStatus(b.Status).Terminal() {
		pauses, err := pause.List(ctx, q)
		if err != nil {
			return Status{}, err
		}
		st.Paused = pause.Covering(pauses, b.ID, *b.Phase)
	}
	if st.Cost, err = r.Cost(ctx, q, b.ID); err != nil {
		return Status{}, err
	}
	for _, p := range st.Phases {
		if b.Phase != nil && p.Phase == *b.Phase {
			st.Progress = Progress{TasksTotal: p.TasksTotal, TasksCompleted: p.TasksCompleted, TasksFailed: p.TasksFailed}
		}
	}
	return st, nil
}

// Cost is what a batch consumed (the usage table), priced at r.Prices, its
// phases in the pipeline's order.
func (r *Reader) Cost(ctx context.Context, q *db.Queries, batchID string) (cost.Cost, error) {
	rows, err := q.UsageListByBatch(ctx, batchID)
	if err != nil {
		return cost.Cost{}, fmt.Errorf("reading the usage of batch %s: %w", batchID, err)
	}
	usage := make([]cost.Usage, len(rows))
	for i, u := range rows {
		usage[i] = cost.Usage{Phase: u.Phase, Kind: u.Kind, Role: u.Role, Resource: u.Resource, Attempts: u.Attempts, Seconds: u.Seconds,
			Requests: u.Requests, PromptTokens: u.PromptTokens, CompletionTokens: u.CompletionTokens}
	}
	var order []string
	for _, p := range phases.All() {
		order = append(order, string(p.Spec().Name))
	}
	return cost.Of(usage, r.Prices, order), nil
}

// progress is each batch's phases' progress: as their executors count it
// now, or, for a batch whose processing state retention removed, as it
// was then (batches.pruned_counts).
func (r *Reader) progress(ctx context.Context, q *db.Queries, batches []db.Batch) (map[string][]PhaseProgress, error) {
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
	now, err := r.executors.Progress(ctx, q, live)
	if err != nil {
		return nil, err
	}
	for id, ps := range now {
		out[id] = ps
	}
	return out, nil
}

// Pruning says that retention (RETENTION_DAYS) removed a batch's processing
// details: its tasks, chunks, events and intermediate file generations.
// Its status, final files, final manifest and documents remain.
type Pruning struct {
	// At is when the removal ended; null while it is going on.
	At *time.Time `json:"at"`
	// Note says what is gone, for people.
	Note string `json:"note"`
}

// PrunedNote says what retention removed, and when.
func (r *Reader) PrunedNote() string {
	const what = "processing details (tasks, chunks, events, intermediate files) removed"
	if days := r.retentionDays; days > 0 {
		return fmt.Sprintf("%s %d days after the batch finished (RETENTION_DAYS)", what, days)
	}
	return what + " by retention"
}
