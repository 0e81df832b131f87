package chunked

import (
	"context"
	_ "embed"
	"fmt"
	"strings"
	"time"

	"github.com/arke-institute/orchestrator/db"
	"github.com/arke-institute/orchestrator/jobs"
)

// Limits of what a chunked phase's section of the batch page lists.
const (
	viewMaxChunks = 500
	// viewMaxChunkFailures is how many failed items of each chunk the
	// page names; the chunk's counters count them all.
	viewMaxChunkFailures = 3
)

//go:embed view.html
var viewTemplate string

// phaseView is a chunked phase's section of the batch page: its totals,
// the rate limiters its chunks draw on, and its chunks.
type phaseView struct {
	Progress jobs.PhaseProgress
	// Limiters are the limiters as of now: the one every chunk shares, or
	// with a bucket per chunk those of the chunks still open (a finished
	// chunk's own bucket is idle).
	Limiters []RateLimiterState
	// Chunks are the phase's chunks in id order, at most viewMaxChunks,
	// of ChunksTotal.
	Chunks      []chunkView
	ChunksTotal int
}

// chunkView is one chunk on the page, with the first of its failed items.
type chunkView struct {
	ID            string
	State         db.ChunkState
	Progress      ChunkProgress
	Error         *string
	GlobalRetries int32
	StartedAt     *time.Time
	FinishedAt    *time.Time
	Failures      []itemFailure
}

// itemFailure is a failed item of a chunk: its file and why.
type itemFailure struct {
	LogicalPath string
	Error       string
}

// Views are a section per chunked phase the batch has chunks in.
func (e *Executor) Views(ctx context.Context, batchID string) ([]jobs.View, error) {
	q := db.New(e.deps.Pool)
	var out []jobs.View
	for _, p := range e.deps.Executors.PhasesOf(Kind) {
		phase := string(p.Spec().Name)
		chunks, err := q.ChunkListByBatchPhase(ctx, db.ChunkListByBatchPhaseParams{BatchID: batchID, Phase: phase})
		if err != nil {
			return nil, fmt.Errorf("reading the chunks of %s: %w", batchID, err)
		}
		if len(chunks) == 0 {
			continue
		}
		v, err := e.view(ctx, q, batchID, phase, chunks)
		if err != nil {
			return nil, err
		}
		out = append(out, jobs.View{ID: strings.ToLower(p.Spec().Short), Title: phase, Template: viewTemplate, Data: v})
	}
	return out, nil
}

func (e *Executor) view(ctx context.Context, q *db.Queries, batchID, phase string, chunks []db.Chunk) (phaseView, error) {
	eng := e.engineOf(phase)
	perChunk := eng.LimitKey(batchID, "a") != eng.LimitKey(batchID, "b")
	v := phaseView{Progress: jobs.PhaseProgress{Phase: phase, Executor: Kind, Unit: "refs", Detail: map[string]int64{}}, ChunksTotal: len(chunks)}
	var keys []string
	seen := map[string]bool{}
	anyFailed := false
	for _, c := range chunks {
		p := &v.Progress
		p.Detail["chunks_total"]++
		switch c.State {
		case db.ChunkDone:
			p.Detail["chunks_done"]++
		case db.ChunkError:
			p.Detail["chunks_error"]++
		}
		p.TasksTotal += int64(c.TotalRefs)
		p.TasksCompleted += int64(c.Completed + c.Skipped)
		p.TasksSkipped += int64(c.Skipped)
		p.TasksFailed += int64(c.Failed)
		anyFailed = anyFailed || c.Failed > 0
		idle := perChunk && chunkTerminal(c.State)
		if key := eng.LimitKey(batchID, c.ChunkID); !idle && !seen[key] {
			seen[key] = true
			keys = append(keys, key)
		}
		if len(v.Chunks) < viewMaxChunks {
			v.Chunks = append(v.Chunks, chunkView{
				ID: c.ChunkID, State: c.State, Error: c.Error, GlobalRetries: c.GlobalRetryCount, StartedAt: c.StartedAt, FinishedAt: c.FinishedAt,
				Progress: Progress(c),
			})
		}
	}
	v.Progress.TasksPending = v.Progress.TasksTotal - v.Progress.TasksCompleted - v.Progress.TasksFailed
	var err error
	if v.Limiters, err = e.LimiterStates(ctx, eng.Tuning().Limit, keys); err != nil {
		return phaseView{}, err
	}
	if !anyFailed {
		return v, nil
	}
	failed, err := q.ChunkItemListFailedByBatchPhase(ctx, db.ChunkItemListFailedByBatchPhaseParams{
		BatchID: batchID, Phase: phase, MaxPerChunk: viewMaxChunkFailures,
	})
	if err != nil {
		return phaseView{}, fmt.Errorf("reading the failed items of %s: %w", batchID, err)
	}
	byID := make(map[string]*chunkView, len(v.Chunks))
	for i := range v.Chunks {
		byID[v.Chunks[i].ID] = &v.Chunks[i]
	}
	for _, f := range failed {
		if c := byID[f.ChunkID]; c != nil {
			c.Failures = append(c.Failures, itemFailure{LogicalPath: f.LogicalPath, Error: f.Error})
		}
	}
	return v, nil
}
