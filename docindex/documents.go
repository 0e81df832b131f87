package docindex

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"

	"github.com/arke-institute/orchestrator/blob"
	"github.com/arke-institute/orchestrator/db"
	"github.com/arke-institute/orchestrator/phases"
	"github.com/arke-institute/orchestrator/problem"
)

// Documents are spec 003's document commands and reads, as the API's
// document routes use them: index one (a new version of a key), read one,
// retry one that failed.
type Documents struct {
	pool   *pgxpool.Pool
	river  *river.Client[pgx.Tx]
	store  blob.Store // reads a document's size and ETag; nil: none read
	bucket string     // R2_BUCKET
	prefix string     // DOCUMENTS_PREFIX: where documents may be
	logger *slog.Logger
}

// NewDocuments returns the Documents of bucket's objects under prefix
// (R2_BUCKET, DOCUMENTS_PREFIX).
func NewDocuments(pool *pgxpool.Pool, riverClient *river.Client[pgx.Tx], store blob.Store, bucket, prefix string, logger *slog.Logger) *Documents {
	return &Documents{pool: pool, river: riverClient, store: store, bucket: bucket, prefix: prefix, logger: logger}
}

// Queued is the status spec 003 answers a new version with: asked for,
// its steps not yet started. It is no stored status (db.DocumentStatus).
const Queued db.DocumentStatus = "queued"

// Document is spec 003's status of a document, with our identity fields;
// the JSON names are spec 003's (camelCase).
type Document struct {
	ID           int64             `json:"id"`
	R2Key        string            `json:"r2Key"`
	Version      int32             `json:"version"`
	Status       db.DocumentStatus `json:"status"`
	CurrentStep  string            `json:"currentStep"`
	Progress     DocumentProgress  `json:"progress"`
	Errors       []DocumentError   `json:"errors"`
	Timing       DocumentTiming    `json:"timing"`
	DocumentTags []string          `json:"documentTags"`
	// Message says what a submission did (POST /documents only).
	Message string `json:"message,omitempty"`
}

// DocumentProgress counts the chunks done with the current step
// (ProcessedChunks, spec 003's, starts again from 0 at each step) and the
// document's whole progress (Percentage), which never goes backwards: the
// embeddings, tags and store steps each count for a third, each by its
// chunks done. StepPercentage is the current step's alone.
type DocumentProgress struct {
	TotalChunks     int32 `json:"totalChunks"`
	ProcessedChunks int32 `json:"processedChunks"`
	Percentage      int   `json:"percentage"`
	StepPercentage  int   `json:"stepPercentage"`
}

// chunkSteps are the steps that go through the chunks one by one, in
// order; download makes them.
var chunkSteps = []string{"embeddings", "tags", "store"}

// progressOf is d's progress (see DocumentProgress).
func progressOf(d db.Document) DocumentProgress {
	p := DocumentProgress{TotalChunks: d.TotalChunks, ProcessedChunks: d.ProcessedChunks}
	if d.Status == db.DocumentCompleted {
		p.Percentage, p.StepPercentage = 100, 100
		return p
	}
	if d.TotalChunks <= 0 {
		return p
	}
	done := min(float64(d.ProcessedChunks)/float64(d.TotalChunks), 1)
	p.StepPercentage = int(math.Floor(100 * done))
	if i := slices.Index(chunkSteps, d.CurrentStep); i >= 0 {
		// 100 means completed.
		p.Percentage = min(99, int(math.Floor(100*(float64(i)+done)/float64(len(chunkSteps)))))
	}
	return p
}

// DocumentError is one failure of a step.
type DocumentError struct {
	Step      string `json:"step"`
	Error     string `json:"error"`
	Timestamp string `json:"timestamp"`
}

// DocumentTiming is when processing started and ended.
type DocumentTiming struct {
	StartedAt   *time.Time `json:"startedAt,omitempty"`
	CompletedAt *time.Time `json:"completedAt,omitempty"`
	FailedAt    *time.Time `json:"failedAt,omitempty"`
}

// DocumentOf is the status of the document version d.
func DocumentOf(d db.Document) Document {
	out := Document{ID: d.ID, R2Key: d.R2Key, Version: d.Version, Status: d.Status, CurrentStep: d.CurrentStep,
		Progress:     progressOf(d),
		Timing:       DocumentTiming{StartedAt: d.StartedAt, CompletedAt: d.CompletedAt, FailedAt: d.FailedAt},
		DocumentTags: d.DocumentTags, Errors: []DocumentError{}}
	if out.DocumentTags == nil {
		out.DocumentTags = []string{}
	}
	_ = json.Unmarshal(d.Errors, &out.Errors)
	return out
}

