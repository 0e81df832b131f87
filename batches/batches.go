// Package batches holds the commands on batches: accept one (intake),
// reset it, retry its failed work. Each runs in one transaction, and the
// ones that change a running batch hold its exclusive fan-in lock.
package batches

import (
	"context"
	"errors"
	"fmt"
	"log/slog"

	"github.com/jackc/pgerrcode"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"go.opentelemetry.io/otel/attribute"

	"github.com/arke-institute/orchestrator/db"
	"github.com/arke-institute/orchestrator/jobs"
	"github.com/arke-institute/orchestrator/manifest"
	"github.com/arke-institute/orchestrator/metrics"
	"github.com/arke-institute/orchestrator/problem"
	"github.com/arke-institute/orchestrator/status"
	"github.com/arke-institute/orchestrator/tracing"
)

// Commands carries out commands on batches against the database and
// River.
type Commands struct {
	pool  *pgxpool.Pool
	river *river.Client[pgx.Tx]
	// executors run the phases' work: they retry it, stop it.
	executors *jobs.Executors
	// status reads the batch a reset or retry answers with.
	status  *status.Reader
	logger  *slog.Logger
	metrics *metrics.Metrics // nil counts nothing
	// Limits are admission control's, which Create holds intake to; the
	// zero Limits admit everything.
	Limits Limits
	// Tracer starts the root of each created batch's trace; nil traces
	// nothing.
	Tracer *tracing.Tracer
}

// New returns the Commands. river is used only to insert jobs, so it need
// not be started in processes that do not work jobs.
func New(pool *pgxpool.Pool, riverClient *river.Client[pgx.Tx], executors *jobs.Executors, reader *status.Reader, logger *slog.Logger, m *metrics.Metrics) *Commands {
	return &Commands{pool: pool, river: riverClient, executors: executors, status: reader, logger: logger, metrics: m}
}

// Receipt is the answer to a batch submission.
type Receipt struct {
	BatchID string `json:"batch_id"`
	Status  string `json:"status"`
	// Created is false when the batch was already known (a repeat delivery):
	// nothing was changed and Status is its current status.
	Created bool `json:"-"`
}

// Create accepts a batch: in one transaction it inserts the batch row, its
// batch.created event and a unique batch_start job. Submitting the same
// batch_id again changes nothing and reports the batch's current status, so
// upstream redeliveries are harmless. A new batch that would take what is
// in flight past Limits is refused (*problem.LimitError), and nothing of it
// is kept: the client submits it again later.
func (c *Commands) Create(ctx context.Context, msg manifest.QueueMessage, raw []byte) (Receipt, error) {
	var out Receipt
	// The batch_start job inserted below carries this root's context.
	ctx, intake := c.Tracer.StartIntake(ctx, msg.BatchID)
	err := pgx.BeginFunc(ctx, c.pool, func(tx pgx.Tx) error {
		q := db.New(tx)
		known := func() error {
			existing, err := q.BatchGetByID(ctx, msg.BatchID)
			if err != nil {
				return fmt.Errorf("reading existing batch %s: %w", msg.BatchID, err)
			}
			out = Receipt{BatchID: existing.ID, Status: existing.Status}
			return nil
		}
		if c.Limits.Bounded() {
			// A redelivery is answered whatever is in flight.
			if _, err := q.BatchGetByID(ctx, msg.BatchID); err == nil {
				return known()
			} else if !errors.Is(err, pgx.ErrNoRows) {
				return fmt.Errorf("reading batch %s: %w", msg.BatchID, err)
			}
			if err := c.Limits.admit(ctx, q, msg); err != nil {
				return err
			}
		}
		b, err := q.BatchInsert(ctx, db.BatchInsertParams{ID: msg.BatchID, Uploader: msg.Uploader, QueueMessage: raw, Priority: int16(msg.Priority)})
		if errors.Is(err, pgx.ErrNoRows) {
			return known()
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
		if _, err := c.river.InsertTx(ctx, tx, jobs.BatchStartArgs{BatchID: b.ID}, nil); err != nil {
			return fmt.Errorf("enqueueing batch_start for %s: %w", b.ID, err)
		}
		out = Receipt{BatchID: b.ID, Status: b.Status, Created: true}
		return nil
	})
	var limited *problem.LimitError
	if errors.As(err, &limited) {
		c.metrics.IntakeRefused(limited.Limit)
		c.logger.Warn("batch refused: intake is at a limit", "batch_id", msg.BatchID, "uploader", msg.Uploader, "limit", limited.Limit,
			"total_files", msg.TotalFiles)
	}
	if err != nil {
		return Receipt{}, err
	}
	if out.Created {
		intake.SetAttributes(attribute.String("uploader", msg.Uploader), attribute.Int64("total_files", msg.TotalFiles))
		intake.End()
		c.metrics.BatchStarted()
		c.logger.InfoContext(ctx, "batch accepted", "batch_id", out.BatchID, "uploader", msg.Uploader, "total_files", msg.TotalFiles)
	}
	return out, nil
}
