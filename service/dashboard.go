package service

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/url"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/arke-institute/orchestrator/blob"
	"github.com/arke-institute/orchestrator/db"
)

// Limits of what one batch page lists.
const (
	dashboardMaxFailed = 200
	dashboardMaxFiles  = 500
)

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
	ids := make([]string, len(page.Batches))
	for i, b := range page.Batches {
		ids[i] = b.BatchID
	}
	rows, err := s.pool.Query(ctx, `SELECT batch_id, phase, status, n FROM task_counts WHERE batch_id = ANY($1) AND n <> 0`, ids)
	if err != nil {
		return DashboardPage{}, fmt.Errorf("counting tasks of listed batches: %w", err)
	}
	counts := map[string][]db.TaskCountByBatchRow{}
	var batchID string
	var r db.TaskCountByBatchRow
	if _, err := pgx.ForEachRow(rows, []any{&batchID, &r.Phase, &r.Status, &r.Count}, func() error {
		counts[batchID] = append(counts[batchID], r)
		return nil
	}); err != nil {
		return DashboardPage{}, fmt.Errorf("counting tasks of listed batches: %w", err)
	}
	out := DashboardPage{Batches: make([]DashboardBatch, len(page.Batches)), NextCursor: page.NextCursor}
	for i, b := range page.Batches {
		out.Batches[i] = DashboardBatch{BatchSummary: b, Phases: phaseProgress(counts[b.BatchID])}
	}
	return out, nil
}

// PhaseSpan is when a phase of a batch started and ended (the first
// phase.started and the last phase.completed events); End is nil while it
// runs.
type PhaseSpan struct {
	Phase      string
	Start, End *time.Time
}

// FailedTask is a failed task with its error.
type FailedTask struct {
	TaskID      string
	Phase       string
	LogicalPath string
	Error       string
	FinishedAt  *time.Time
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
	// Failed lists failed tasks, oldest first, at most dashboardMaxFailed.
	Failed []FailedTask
	// Files is the current generation, at most dashboardMaxFiles, and
	// FilesTotal how many it holds.
	Files      []DashboardFile
	FilesTotal int64
}

// thumbnailSQL finds the thumbnail URL of a file: a completed task on its
// parent (the image it was made from) whose result names variants.
const thumbnailSQL = `t.result -> 'ref_data' -> 'variants' ->> 'thumbnail'`

// DashboardDetail reads a batch for the dashboard; ErrNotFound for an
// unknown batch.
func (s *Service) DashboardDetail(ctx context.Context, batchID string) (DashboardDetail, error) {
	st, err := s.Status(ctx, batchID)
	if err != nil {
		return DashboardDetail{}, err
	}
	d := DashboardDetail{Status: st}
	var generation int32
	if err := s.pool.QueryRow(ctx, `SELECT uploader, generation FROM batches WHERE id = $1`, batchID).Scan(&d.Uploader, &generation); err != nil {
		return DashboardDetail{}, db.NotFound(err, "batch "+batchID)
	}

	rows, err := s.pool.Query(ctx, `
		SELECT phase, min(created_at) FILTER (WHERE type = 'phase.started'), max(created_at) FILTER (WHERE type = 'phase.completed')
		FROM batch_events WHERE batch_id = $1 AND type IN ('phase.started', 'phase.completed') AND phase IS NOT NULL
		GROUP BY phase ORDER BY 2 NULLS LAST`, batchID)
	if err != nil {
		return DashboardDetail{}, fmt.Errorf("reading the phases of batch %s: %w", batchID, err)
	}
	var span PhaseSpan
	if _, err := pgx.ForEachRow(rows, []any{&span.Phase, &span.Start, &span.End}, func() error {
		d.Timeline = append(d.Timeline, span)
		return nil
	}); err != nil {
		return DashboardDetail{}, fmt.Errorf("reading the phases of batch %s: %w", batchID, err)
	}

	rows, err = s.pool.Query(ctx, `
		SELECT t.id, t.phase, coalesce(f.logical_path, ''), coalesce(t.error, ''), t.finished_at
		FROM tasks t LEFT JOIN files f ON f.id = t.file_id
		WHERE t.batch_id = $1 AND t.status = 'failed' ORDER BY t.finished_at NULLS LAST, t.id LIMIT $2`, batchID, dashboardMaxFailed)
	if err != nil {
		return DashboardDetail{}, fmt.Errorf("reading failed tasks of batch %s: %w", batchID, err)
	}
	var ft FailedTask
	if _, err := pgx.ForEachRow(rows, []any{&ft.TaskID, &ft.Phase, &ft.LogicalPath, &ft.Error, &ft.FinishedAt}, func() error {
		d.Failed = append(d.Failed, ft)
		return nil
	}); err != nil {
		return DashboardDetail{}, fmt.Errorf("reading failed tasks of batch %s: %w", batchID, err)
	}

	rows, err = s.pool.Query(ctx, `
		SELECT f.id, f.logical_path, f.file_size, f.content_type,
			EXISTS (SELECT 1 FROM tasks t WHERE t.file_id = f.parent_id AND t.status = 'completed' AND `+thumbnailSQL+` IS NOT NULL),
			count(*) OVER ()
		FROM files f WHERE f.batch_id = $1 AND f.generation = $2 ORDER BY f.ordinal LIMIT $3`, batchID, generation, dashboardMaxFiles)
	if err != nil {
		return DashboardDetail{}, fmt.Errorf("reading files of batch %s: %w", batchID, err)
	}
	var f DashboardFile
	if _, err := pgx.ForEachRow(rows, []any{&f.ID, &f.LogicalPath, &f.Size, &f.ContentType, &f.Thumbnail, &d.FilesTotal}, func() error {
		d.Files = append(d.Files, f)
		return nil
	}); err != nil {
		return DashboardDetail{}, fmt.Errorf("reading files of batch %s: %w", batchID, err)
	}
	return d, nil
}

// DashboardThumbnail opens the thumbnail variant of a file of the batch,
// read from the CDN bucket through the orchestrator's store (not its public
// URL, which need not be reachable from the viewer). Only an object named
// by the batch's own task results can be read. ErrNotFound when the file
// has no thumbnail. The caller closes the reader.
func (s *Service) DashboardThumbnail(ctx context.Context, batchID string, fileID int64) (io.ReadCloser, int64, error) {
	var thumbURL string
	err := s.pool.QueryRow(ctx, `
		SELECT `+thumbnailSQL+` FROM files f JOIN tasks t ON t.file_id = f.parent_id
		WHERE f.id = $1 AND f.batch_id = $2 AND t.status = 'completed' AND `+thumbnailSQL+` IS NOT NULL
		LIMIT 1`, fileID, batchID).Scan(&thumbURL)
	if err != nil {
		return nil, 0, db.NotFound(err, fmt.Sprintf("thumbnail of file %d of batch %s", fileID, batchID))
	}
	key, ok := s.cdnKey(thumbURL)
	if !ok || s.store == nil {
		return nil, 0, fmt.Errorf("thumbnail of file %d of batch %s: %w", fileID, batchID, ErrNotFound)
	}
	r, size, err := s.store.Open(ctx, s.cdnBucket, key)
	if errors.Is(err, blob.ErrNotFound) {
		return nil, 0, fmt.Errorf("thumbnail of file %d of batch %s: %w", fileID, batchID, ErrNotFound)
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