// Create asks for the object at r2Key (in R2_BUCKET, under
// DOCUMENTS_PREFIX) to be indexed. When the key's latest version is under
// way, or done with the object's current content (same ETag), it answers
// that version and created is false; otherwise it makes a new version and
// queues its steps in the same transaction.
func (d *Documents) Create(ctx context.Context, r2Key string) (doc Document, created bool, err error) {
	if err := d.checkKey(r2Key); err != nil {
		return Document{}, false, err
	}
	var info *blob.Info
	if st, ok := d.store.(blob.Statter); ok {
		i, err := st.Stat(ctx, d.bucket, r2Key)
		if errors.Is(err, blob.ErrNotFound) {
			return Document{}, false, &problem.InputError{Msg: fmt.Sprintf("invalid document: r2_key %q does not exist in %s", r2Key, d.bucket)}
		}
		if err != nil {
			return Document{}, false, err
		}
		info = &i
	}
	return d.create(ctx, r2Key, info, false)
}

// checkKey refuses a key that is not a document's: outside
// DOCUMENTS_PREFIX, or not a key phases.CheckKey takes.
func (d *Documents) checkKey(r2Key string) error {
	if !strings.HasPrefix(r2Key, d.prefix) {
		return &problem.InputError{Msg: fmt.Sprintf("invalid document: r2_key %q is not under DOCUMENTS_PREFIX %q", r2Key, d.prefix)}
	}
	if err := phases.CheckKey(r2Key, d.prefix); err != nil {
		return &problem.InputError{Msg: "invalid document: r2_key: " + err.Error()}
	}
	return nil
}

// create makes a new version of r2Key, of the object info describes (nil:
// unknown), unless its latest version is under way or has the same ETag
// and is done, or, with anyStatus, has the same ETag whatever became of it
// (a scan does not try a failed document again: a retry does).
func (d *Documents) create(ctx context.Context, r2Key string, info *blob.Info, anyStatus bool) (doc Document, created bool, err error) {
	var etag *string
	var size *int64
	if info != nil {
		etag, size = &info.ETag, &info.Size
	}
	err = pgx.BeginFunc(ctx, d.pool, func(tx pgx.Tx) error {
		q := db.New(tx)
		if err := q.DocumentLockKey(ctx, r2Key); err != nil {
			return err
		}
		latest, err := q.DocumentLatest(ctx, r2Key)
		sameETag := err == nil && etag != nil && latest.Etag != nil && *latest.Etag == *etag
		switch {
		case err == nil && latest.Status.Open(),
			sameETag && (anyStatus || latest.Status == db.DocumentCompleted):
			doc = DocumentOf(latest)
			return nil
		case err != nil && !errors.Is(err, pgx.ErrNoRows):
			return err
		}
		row, err := q.DocumentInsert(ctx, db.DocumentInsertParams{R2Key: r2Key, Etag: etag, SizeBytes: size})
		if err != nil {
			return err
		}
		if _, err := d.river.InsertTx(ctx, tx, DocumentStepArgs{DocumentID: row.ID}, nil); err != nil {
			return err
		}
		doc, created = DocumentOf(row), true
		return nil
	})
	if err != nil {
		return Document{}, false, err
	}
	if created {
		doc.Status, doc.Message = Queued, "Document queued for processing"
		d.logger.Info("document queued", "document_id", doc.ID, "r2_key", r2Key, "version", doc.Version)
	} else {
		doc.Message = "Document already " + map[bool]string{true: "processed", false: "being processed"}[doc.Status == db.DocumentCompleted]
	}
	return doc, created, nil
}

// Get is a document version's status.
func (d *Documents) Get(ctx context.Context, id int64) (Document, error) {
	row, err := db.New(d.pool).DocumentGet(ctx, id)
	if errors.Is(err, pgx.ErrNoRows) {
		return Document{}, fmt.Errorf("document %d: %w", id, problem.ErrNotFound)
	}
	if err != nil {
		return Document{}, err
	}
	return DocumentOf(row), nil
}

// Latest is the status of the latest version of a key.
func (d *Documents) Latest(ctx context.Context, r2Key string) (Document, error) {
	row, err := db.New(d.pool).DocumentLatest(ctx, r2Key)
	if errors.Is(err, pgx.ErrNoRows) {
		return Document{}, fmt.Errorf("document %q: %w", r2Key, problem.ErrNotFound)
	}
	if err != nil {
		return Document{}, err
	}
	return DocumentOf(row), nil
}

// Retry resumes a failed document from the step that failed.
func (d *Documents) Retry(ctx context.Context, id int64) (Document, error) {
	var out Document
	err := pgx.BeginFunc(ctx, d.pool, func(tx pgx.Tx) error {
		q := db.New(tx)
		row, err := q.DocumentRetry(ctx, id)
		if errors.Is(err, pgx.ErrNoRows) {
			cur, gerr := q.DocumentGet(ctx, id)
			if errors.Is(gerr, pgx.ErrNoRows) {
				return fmt.Errorf("document %d: %w", id, problem.ErrNotFound)
			}
			if gerr != nil {
				return gerr
			}
			return fmt.Errorf("%w: document %d is %s; only a failed document is retried", problem.ErrConflict, id, cur.Status)
		}
		if err != nil {
			return err
		}
		if _, err := d.river.InsertTx(ctx, tx, DocumentStepArgs{DocumentID: id, Resume: row.Resumes}, nil); err != nil {
			return err
		}
		out = DocumentOf(row)
		return nil
	})
	return out, err
}
