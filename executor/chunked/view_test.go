package chunked

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/arke-institute/orchestrator/internal/harness/dbtest"
	"github.com/arke-institute/orchestrator/jobs"
	"github.com/arke-institute/orchestrator/ratelimit"
)

// TestViews: a chunked phase's section sums every chunk, lists the chunks in
// id order with their first failed items (by logical path), and reads the
// limiter they share, or with OCR_LIMIT_PER_CHUNK those of the open chunks,
// as it will start when no one has taken from it yet.
func TestViews(t *testing.T) {
	t.Parallel()
	pool := dbtest.New(t)
	ctx := context.Background()
	exec := dbtest.Exec(t, pool)
	exec(`INSERT INTO batches (id, uploader, queue_message) VALUES ('B', 'u', '{}'), ('NO-OCR', 'u', '{}')`)
	exec(`INSERT INTO files (batch_id, generation, ordinal, directory_path, r2_key, logical_path, file_name, file_size, content_type, processing_config)
		SELECT 'B', 0, i, '/a', 'staging/B/a/p' || i || '.jpg', '/a/p' || i || '.jpg', 'p' || i || '.jpg', 100, 'image/jpeg', '{}'
		FROM generate_series(0, 5) i`)
	exec(`INSERT INTO chunks (batch_id, phase, chunk_id, state, total_refs, completed, failed, skipped, error) VALUES
		('B', 'OCR', '0', 'DONE', 5, 1, 4, 0, NULL),
		('B', 'OCR', '10', 'PENDING', 1, 0, 0, 0, NULL),
		('B', 'OCR', '2', 'ERROR', 2, 0, 1, 1, 'the provider refused the key'),
		('B', 'OCR', '1', 'PROCESSING', 3, 1, 0, 1, NULL)`)
	// Chunk 0: item 1's file row is gone (its key stands in), items 1-4 failed.
	exec(`INSERT INTO chunk_items (batch_id, phase, chunk_id, item_index, directory_path, file_id, r2_key, status, error, text)
		SELECT 'B', 'OCR', '0', i, '/a', CASE WHEN i = 1 THEN -1 ELSE f.id END, f.r2_key,
			CASE WHEN i = 0 THEN 'done' ELSE 'error' END, CASE WHEN i > 0 THEN '422: <b>bad</b> page ' || i END, 'text'
		FROM files f JOIN generate_series(0, 4) i ON f.ordinal = i WHERE f.batch_id = 'B'`)
	exec(`INSERT INTO chunk_items (batch_id, phase, chunk_id, item_index, directory_path, file_id, r2_key, status, error)
		SELECT 'B', 'OCR', '2', 0, '/a', id, r2_key, 'error', 'timeout' FROM files WHERE batch_id = 'B' AND ordinal = 5`)
	exec(`INSERT INTO rate_limits (key, tokens, max_tokens, refill_rate, updated_at, backoff_until)
		VALUES ('ocr:ocr.test', 3, 20, 7.5, clock_timestamp(), clock_timestamp() + interval '1 hour')`)

	limit := ratelimit.DefaultAdaptive()
	views := func(perChunk bool) []jobs.View {
		t.Helper()
		e := New(jobs.Deps{Pool: pool}, Config{}, limitEngine{limit: limit, perChunk: perChunk})
		vs, err := e.Views(ctx, "B")
		require.NoError(t, err)
		return vs
	}
	vs := views(false)
	require.Len(t, vs, 1)
	require.Equal(t, "ocr", vs[0].ID)
	require.Equal(t, "OCR", vs[0].Title)
	o := vs[0].Data.(phaseView)
	require.Equal(t, jobs.PhaseProgress{Phase: "OCR", Executor: Kind, Unit: "refs", TasksTotal: 11, TasksPending: 2, TasksCompleted: 4, TasksFailed: 5, TasksSkipped: 2,
		Detail: map[string]int64{"chunks_total": 4, "chunks_done": 1, "chunks_error": 1}}, o.Progress)
	var ids []string
	for _, c := range o.Chunks {
		ids = append(ids, c.ID)
	}
	require.Equal(t, []string{"0", "1", "2", "10"}, ids, "numeric order")
	require.Equal(t, ChunkProgress{TotalRefs: 3, Completed: 1, Skipped: 1, Pending: 1}, o.Chunks[1].Progress)
	require.Equal(t, []itemFailure{
		{LogicalPath: "staging/B/a/p1.jpg", Error: "422: <b>bad</b> page 1"},
		{LogicalPath: "/a/p2.jpg", Error: "422: <b>bad</b> page 2"},
		{LogicalPath: "/a/p3.jpg", Error: "422: <b>bad</b> page 3"},
	}, o.Chunks[0].Failures, "the first three of four")
	require.Equal(t, []itemFailure{{LogicalPath: "/a/p5.jpg", Error: "timeout"}}, o.Chunks[2].Failures)
	require.Equal(t, "the provider refused the key", *o.Chunks[2].Error)
	require.Empty(t, o.Chunks[1].Failures)

	require.Len(t, o.Limiters, 1, "one limiter for every chunk")
	l := o.Limiters[0]
	require.Equal(t, "ocr:ocr.test", l.Key)
	require.Equal(t, 7.5, l.RPS)
	require.Equal(t, 20.0, l.MaxTokens)
	require.GreaterOrEqual(t, l.Tokens, 3.0)
	require.LessOrEqual(t, l.Tokens, 20.0)
	require.NotNil(t, l.BackoffUntil)
	require.WithinDuration(t, time.Now().Add(time.Hour), *l.BackoffUntil, time.Minute)

	t.Run("LimitPerChunk", func(t *testing.T) {
		o := views(true)[0].Data.(phaseView)
		def := ratelimit.DefaultAdaptive()
		require.Equal(t, []RateLimiterState{
			{Key: "ocr:ocr.test:B:1", Tokens: def.InitialMaxTokens, MaxTokens: def.InitialMaxTokens, RPS: def.InitialRefillRate},
			{Key: "ocr:ocr.test:B:10", Tokens: def.InitialMaxTokens, MaxTokens: def.InitialMaxTokens, RPS: def.InitialRefillRate},
		}, o.Limiters, "the open chunks' buckets, not yet created")
	})

	t.Run("NoChunks", func(t *testing.T) {
		e := New(jobs.Deps{Pool: pool}, Config{}, limitEngine{limit: limit})
		vs, err := e.Views(ctx, "NO-OCR")
		require.NoError(t, err)
		require.Empty(t, vs)
	})
}

// limitEngine is an engine with the OCR engine's limiter keys, for the
// OCR phase's section; it processes nothing.
type limitEngine struct {
	limit    ratelimit.Adaptive
	perChunk bool
}

func (e limitEngine) Name() string     { return "ocr" }
func (e limitEngine) Provider() string { return "ocr.test" }
func (e limitEngine) LimitKey(batchID, chunkID string) string {
	if e.perChunk {
		return "ocr:ocr.test:" + batchID + ":" + chunkID
	}
	return "ocr:ocr.test"
}
func (e limitEngine) Tuning() Tuning                        { return Tuning{Limit: e.limit} }
func (e limitEngine) Process(context.Context, Item) Outcome { return Outcome{} }
