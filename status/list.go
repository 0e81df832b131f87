package status

import (
	"context"
	"encoding/base64"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/arke-institute/orchestrator/db"
	"github.com/arke-institute/orchestrator/phases"
	"github.com/arke-institute/orchestrator/problem"
)

// Limits of one page of batches.
const (
	DefaultBatchLimit = 50
	MaxBatchLimit     = 500
)

// BatchFilter selects batches for List. Zero fields do not filter.
type BatchFilter struct {
	// Status is PENDING, a phase name, DONE or ERROR.
	Status string
	// Uploader matches the intake message's uploader exactly.
	Uploader string
	// Since and Until bound when the batch was accepted: Since <= t < Until.
	Since, Until *time.Time
	// Cursor is the NextCursor of the previous page.
	Cursor string
	// Limit is the page size (DefaultBatchLimit when 0).
	Limit int
}

// BatchSummary is one batch in a listing.
type BatchSummary struct {
	BatchID      string     `json:"batch_id"`
	Status       string     `json:"status"`
	Phase        *string    `json:"phase"`
	Uploader     string     `json:"uploader"`
	TotalFiles   int64      `json:"total_files"`
	TotalBytes   int64      `json:"total_bytes"`
	Error        *string    `json:"error"`
	StartedAt    time.Time  `json:"started_at"`
	UpdatedAt    time.Time  `json:"updated_at"`
	CompletedAt  *time.Time `json:"completed_at"`
	IngestStatus string     `json:"ingest_status"`
	// Priority is the batch's priority (the queue message's priority:
	// -10 to 10, higher first; 0 when it gave none).
	Priority int `json:"priority"`
	// prunedCounts is what retention kept of its progress, if it pruned
	// the batch.
	prunedCounts []byte
}

// BatchPage is one page of batches, newest first.
type BatchPage struct {
	Batches []BatchSummary `json:"batches"`
	// NextCursor fetches the next page; null when this page is not full
	// (a full last page is followed by an empty one). It is opaque, and stays
	// valid while batches are added: they sort before it.
	NextCursor *string `json:"next_cursor"`
}

// List pages through batches newest first (by acceptance time, then id).
// Bad filters are an InputError that says which and why.
func (r *Reader) List(ctx context.Context, f BatchFilter) (BatchPage, error) {
	p := db.BatchListParams{Since: f.Since, Until: f.Until}
	var problems []string
	if f.Status != "" {
		if !knownStatus(f.Status) {
			problems = append(problems, fmt.Sprintf("status must be one of %s, got %q", strings.Join(statuses(), ", "), f.Status))
		}
		p.Status = &f.Status
	}
	if f.Uploader != "" {
		p.Uploader = &f.Uploader
	}
	if f.Since != nil && f.Until != nil && !f.Since.Before(*f.Until) {
		problems = append(problems, "since must be before until")
	}
	if f.Limit == 0 {
		f.Limit = DefaultBatchLimit
	}
	if f.Limit < 1 || f.Limit > MaxBatchLimit {
		problems = append(problems, fmt.Sprintf("limit must be between 1 and %d, got %d", MaxBatchLimit, f.Limit))
	}
	if f.Cursor != "" {
		t, id, err := decodeCursor(f.Cursor)
		if err != nil {
			problems = append(problems, "cursor is not one this server issued")
		} else {
			p.BeforeStartedAt, p.BeforeID = &t, &id
		}
	}
	if len(problems) > 0 {
		return BatchPage{}, &problem.InputError{Msg: "invalid batch listing: " + strings.Join(problems, "; ")}
	}
	p.Max = int32(f.Limit)
	rows, err := db.New(r.pool).BatchList(ctx, p)
	if err != nil {
		return BatchPage{}, fmt.Errorf("listing batches: %w", err)
	}
	page := BatchPage{Batches: make([]BatchSummary, len(rows))}
	for i, r := range rows {
		page.Batches[i] = BatchSummary{
			BatchID: r.ID, Status: r.Status, Phase: r.Phase, Uploader: r.Uploader, TotalFiles: r.TotalFiles, TotalBytes: r.TotalBytes,
			Error: r.Error, StartedAt: r.StartedAt, UpdatedAt: r.UpdatedAt, CompletedAt: r.CompletedAt, IngestStatus: r.IngestStatus,
			Priority: int(r.Priority), prunedCounts: r.PrunedCounts,
		}
	}
	if len(rows) == f.Limit {
		last := rows[len(rows)-1]
		c := encodeCursor(last.StartedAt, last.ID)
		page.NextCursor = &c
	}
	return page, nil
}

// statuses lists every batch status, in pipeline order.
func statuses() []string {
	var out []string
	for _, st := range phases.Statuses() {
		out = append(out, string(st))
	}
	return out
}

func knownStatus(s string) bool {
	for _, v := range statuses() {
		if v == s {
			return true
		}
	}
	return false
}

// A cursor is the (started_at, id) of the last batch of a page: the key the
// listing is ordered by, so the next page starts strictly after it. It is
// encoded so that clients treat it as opaque.
func encodeCursor(t time.Time, id string) string {
	return base64.RawURLEncoding.EncodeToString([]byte(strconv.FormatInt(t.UnixMicro(), 10) + ":" + id))
}

func decodeCursor(c string) (time.Time, string, error) {
	b, err := base64.RawURLEncoding.DecodeString(c)
	if err != nil {
		return time.Time{}, "", err
	}
	ts, id, ok := strings.Cut(string(b), ":")
	if !ok || id == "" {
		return time.Time{}, "", fmt.Errorf("malformed cursor")
	}
	us, err := strconv.ParseInt(ts, 10, 64)
	if err != nil {
		return time.Time{}, "", err
	}
	return time.UnixMicro(us), id, nil
}

// Progress is each listed batch's phases' progress (Status's Phases), as
// the dashboard's listing shows it.
func (r *Reader) Progress(ctx context.Context, page BatchPage) (map[string][]PhaseProgress, error) {
	batches := make([]db.Batch, len(page.Batches))
	for i, b := range page.Batches {
		batches[i] = db.Batch{ID: b.BatchID, PrunedCounts: b.prunedCounts}
	}
	progress, err := r.progress(ctx, db.New(r.pool), batches)
	if err != nil {
		return nil, fmt.Errorf("counting the work of listed batches: %w", err)
	}
	return progress, nil
}
