package ui

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/url"
	"slices"
	"strings"
	"time"

	"github.com/arke-institute/orchestrator/blob"
	"github.com/arke-institute/orchestrator/db"
	"github.com/arke-institute/orchestrator/jobs"
	"github.com/arke-institute/orchestrator/phases"
	"github.com/arke-institute/orchestrator/problem"
	"github.com/arke-institute/orchestrator/status"
)

// dashboardMaxFiles bounds the files one batch page lists.
const dashboardMaxFiles = 500

// Batch is a batch in the dashboard's listing: its summary and
// its progress in each phase.
type Batch struct {
	status.BatchSummary
	Phases []status.PhaseProgress
}

// Page is a page of the dashboard's batch listing.
type Page struct {
	Batches    []Batch
	NextCursor *string
}

// list is List with each batch's per-phase progress.
func (d *Dashboard) list(ctx context.Context, f status.BatchFilter) (Page, error) {
	page, err := d.status.List(ctx, f)
	if err != nil {
		return Page{}, err
	}
	progress, err := d.status.Progress(ctx, page)
	if err != nil {
		return Page{}, err
	}
	out := Page{Batches: make([]Batch, len(page.Batches)), NextCursor: page.NextCursor}
	for i, b := range page.Batches {
		out.Batches[i] = Batch{BatchSummary: b, Phases: progress[b.BatchID]}
	}
	return out, nil
}

// PhaseSpan is when a phase of a batch started and ended (the first
// phase.started and the last phase.completed events); End is nil while it
// runs.
type PhaseSpan struct {
	Phase string
	Start time.Time
	End   *time.Time
}

// File is a file of the batch's current generation (its final
// file list once DONE).
type File struct {
	ID          int64
	LogicalPath string
	Size        int64
	ContentType string
	// Thumbnail is true when the file has an image variant to show
	// (DashboardThumbnail serves it).
	Thumbnail bool
	// NoText is true for an OCR'd image in which OCR found no text: it
	// makes no document.
	NoText bool
}

// Detail is everything the dashboard's batch page shows.
type Detail struct {
	Status   status.Status
	Uploader string
	// Timeline is each phase that started, in the order they started.
	Timeline []PhaseSpan
	// Files is the current generation, at most dashboardMaxFiles, and
	// FilesTotal how many it holds.
	Files      []File
	FilesTotal int64
	// Documents is how many documents the batch made (the documents
	// page lists them).
	Documents int32
	// Views are the executors' own sections (a chunked phase's chunks,
	// the failed tasks...), in page order.
	Views []jobs.View
}

// detail reads a batch for the dashboard; ErrNotFound for an
// unknown batch.
func (d *Dashboard) detail(ctx context.Context, batchID string) (Detail, error) {
	st, err := d.status.Status(ctx, batchID)
	if err != nil {
		return Detail{}, err
	}
	q := db.New(d.pool)
	b, err := q.BatchGetByID(ctx, batchID)
	if err != nil {
		return Detail{}, db.NotFound(err, "batch "+batchID)
	}
	out := Detail{Status: st, Uploader: b.Uploader}

	spans, err := q.BatchEventPhaseSpans(ctx, db.BatchEventPhaseSpansParams{BatchID: batchID, Started: db.EventPhaseStarted, Completed: db.EventPhaseCompleted})
	if err != nil {
		return Detail{}, fmt.Errorf("reading the phases of batch %s: %w", batchID, err)
	}
	for _, sp := range spans {
		out.Timeline = append(out.Timeline, PhaseSpan{Phase: sp.Phase, Start: sp.StartedAt, End: sp.CompletedAt})
	}

	files, err := q.FileListWithThumbnail(ctx, db.FileListWithThumbnailParams{BatchID: batchID, Generation: b.Generation, Max: dashboardMaxFiles})
	if err != nil {
		return Detail{}, fmt.Errorf("reading files of batch %s: %w", batchID, err)
	}
	for _, f := range files {
		out.Files = append(out.Files, File{ID: f.ID, LogicalPath: f.LogicalPath, Size: f.FileSize, ContentType: f.ContentType, Thumbnail: f.HasThumbnail,
			NoText: slices.Contains(f.PreprocessorTags, phases.TagOCRNoText)})
		out.FilesTotal = f.Total
	}

	docs, err := q.DocumentBatchSummary(ctx, &batchID)
	if err != nil {
		return Detail{}, fmt.Errorf("counting documents of batch %s: %w", batchID, err)
	}
	out.Documents = docs.Total

	if out.Views, err = d.executors.Views(ctx, batchID); err != nil {
		return Detail{}, err
	}
	return out, nil
}

// thumbnail opens the thumbnail variant of a file of the batch,
// read from the CDN bucket through the orchestrator's store (not its public
// URL, which need not be reachable from the viewer). Only an object named
// by the batch's own task results can be read. ErrNotFound when the file
// has no thumbnail. The caller closes the reader.
func (d *Dashboard) thumbnail(ctx context.Context, batchID string, fileID int64) (io.ReadCloser, int64, error) {
	what := fmt.Sprintf("thumbnail of file %d of batch %s", fileID, batchID)
	thumbURL, err := db.New(d.pool).FileThumbnailURL(ctx, db.FileThumbnailURLParams{ID: fileID, BatchID: batchID})
	if err != nil {
		return nil, 0, db.NotFound(err, what)
	}
	key, ok := d.cdnKey(thumbURL, batchID)
	if !ok || d.store == nil {
		return nil, 0, fmt.Errorf("%s: %w", what, problem.ErrNotFound)
	}
	r, size, err := d.store.Open(ctx, d.cdnBucket, key)
	if errors.Is(err, blob.ErrNotFound) {
		return nil, 0, fmt.Errorf("%s: %w", what, problem.ErrNotFound)
	}
	return r, size, err
}

// cdnKey is the CDN bucket key of a variant URL of batchID's (CDN_PUBLIC_URL
// + "/" + the key, its segments escaped), or false for a URL elsewhere or a
// key outside the batch's variants (phases.CheckKey): the URL comes from a
// worker's result, and a worker names only its own batch's objects.
func (d *Dashboard) cdnKey(u, batchID string) (string, bool) {
	rest, ok := strings.CutPrefix(u, d.cdnPublicURL+"/")
	if !ok || d.cdnPublicURL == "" {
		return "", false
	}
	key, err := url.PathUnescape(rest)
	if err != nil || phases.CheckKey(key, phases.BatchPrefix(phases.CDNBucket, batchID)) != nil {
		return "", false
	}
	return key, true
}
