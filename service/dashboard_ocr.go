package service

import (
	"context"
	"fmt"
	"time"

	"github.com/arke-institute/orchestrator/db"
	"github.com/arke-institute/orchestrator/jobs"
	"github.com/arke-institute/orchestrator/phases"
	"github.com/arke-institute/orchestrator/ratelimit"
)

// Limits of what the batch page's OCR section lists.
const (
	dashboardMaxChunks = 500
	// dashboardMaxChunkFailures is how many failed items of each chunk
	// the page names; the chunk's counters count them all.
	dashboardMaxChunkFailures = 3
)

// DashboardOCR is the batch page's OCR section: the phase's totals, the
// rate limiters its chunks draw on, and its chunks.
type DashboardOCR struct {
	Progress OCRProgress
	// Limiters are the limiters as of now: the one every chunk shares, or
	// with OCR_LIMIT_PER_CHUNK those of the chunks still open (a finished
	// chunk's own bucket is idle).
	Limiters []RateLimiterState
	// Chunks are the phase's chunks in id order, at most dashboardMaxChunks
	// (Progress.ChunksTotal counts them all).
	Chunks []DashboardChunk
}

// DashboardChunk is a chunk of the OCR phase with its first failures.
type DashboardChunk struct {
	ID string
	// State is PENDING, FETCHING, PROCESSING, PUBLISHING, DONE or ERROR.
	State         string
	Progress      ChunkProgress
	Error         *string
	GlobalRetries int32
	StartedAt     *time.Time
	FinishedAt    *time.Time
	// Failures are its first failed items, at most
	// dashboardMaxChunkFailures; Progress.Failed counts them all.
	Failures []ChunkFailure
}

// ChunkFailure is a chunk item that failed for good.
type ChunkFailure struct {
	LogicalPath string
	Error       string
}

// DashboardOCR reads a batch's OCR phase for the batch page in at most
// three queries, however many chunks it has: nil when it has no chunks.
func (s *Service) DashboardOCR(ctx context.Context, batchID string) (*DashboardOCR, error) {
	phase := string(phases.OCR)
	chunks, err := db.New(s.pool).ChunkListByBatchPhase(ctx, db.ChunkListByBatchPhaseParams{BatchID: batchID, Phase: phase})
	if err != nil {
		return nil, fmt.Errorf("reading the OCR chunks of %s: %w", batchID, err)
	}
	if len(chunks) == 0 {
		return nil, nil
	}
	out := &DashboardOCR{}
	var keys []string
	seen := map[string]bool{}
	anyFailed := false
	for _, c := range chunks {
		p := &out.Progress
		p.ChunksTotal++
		switch c.State {
		case "DONE":
			p.ChunksDone++
		case "ERROR":
			p.ChunksError++
		}
		p.RefsTotal += c.TotalRefs
		p.RefsDone += c.Completed
		p.RefsFailed += c.Failed
		p.RefsSkipped += c.Skipped
		anyFailed = anyFailed || c.Failed > 0

		// A finished chunk's own bucket is idle; the shared one is listed
		// whatever the chunks' states.
		idle := s.cfg.OCR.LimitPerChunk && chunkEnded(c.State)
		if key := jobs.OCRLimitKey(s.cfg, batchID, c.ChunkID); !idle && !seen[key] {
			seen[key] = true
			keys = append(keys, key)
		}
		if len(out.Chunks) < dashboardMaxChunks {
			out.Chunks = append(out.Chunks, DashboardChunk{
				ID: c.ChunkID, State: c.State, Error: c.Error, GlobalRetries: c.GlobalRetryCount, StartedAt: c.StartedAt, FinishedAt: c.FinishedAt,
				Progress: chunkProgress(c),
			})
		}
	}

	if out.Limiters, err = s.limiterStates(ctx, keys); err != nil {
		return nil, err
	}

	if !anyFailed {
		return out, nil
	}
	failed, err := db.New(s.pool).ChunkItemListFailedByBatchPhase(ctx, db.ChunkItemListFailedByBatchPhaseParams{
		BatchID: batchID, Phase: phase, MaxPerChunk: dashboardMaxChunkFailures,
	})
	if err != nil {
		return nil, fmt.Errorf("reading failed OCR items of %s: %w", batchID, err)
	}
	byID := make(map[string]*DashboardChunk, len(out.Chunks))
	for i := range out.Chunks {
		byID[out.Chunks[i].ID] = &out.Chunks[i]
	}
	for _, f := range failed {
		if c := byID[f.ChunkID]; c != nil {
			c.Failures = append(c.Failures, ChunkFailure{LogicalPath: f.LogicalPath, Error: f.Error})
		}
	}
	return out, nil
}

// chunkEnded reports whether a chunk's state is terminal.
func chunkEnded(state string) bool { return state == "DONE" || state == "ERROR" }

// limiterStates are the adaptive buckets named keys, in keys' order, their
// tokens refilled to now, in one query. A key no one has taken from yet is
// the bucket as it will start.
func (s *Service) limiterStates(ctx context.Context, keys []string) ([]RateLimiterState, error) {
	if len(keys) == 0 {
		return nil, nil
	}
	found, err := ratelimit.New(s.pool).States(ctx, keys)
	if err != nil {
		return nil, fmt.Errorf("reading OCR rate limits: %w", err)
	}
	now := time.Now()
	out := make([]RateLimiterState, len(keys))
	for i, key := range keys {
		b, ok := found[key]
		if !ok {
			b = ratelimit.NewBucket(ratelimit.Adaptive(s.cfg.OCRLimit), now)
		}
		out[i] = limiterState(key, b, now)
	}
	return out, nil
}

// limiterState is bucket b named key as status documents show it.
func limiterState(key string, b ratelimit.Bucket, now time.Time) RateLimiterState {
	st := RateLimiterState{Key: key, Tokens: b.Tokens, MaxTokens: b.MaxTokens, RPS: b.RefillRate}
	if b.BackoffUntil.After(now) {
		st.BackoffUntil = &b.BackoffUntil
	}
	return st
}
