package chunked

import (
	"context"
	"fmt"
	"time"

	"github.com/arke-institute/orchestrator/db"
	"github.com/arke-institute/orchestrator/jobs"
	"github.com/arke-institute/orchestrator/phases"
	"github.com/arke-institute/orchestrator/ratelimit"
)

// Routes are spec 004's chunk status, GET /status/:batchId/:chunkId.
func (e *Executor) Routes() []jobs.Route {
	return []jobs.Route{{
		Method: "GET", Path: "/status/:batchId/:chunkId", Access: jobs.AccessStatus,
		Handle: func(ctx context.Context, r jobs.Request) (any, error) {
			return e.ChunkStatus(ctx, r.Params["batchId"], r.Params["chunkId"])
		},
	}}
}

// ChunkStatus is spec 004's GET /status/:batchId/:chunkId: one chunk of a
// batch's chunked phase and the rate limiter it draws on.
type ChunkStatus struct {
	BatchID string `json:"batch_id"`
	ChunkID string `json:"chunk_id"`
	// Phase is the chunk's state: PENDING, FETCHING, PROCESSING,
	// PUBLISHING, DONE or ERROR (spec 004 calls it phase).
	Phase db.ChunkState `json:"phase"`
	// Status is processing, done or error.
	Status      string           `json:"status"`
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

// Progress is c's refs by outcome; pending are those not ended.
func Progress(c db.Chunk) ChunkProgress {
	return ChunkProgress{TotalRefs: c.TotalRefs, Completed: c.Completed, Failed: c.Failed, Skipped: c.Skipped,
		Pending: c.TotalRefs - c.Completed - c.Failed - c.Skipped}
}

// ChunkStatus reports one chunk of a batch's chunked phase (the latest
// started, should two phases have a chunk of that id); db.ErrNotFound for
// an unknown batch or chunk.
func (e *Executor) ChunkStatus(ctx context.Context, batchID, chunkID string) (ChunkStatus, error) {
	c, err := db.New(e.deps.Pool).ChunkGetByID(ctx, db.ChunkGetByIDParams{BatchID: batchID, ChunkID: chunkID})
	if err != nil {
		return ChunkStatus{}, db.NotFound(err, fmt.Sprintf("chunk %s of batch %s", chunkID, batchID))
	}
	st := ChunkStatus{
		BatchID: batchID, ChunkID: chunkID, Status: "processing", Phase: c.State, Error: c.Error, GlobalRetries: c.GlobalRetryCount,
		StartedAt: c.StartedAt, FinishedAt: c.FinishedAt, ProcessingTimeMS: c.ProcessingTimeMs,
		Progress: Progress(c),
	}
	switch c.State {
	case db.ChunkDone:
		st.Status = "done"
	case db.ChunkError:
		st.Status = "error"
	}
	eng := e.engineOf(c.Phase)
	limiters, err := e.LimiterStates(ctx, eng.Tuning().Limit, []string{eng.LimitKey(batchID, chunkID)})
	if err != nil {
		return ChunkStatus{}, err
	}
	st.RateLimiter = limiters[0]
	return st, nil
}

// engineOf is the engine of the phase called phase.
func (e *Executor) engineOf(phase string) Engine {
	if p, ok := phases.Get(phases.Name(phase)); ok {
		if eng, ok := e.engines[p.Spec().Engine]; ok {
			return eng
		}
	}
	return unknownPhase{phase}
}

// LimiterStates reads the limiter buckets of keys now; a bucket not yet
// made is shown as limit would make it.
func (e *Executor) LimiterStates(ctx context.Context, limit ratelimit.Adaptive, keys []string) ([]RateLimiterState, error) {
	if len(keys) == 0 {
		return nil, nil
	}
	found, err := e.limiter.States(ctx, keys)
	if err != nil {
		return nil, fmt.Errorf("reading rate limits: %w", err)
	}
	now := time.Now()
	out := make([]RateLimiterState, len(keys))
	for i, key := range keys {
		b, ok := found[key]
		if !ok {
			b = ratelimit.NewBucket(limit, now)
		}
		st := RateLimiterState{Key: key, Tokens: b.Tokens, MaxTokens: b.MaxTokens, RPS: b.RefillRate}
		if b.BackoffUntil.After(now) {
			st.BackoffUntil = &b.BackoffUntil
		}
		out[i] = st
	}
	return out, nil
}
