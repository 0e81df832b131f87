package service

import (
	"context"
	"fmt"
	"time"

	"github.com/arke-institute/orchestrator/db"
	"github.com/arke-institute/orchestrator/jobs"
	"github.com/arke-institute/orchestrator/phases"
)

// OCRProgress is a batch's OCR phase at a glance (its chunks and refs by
// outcome), in its status while it has one.
type OCRProgress struct {
	ChunksTotal int32 `json:"chunks_total"`
	ChunksDone  int32 `json:"chunks_done"`
	ChunksError int32 `json:"chunks_error"`
	RefsTotal   int32 `json:"refs_total"`
	RefsDone    int32 `json:"refs_done"`
	RefsFailed  int32 `json:"refs_failed"`
	RefsSkipped int32 `json:"refs_skipped"`
}

// ocrProgress is the batch's OCR block, nil when it has no OCR chunks.
func ocrProgress(ctx context.Context, q *db.Queries, batchID string) (*OCRProgress, error) {
	s, err := q.ChunkSummary(ctx, db.ChunkSummaryParams{BatchID: batchID, Phase: string(phases.OCR)})
	if err != nil {
		return nil, fmt.Errorf("summing the OCR chunks of %s: %w", batchID, err)
	}
	if s.ChunksTotal == 0 {
		return nil, nil
	}
	p := OCRProgress(s)
	return &p, nil
}

// ChunkStatus is spec 004's GET /status/:batchId/:chunkId: one chunk of a
// batch's OCR phase and the rate limiter it draws on.
type ChunkStatus struct {
	BatchID string `json:"batch_id"`
	ChunkID string `json:"chunk_id"`
	// Status is processing, done or error.
	Status string `json:"status"`
	// Phase is the chunk's state: PENDING, FETCHING, PROCESSING,
	// PUBLISHING, DONE or ERROR.
	Phase       string           `json:"phase"`
	Progress    ChunkProgress    `json:"progress"`
	RateLimiter RateLimiterState `json:"rate_limiter"`
	Error       *string          `json:"error,omitempty"`
	// GlobalRetries counts the failed runs of the chunk's job.
	GlobalRetries    int32      `json:"global_retries"`
	StartedAt        *time.Time `json:"started_at"`
	FinishedAt       *time.Time `json:"finished_at"`
	ProcessingTimeMS int64      `json:"processing_time_ms"`
}

// ChunkProgress counts a chunk's refs; Pending is those not yet ended.
type ChunkProgress struct {
	TotalRefs int32 `json:"total_refs"`
	Completed int32 `json:"completed"`
	Failed    int32 `json:"failed"`
	Skipped   int32 `json:"skipped"`
	Pending   int32 `json:"pending"`
}

// RateLimiterState is the limiter a chunk takes its tokens from, now.
type RateLimiterState struct {
	Key       string  `json:"key"`
	Tokens    float64 `json:"tokens"`
	MaxTokens float64 `json:"max_tokens"`
	// RPS is the refill rate, requests a second.
	RPS          float64    `json:"rps"`
	BackoffUntil *time.Time `json:"backoff_until,omitempty"`
}

// chunkProgress is c's refs by outcome; pending are those not ended.
func chunkProgress(c db.Chunk) ChunkProgress {
	return ChunkProgress{TotalRefs: c.TotalRefs, Completed: c.Completed, Failed: c.Failed, Skipped: c.Skipped,
		Pending: c.TotalRefs - c.Completed - c.Failed - c.Skipped}
}

// ChunkStatus reports one OCR chunk; ErrNotFound for an unknown batch or
// chunk.
func (s *Service) ChunkStatus(ctx context.Context, batchID, chunkID string) (ChunkStatus, error) {
	q := db.New(s.pool)
	c, err := q.ChunkGet(ctx, db.ChunkGetParams{BatchID: batchID, Phase: string(phases.OCR), ChunkID: chunkID})
	if err != nil {
		return ChunkStatus{}, db.NotFound(err, fmt.Sprintf("chunk %s of batch %s", chunkID, batchID))
	}
	st := ChunkStatus{
		BatchID: batchID, ChunkID: chunkID, Status: "processing", Phase: c.State, Error: c.Error, GlobalRetries: c.GlobalRetryCount,
		StartedAt: c.StartedAt, FinishedAt: c.FinishedAt, ProcessingTimeMS: c.ProcessingTimeMs,
		Progress: chunkProgress(c),
	}
	switch c.State {
	case "DONE":
		st.Status = "done"
	case "ERROR":
		st.Status = "error"
	}
	limiters, err := s.limiterStates(ctx, []string{jobs.OCRLimitKey(s.cfg, batchID, chunkID)})
	if err != nil {
		return ChunkStatus{}, err
	}
	st.RateLimiter = limiters[0]
	return st, nil
}
