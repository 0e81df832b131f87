package service

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/arke-institute/orchestrator/blob"
	"github.com/arke-institute/orchestrator/db"
	"github.com/arke-institute/orchestrator/docindex"
	"github.com/arke-institute/orchestrator/embedding"
	"github.com/arke-institute/orchestrator/phases"
)

// Document is spec 003's status of a document, with our identity fields;
// the JSON names are spec 003's (camelCase).
type Document struct {
	ID           int64            `json:"id"`
	R2Key        string           `json:"r2Key"`
	Version      int32            `json:"version"`
	Status       string           `json:"status"`
	CurrentStep  string           `json:"currentStep"`
	Progress     DocumentProgress `json:"progress"`
	Errors       []DocumentError  `json:"errors"`
	Timing       DocumentTiming   `json:"timing"`
	DocumentTags []string         `json:"documentTags"`
	// Message says what a submission did (POST /documents only).
	Message string `json:"message,omitempty"`
}

// DocumentProgress counts the chunks done with the current step.
type DocumentProgress struct {
	TotalChunks     int32 `json:"totalChunks"`
	ProcessedChunks int32 `json:"processedChunks"`
	Percentage      int   `json:"percentage"`
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

func documentOf(d db.Document) Document {
	out := Document{ID: d.ID, R2Key: d.R2Key, Version: d.Version, Status: d.Status, CurrentStep: d.CurrentStep,
		Progress:     DocumentProgress{TotalChunks: d.TotalChunks, ProcessedChunks: d.ProcessedChunks},
		Timing:       DocumentTiming{StartedAt: d.StartedAt, CompletedAt: d.CompletedAt, FailedAt: d.FailedAt},
		DocumentTags: d.DocumentTags, Errors: []DocumentError{}}
	if out.DocumentTags == nil {
		out.DocumentTags = []string{}
	}
	if d.TotalChunks > 0 {
		out.Progress.Percentage = int(math.Round(100 * float64(d.ProcessedChunks) / float64(d.TotalChunks)))
	} else if d.Status == "completed" {
		out.Progress.Percentage = 100
	}
	_ = json.Unmarshal(d.Errors, &out.Errors)
	return out
}

// CreateDocument asks for the object at r2Key (in R2_BUCKET, under
// DOCUMENTS_PREFIX) to be indexed. When the key's latest version is under
// way, or done with the object's current content (same ETag), it answers
// that version and created is false; otherwise it makes a new version and
// queues its steps in the same transaction.
func (s *Service) CreateDocument(ctx context.Context, r2Key string) (doc Document, created bool, err error) {
	prefix := s.cfg.Documents.Prefix
	if !strings.HasPrefix(r2Key, prefix) {
		return Document{}, false, &InputError{Msg: fmt.Sprintf("invalid document: r2_key %q is not under DOCUMENTS_PREFIX %q", r2Key, prefix)}
	}
	if err := phases.CheckKey(r2Key, prefix); err != nil {
		return Document{}, false, &InputError{Msg: "invalid document: r2_key: " + err.Error()}
	}
	var etag *string
	var size *int64
	if st, ok := s.store.(blob.Statter); ok {
		info, err := st.Stat(ctx, s.cfg.R2Bucket, r2Key)
		if errors.Is(err, blob.ErrNotFound) {
			return Document{}, false, &InputError{Msg: fmt.Sprintf("invalid document: r2_key %q does not exist in %s", r2Key, s.cfg.R2Bucket)}
		}
		if err != nil {
			return Document{}, false, err
		}
		etag, size = &info.ETag, &info.Size
	}
	err = pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		q := db.New(tx)
		if err := q.DocumentLockKey(ctx, r2Key); err != nil {
			return err
		}
		latest, err := q.DocumentLatest(ctx, r2Key)
		switch {
		case err == nil && (latest.Status == "not_started" || latest.Status == "processing"):
			doc = documentOf(latest)
			return nil
		case err == nil && latest.Status == "completed" && etag != nil && latest.Etag != nil && *latest.Etag == *etag:
			doc = documentOf(latest)
			return nil
		case err != nil && !errors.Is(err, pgx.ErrNoRows):
			return err
		}
		row, err := q.DocumentInsert(ctx, db.DocumentInsertParams{R2Key: r2Key, Etag: etag, SizeBytes: size})
		if err != nil {
			return err
		}
		if _, err := s.river.InsertTx(ctx, tx, docindex.DocumentStepArgs{DocumentID: row.ID}, nil); err != nil {
			return err
		}
		doc, created = documentOf(row), true
		return nil
	})
	if err != nil {
		return Document{}, false, err
	}
	if created {
		doc.Status, doc.Message = "queued", "Document queued for processing"
		s.logger.Info("document queued", "document_id", doc.ID, "r2_key", r2Key, "version", doc.Version)
	} else {
		doc.Message = "Document already " + map[bool]string{true: "processed", false: "being processed"}[doc.Status == "completed"]
	}
	return doc, created, nil
}

