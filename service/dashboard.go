package service

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/url"
	"strings"
	"time"

	"github.com/arke-institute/orchestrator/blob"
	"github.com/arke-institute/orchestrator/db"
	"github.com/arke-institute/orchestrator/jobs"
)

// dashboardMaxFiles bounds the files one batch page lists.
const dashboardMaxFiles = 500

// DashboardBatch is a batch in the dashboard's listing: its summary and
// its progress in each phase.
type DashboardBatch struct {
	BatchSummary
	Phases []PhaseProgress
}

// DashboardPage is a page of the dashboard's batch listing.
type DashboardPage struct {
	Batches    []DashboardBatch
	NextCursor *string
}

// DashboardList is List with each batch's per-phase progress.
func (s *Service) DashboardList(ctx context.Context, f BatchFilter) (DashboardPage, error) {
	page, err := s.List(ctx, f)
	if err != nil {
		return DashboardPage{}, err
	}
	batches := make([]db.Batch, len(page.Batches))
	for i, b := range page.Batches {
		batches[i] = db.Batch{ID: b.BatchID, PrunedCounts: b.prunedCounts}
	}
	progress, err := s.progress(ctx, db.New(s.pool), batches)
	if err != nil {
		return DashboardPage{}, fmt.Errorf("counting the work of listed batches: %w", err)
	}
	out := DashboardPage{Batches: make([]DashboardBatch, len(page.Batches)), NextCursor: page.NextCursor}
	for i, b := range page.Batches {
		out.Batches[i] = DashboardBatch{BatchSummary: b, Phases: progress[b.BatchID]}
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

// DashboardFile is a file of the batch's current generation (its final
// file list once DONE).
type DashboardFile struct {
	ID          int64
	LogicalPath string
	Size        int64
	ContentType string
	// Thumbnail is true when the file has an image variant to show
	// (DashboardThumbnail serves it).
	Thumbnail bool
}

// DashboardDetail is everything the dashboard's batch page shows.
type DashboardDetail struct {
	Status   Status
	Uploader string
	// Timeline is each phase that started, in the order they started.
	Timeline []PhaseSpan
	// Files is the current generation, at most dashboardMaxFiles, and
	// FilesTotal how many it holds.
	Files      []DashboardFile
	FilesTotal int64
	// Views are the executors' own sections (a chunked phase's chunks,
	// the failed tasks...), in page order.
	Views []jobs.View
}

// DashboardDetail reads a batch for the dashboard; ErrNotFound for an
// unknown batch.
func (s *Service) DashboardDetail(ctx context.Context, batchID string) (DashboardDetail, error) {
	st, err := s.Status(ctx, batchID)
	if err != nil {
		return DashboardDetail{}, err
	}
	q := db.New(s.pool)
	b, err := q.BatchGetByID(ctx, batchID)
	if err != nil {
		return DashboardDetail{}, db.NotFound(err, "batch "+batchID)
	}
	d := DashboardDetail{Status: st, Uploader: b.Uploader}

	spans, err := q.BatchEventPhaseSpans(ctx, db.BatchEventPhaseSpansParams{BatchID: batchID, Started: db.EventPhaseStarted, Completed: db.EventPhaseCompleted})
	if err != nil {
		return DashboardDetail{}, fmt.Errorf("reading the phases of batch %s: %w", batchID, err)
	}
	for _, sp := range spans {
		d.Timeline = append(d.Timeline, PhaseSpan{Phase: sp.Phase, Start: sp.StartedAt, End: sp.CompletedAt})
	}

	files, err := q.FileListWithThumbnail(ctx, db.FileListWithThumbnailParams{BatchID: batchID, Generation: b.Generation, Max: dashboardMaxFiles})
	if err != nil {
		return DashboardDetail{}, fmt.Errorf("reading files of batch %s: %w", batchID, err)
	}
	for _, f := range files {
		d.Files = append(d.Files, DashboardFile{ID: f.ID, LogicalPath: f.LogicalPath, Size: f.FileSize, ContentType: f.ContentType, Thumbnail: f.HasThumbnail})
		d.FilesTotal = f.Total
	}

	if d.Views, err = s.executors.Views(ctx, batchID); err != nil {
		return DashboardDetail{}, err
	}
	return d, nil
}

// DashboardThumbnail opens the thumbnail variant of a file of the batch,
// read from the CDN bucket through the orchestrator's store (not its public
// URL, which need not be reachable from the viewer). Only an object named
// by the batch's own task results can be read. ErrNotFound when the file
// has no thumbnail. The caller closes the reader.
func (s *Service) DashboardThumbnail(ctx context.Context, batchID string, fileID int64) (io.ReadCloser, int64, error) {
	what := fmt.Sprintf("thumbnail of file %d of batch %s", fileID, batchID)
	thumbURL, err := db.New(s.pool).FileThumbnailURL(ctx, db.FileThumbnailURLParams{ID: fileID, BatchID: batchID})
	if err != nil {
		return nil, 0, db.NotFound(err, what)
	}
	key, ok := s.cdnKey(thumbURL)
	if !ok || s.store == nil {
		return nil, 0, fmt.Errorf("%s: %w", what, ErrNotFound)
	}
	r, size, err := s.store.Open(ctx, s.cdnBucket, key)
	if errors.Is(err, blob.ErrNotFound) {
		return nil, 0, fmt.Errorf("%s: %w", what, ErrNotFound)
	}
	return r, size, err
}

// cdnKey is the CDN bucket key of a variant URL (CDN_PUBLIC_URL + "/" +
// the key, its segments escaped), or false for a URL elsewhere.
func (s *Service) cdnKey(u string) (string, bool) {
	rest, ok := strings.CutPrefix(u, s.cdnPublicURL+"/")
	if !ok || s.cdnPublicURL == "" {
		return "", false
	}
	key, err := url.PathUnescape(rest)
	if err != nil || key == "" || strings.Contains(key, "..") {
		return "", false
	}
	return key, true
}
