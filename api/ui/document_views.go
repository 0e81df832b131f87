package ui

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/arke-institute/orchestrator/db"
	"github.com/arke-institute/orchestrator/docindex"
	"github.com/arke-institute/orchestrator/problem"
)

// Limits of the dashboard's document pages.
const (
	dashboardDocumentsPerPage  = 50
	dashboardMaxDocumentChunks = 200
	// dashboardExcerptChars is how much of a chunk's text the document
	// page shows.
	dashboardExcerptChars = 240
)

// DocumentStatuses lists spec 003's document statuses, in processing
// order.
func DocumentStatuses() []string {
	var out []string
	for _, s := range db.DocumentStatuses() {
		out = append(out, string(s))
	}
	return out
}

// DocumentFilter selects documents for documentList. Zero fields do
// not filter.
type DocumentFilter struct {
	// Status is one of DocumentStatuses.
	Status string
	// BatchID is the batch whose documents to list.
	BatchID string
	// Cursor is the NextCursor of the previous page.
	Cursor string
}

// Document is a document version as the dashboard shows it: its
// spec 003 status and what the API does not say.
type Document struct {
	docindex.Document
	// Current marks the version search reads.
	Current    bool
	BatchID    *string
	SizeBytes  *int64
	RetryCount int32
	CreatedAt  time.Time
	UpdatedAt  time.Time
}

// DocumentPage is a page of the dashboard's document listing.
type DocumentPage struct {
	Documents []Document
	// NextCursor fetches the next page; nil when this page is not full.
	NextCursor *string
}

// documentList pages through document versions newest first. A bad
// status or cursor is an InputError.
func (d *Dashboard) documentList(ctx context.Context, f DocumentFilter) (DocumentPage, error) {
	p := db.DocumentListPageParams{Max: dashboardDocumentsPerPage}
	var problems []string
	if f.Status != "" {
		if !knownDocumentStatus(f.Status) {
			problems = append(problems, fmt.Sprintf("status must be one of %s, got %q", strings.Join(DocumentStatuses(), ", "), f.Status))
		}
		p.Status = &f.Status
	}
	if f.BatchID != "" {
		p.BatchID = &f.BatchID
	}
	if f.Cursor != "" {
		// The cursor is the last id of a page: ids only grow, so it stays
		// valid while documents are added.
		id, err := strconv.ParseInt(f.Cursor, 10, 64)
		if err != nil || id < 1 {
			problems = append(problems, "cursor is not one this server issued")
		}
		p.BeforeID = &id
	}
	if len(problems) > 0 {
		return DocumentPage{}, &problem.InputError{Msg: "invalid document listing: " + strings.Join(problems, "; ")}
	}
	rows, err := db.New(d.pool).DocumentListPage(ctx, p)
	if err != nil {
		return DocumentPage{}, fmt.Errorf("listing documents: %w", err)
	}
	page := DocumentPage{Documents: make([]Document, len(rows))}
	for i, r := range rows {
		page.Documents[i] = documentOf(r)
	}
	if len(rows) == int(p.Max) {
		c := strconv.FormatInt(rows[len(rows)-1].ID, 10)
		page.NextCursor = &c
	}
	return page, nil
}

func knownDocumentStatus(s string) bool { return slices.Contains(DocumentStatuses(), s) }

func documentOf(d db.Document) Document {
	return Document{Document: docindex.DocumentOf(d), Current: d.Current, BatchID: d.BatchID, SizeBytes: d.SizeBytes,
		RetryCount: d.RetryCount, CreatedAt: d.CreatedAt, UpdatedAt: d.UpdatedAt}
}

// DocumentChunkSummary is a chunk on the document page: the start of its
// text, not all of it.
type DocumentChunkSummary struct {
	Index   int32
	Heading string
	Tokens  int32
	Status  db.DocumentChunkStatus
	Tags    []string
	Excerpt string
	// Cut is true when Excerpt is not the whole text.
	Cut bool
}

// DocumentDetail is everything the dashboard's document page shows.
type DocumentDetail struct {
	Document
	// Chunks are the first dashboardMaxDocumentChunks chunks, ChunksTotal how many
	// the version has.
	Chunks      []DocumentChunkSummary
	ChunksTotal int64
}

// documentDetail reads a document version for the dashboard;
// ErrNotFound for an unknown id.
func (d *Dashboard) documentDetail(ctx context.Context, id int64) (DocumentDetail, error) {
	q := db.New(d.pool)
	row, err := q.DocumentGet(ctx, id)
	if errors.Is(err, pgx.ErrNoRows) {
		return DocumentDetail{}, fmt.Errorf("document %d: %w", id, problem.ErrNotFound)
	}
	if err != nil {
		return DocumentDetail{}, err
	}
	out := DocumentDetail{Document: documentOf(row)}
	// One character more than shown says whether the text goes on.
	rows, err := q.DocumentChunkList(ctx, db.DocumentChunkListParams{DocumentID: id, ExcerptChars: dashboardExcerptChars + 1, Max: dashboardMaxDocumentChunks})
	if err != nil {
		return DocumentDetail{}, fmt.Errorf("reading the chunks of document %d: %w", id, err)
	}
	for _, r := range rows {
		c := DocumentChunkSummary{Index: r.ChunkIndex, Heading: r.Heading, Tokens: r.Tokens, Status: r.Status, Tags: r.Tags, Excerpt: r.Excerpt}
		if runes := []rune(r.Excerpt); len(runes) > dashboardExcerptChars {
			c.Excerpt, c.Cut = string(runes[:dashboardExcerptChars]), true
		}
		out.Chunks = append(out.Chunks, c)
		out.ChunksTotal = r.Total
	}
	return out, nil
}