// GetDocument is a document version's status.
func (s *Service) GetDocument(ctx context.Context, id int64) (Document, error) {
	d, err := db.New(s.pool).DocumentGet(ctx, id)
	if errors.Is(err, pgx.ErrNoRows) {
		return Document{}, fmt.Errorf("document %d: %w", id, ErrNotFound)
	}
	if err != nil {
		return Document{}, err
	}
	return documentOf(d), nil
}

// LatestDocument is the status of the latest version of a key.
func (s *Service) LatestDocument(ctx context.Context, r2Key string) (Document, error) {
	d, err := db.New(s.pool).DocumentLatest(ctx, r2Key)
	if errors.Is(err, pgx.ErrNoRows) {
		return Document{}, fmt.Errorf("document %q: %w", r2Key, ErrNotFound)
	}
	if err != nil {
		return Document{}, err
	}
	return documentOf(d), nil
}

// RetryDocument resumes a failed document from the step that failed.
func (s *Service) RetryDocument(ctx context.Context, id int64) (Document, error) {
	var out Document
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		q := db.New(tx)
		d, err := q.DocumentRetry(ctx, id)
		if errors.Is(err, pgx.ErrNoRows) {
			cur, gerr := q.DocumentGet(ctx, id)
			if errors.Is(gerr, pgx.ErrNoRows) {
				return fmt.Errorf("document %d: %w", id, ErrNotFound)
			}
			if gerr != nil {
				return gerr
			}
			return fmt.Errorf("%w: document %d is %s; only a failed document is retried", ErrConflict, id, cur.Status)
		}
		if err != nil {
			return err
		}
		if _, err := s.river.InsertTx(ctx, tx, docindex.DocumentStepArgs{DocumentID: id, Resume: d.Resumes}, nil); err != nil {
			return err
		}
		out = documentOf(d)
		return nil
	})
	return out, err
}

// SearchResult is a chunk search found.
type SearchResult struct {
	DocumentID int64    `json:"documentId"`
	R2Key      string   `json:"r2Key"`
	ChunkIndex int32    `json:"chunkIndex"`
	Score      float32  `json:"score"`
	Text       string   `json:"text"`
	Tags       []string `json:"tags"`
	// FirstPage and LastPage are the pages of a PDF the chunk is from;
	// absent for a document without pages.
	FirstPage int32 `json:"firstPage,omitempty"`
	LastPage  int32 `json:"lastPage,omitempty"`
}

// MaxSearchResults bounds k.
const MaxSearchResults = 100

// SearchDocuments embeds the query with the documents' embedder and ranks
// the chunks of every current document version by cosine similarity, an
// exact scan over an in-memory copy of their vectors kept in step with
// the table.
func (s *Service) SearchDocuments(ctx context.Context, query string, k int) ([]SearchResult, error) {
	query = strings.TrimSpace(query)
	switch {
	case query == "":
		return nil, &InputError{Msg: "invalid search: q is required"}
	case k < 1 || k > MaxSearchResults:
		return nil, &InputError{Msg: fmt.Sprintf("invalid search: k must be from 1 to %d, got %d", MaxSearchResults, k)}
	case s.embedder == nil:
		return nil, errors.New("search has no embedder")
	}
	vecs, err := s.embedder.Embed(ctx, []string{query})
	if err != nil {
		return nil, fmt.Errorf("embedding the query: %w", err)
	}
	if err := s.search.refresh(ctx, db.New(s.pool)); err != nil {
		return nil, err
	}
	matches, err := s.search.index.Search(vecs[0], k)
	if err != nil {
		return nil, err
	}
	if len(matches) == 0 {
		return []SearchResult{}, nil
	}
	docIDs, idxs := make([]int64, len(matches)), make([]int32, len(matches))
	for i, m := range matches {
		docIDs[i], idxs[i] = chunkKey(m.Index)
	}
	rows, err := db.New(s.pool).DocumentChunksByKeys(ctx, db.DocumentChunksByKeysParams{DocumentIds: docIDs, ChunkIndexes: idxs})
	if err != nil {
		return nil, err
	}
	type key struct {
		doc int64
		idx int32
	}
	byKey := make(map[key]db.DocumentChunksByKeysRow, len(rows))
	for _, r := range rows {
		byKey[key{r.DocumentID, r.ChunkIndex}] = r
	}
	out := make([]SearchResult, 0, len(matches))
	for i, m := range matches {
		r, ok := byKey[key{docIDs[i], idxs[i]}]
		if !ok {
			continue // replaced since the index was read
		}
		tags := r.Tags
		if tags == nil {
			tags = []string{}
		}
		out = append(out, SearchResult{DocumentID: r.DocumentID, R2Key: r.R2Key, ChunkIndex: r.ChunkIndex, Score: m.Score, Text: r.Text, Tags: tags,
			FirstPage: r.FirstPage, LastPage: r.LastPage})
	}
	return out, nil
}

// chunkBits is how many bits of an index id hold the chunk's index.
const chunkBits = 24

func chunkID(doc int64, idx int32) int64 { return doc<<chunkBits | int64(idx) }

func chunkKey(id int64) (int64, int32) { return id >> chunkBits, int32(id & (1<<chunkBits - 1)) }

// searchIndex is the in-memory copy of the current documents' vectors.
// Each search first brings it in step: the current versions are listed
// (one indexed query), versions that stopped being current are dropped and
// new ones loaded.
type searchIndex struct {
	mu     sync.Mutex
	index  *embedding.Index
	chunks map[int64][]int32 // document id -> its chunk indexes in index
}

func newSearchIndex(dims int) *searchIndex {
	return &searchIndex{index: embedding.NewIndex(dims), chunks: map[int64][]int32{}}
}

func (x *searchIndex) refresh(ctx context.Context, q *db.Queries) error {
	ids, err := q.DocumentCurrentIDs(ctx)
	if err != nil {
		return err
	}
	x.mu.Lock()
	defer x.mu.Unlock()
	current := make(map[int64]bool, len(ids))
	var added []int64
	for _, id := range ids {
		current[id] = true
		if _, ok := x.chunks[id]; !ok {
			added = append(added, id)
		}
	}
	for doc, idxs := range x.chunks {
		if current[doc] {
			continue
		}
		del := make([]int64, len(idxs))
		for i, idx := range idxs {
			del[i] = chunkID(doc, idx)
		}
		x.index.Delete(del...)
		delete(x.chunks, doc)
	}
	if len(added) == 0 {
		return nil
	}
	rows, err := q.DocumentSearchRows(ctx, added)
	if err != nil {
		return err
	}
	for _, id := range added {
		x.chunks[id] = []int32{}
	}
	for _, r := range rows {
		if err := x.index.Set(chunkID(r.ID, r.ChunkIndex), r.Embedding); err != nil {
			return fmt.Errorf("document %d chunk %d: %w", r.ID, r.ChunkIndex, err)
		}
		x.chunks[r.ID] = append(x.chunks[r.ID], r.ChunkIndex)
	}
	return nil
}
