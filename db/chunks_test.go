package db_test

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/arke-institute/orchestrator/db"
	"github.com/arke-institute/orchestrator/internal/harness/dbtest"
)

// seedChunk inserts batch b and one OCR chunk "0" of n items, the last of
// them skipped from the start.
func seedChunk(t *testing.T, q *db.Queries, b string, n int) {
	t.Helper()
	ctx := context.Background()
	_, err := q.BatchInsert(ctx, db.BatchInsertParams{ID: b, Uploader: "test", QueueMessage: []byte(`{}`)})
	require.NoError(t, err)
	_, err = q.ChunkInsertMany(ctx, []db.ChunkInsertManyParams{{BatchID: b, Phase: "OCR", ChunkID: "0", TotalRefs: int32(n), Skipped: 1}})
	require.NoError(t, err)
	items := make([]db.ChunkItemInsertManyParams, n)
	for i := range items {
		items[i] = db.ChunkItemInsertManyParams{BatchID: b, Phase: "OCR", ChunkID: "0", ItemIndex: int32(i),
			DirectoryPath: "/a", FileID: int64(100 + i), R2Key: fmt.Sprintf("staging/%s/a/%d.jpg.ref.json", b, i), Status: "pending"}
	}
	items[n-1].Status = "skipped"
	_, err = q.ChunkItemInsertMany(ctx, items)
	require.NoError(t, err)
}

// Concurrent claimers of one chunk never get the same item, and together
// they get every pending one.
func TestChunkItemClaimDisjoint(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := dbtest.New(t)
	q := db.New(pool)
	const n = 201
	seedChunk(t, q, "b1", n)

	var mu sync.Mutex
	seen := map[int32]int{}
	var wg sync.WaitGroup
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				got, err := q.ChunkItemClaimPending(ctx, db.ChunkItemClaimPendingParams{BatchID: "b1", Phase: "OCR", ChunkID: "0", MaxItems: 5})
				if err != nil {
					t.Error(err)
					return
				}
				if len(got) == 0 {
					return
				}
				mu.Lock()
				for _, it := range got {
					if it.Status != "processing" {
						t.Errorf("claimed item %d is %s", it.ItemIndex, it.Status)
					}
					seen[it.ItemIndex]++
				}
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	require.Len(t, seen, n-1, "every pending item claimed; the skipped one never")
	for idx, times := range seen {
		require.Equal(t, 1, times, "item %d claimed twice", idx)
	}
}

// Settling moves a processing item once, counts it in its chunk, and a
// settled item is never claimed again; back-pressure and retries put an
// item back to be claimed.
func TestChunkItemSettle(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := dbtest.New(t)
	q := db.New(pool)
	seedChunk(t, q, "b1", 6)
	key := func(i int32) (string, string, string, int32) { return "b1", "OCR", "0", i }
	claim := func(limit int32) []int32 {
		got, err := q.ChunkItemClaimPending(ctx, db.ChunkItemClaimPendingParams{BatchID: "b1", Phase: "OCR", ChunkID: "0", MaxItems: limit})
		require.NoError(t, err)
		var idx []int32
		for _, it := range got {
			idx = append(idx, it.ItemIndex)
		}
		slices.Sort(idx) // RETURNING has no order
		return idx
	}
	open := func() int64 {
		n, err := q.ChunkCountOpen(ctx, db.ChunkCountOpenParams{BatchID: "b1", Phase: "OCR"})
		require.NoError(t, err)
		return n
	}
	require.Equal(t, int64(1), open())

	require.Equal(t, []int32{0, 1, 2, 3}, claim(4))
	result := json.RawMessage(`{"text_length": 5, "ref_r2_key": "staging/b1/a/0.ocr.ref.json", "ref_size": 900}`)
	b, p, c, i := key(0)
	n, err := q.ChunkItemSetDone(ctx, db.ChunkItemSetDoneParams{BatchID: b, Phase: p, ChunkID: c, ItemIndex: i, Result: result})
	require.NoError(t, err)
	require.Equal(t, int64(1), n)
	n, err = q.ChunkItemSetDone(ctx, db.ChunkItemSetDoneParams{BatchID: b, Phase: p, ChunkID: c, ItemIndex: i, Result: result})
	require.NoError(t, err)
	require.Equal(t, int64(0), n, "a done item is not settled again")

	msg := "corrupt image"
	b, p, c, i = key(1)
	n, err = q.ChunkItemSetError(ctx, db.ChunkItemSetErrorParams{BatchID: b, Phase: p, ChunkID: c, ItemIndex: i, Error: &msg, Failure: "permanent"})
	require.NoError(t, err)
	require.Equal(t, int64(1), n)

	b, p, c, i = key(2)
	n, err = q.ChunkItemSetPending(ctx, db.ChunkItemSetPendingParams{BatchID: b, Phase: p, ChunkID: c, ItemIndex: i})
	require.NoError(t, err)
	require.Equal(t, int64(1), n)

	timeout := "timeout"
	b, p, c, i = key(3)
	n, err = q.ChunkItemSetRetry(ctx, db.ChunkItemSetRetryParams{BatchID: b, Phase: p, ChunkID: c, ItemIndex: i, Error: &timeout, Counted: true})
	require.NoError(t, err)
	require.Equal(t, int64(1), n)

	// Items 2 and 3 are back; 0 and 1 never come back.
	require.Equal(t, []int32{2, 3, 4}, claim(10))
	require.Empty(t, claim(10))

	reason := "page has a text layer"
	b, p, c, i = key(4)
	n, err = q.ChunkItemSetSkipped(ctx, db.ChunkItemSetSkippedParams{BatchID: b, Phase: p, ChunkID: c, ItemIndex: i, Reason: &reason})
	require.NoError(t, err)
	require.Equal(t, int64(1), n)
	n, err = q.ChunkItemSetError(ctx, db.ChunkItemSetErrorParams{BatchID: b, Phase: p, ChunkID: c, ItemIndex: i, Error: &msg, Failure: "permanent"})
	require.NoError(t, err)
	require.Equal(t, int64(0), n, "a skipped item is not settled again")

	var retries int32
	require.NoError(t, pool.QueryRow(ctx, `SELECT retry_count FROM chunk_items WHERE batch_id = 'b1' AND item_index = 3`).Scan(&retries))
	require.Equal(t, int32(1), retries)
	var failing bool
	require.NoError(t, pool.QueryRow(ctx, `SELECT failing_since IS NOT NULL FROM chunk_items WHERE batch_id = 'b1' AND item_index = 3`).Scan(&failing))
	require.True(t, failing, "failing since its first retry")
	require.NoError(t, pool.QueryRow(ctx, `SELECT retry_count FROM chunk_items WHERE batch_id = 'b1' AND item_index = 2`).Scan(&retries))
	require.Equal(t, int32(0), retries, "back-pressure uses no retry")

	chunk, err := q.ChunkGet(ctx, db.ChunkGetParams{BatchID: "b1", Phase: "OCR", ChunkID: "0"})
	require.NoError(t, err)
	require.Equal(t, db.ChunkPending, chunk.State)
	require.Equal(t, [4]int32{6, 1, 1, 2}, [4]int32{chunk.TotalRefs, chunk.Completed, chunk.Failed, chunk.Skipped})

	_, err = pool.Exec(ctx, `UPDATE chunks SET state = 'DONE' WHERE batch_id = 'b1'`)
	require.NoError(t, err)
	require.Equal(t, int64(0), open())
}

// A chunk's state moves until it is terminal, stamping its times; items
// are listed in key order page by page.
func TestChunkSetStateAndList(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := dbtest.New(t)
	q := db.New(pool)
	seedChunk(t, q, "b1", 3)
	chunks := []db.ChunkInsertManyParams{{BatchID: "b1", Phase: "OCR", ChunkID: "10", TotalRefs: 1}, {BatchID: "b1", Phase: "OCR", ChunkID: "9", TotalRefs: 1}}
	_, err := q.ChunkInsertMany(ctx, chunks)
	require.NoError(t, err)
	_, err = q.ChunkItemInsertMany(ctx, []db.ChunkItemInsertManyParams{
		{BatchID: "b1", Phase: "OCR", ChunkID: "10", ItemIndex: 0, DirectoryPath: "/z", FileID: 9, R2Key: "k10", Status: "pending"},
		{BatchID: "b1", Phase: "OCR", ChunkID: "9", ItemIndex: 0, DirectoryPath: "/y", FileID: 8, R2Key: "k9", Status: "pending"},
	})
	require.NoError(t, err)

	var got []string
	after, afterIdx := "", int32(-1)
	for {
		page, err := q.ChunkItemListByBatchPhase(ctx, db.ChunkItemListByBatchPhaseParams{BatchID: "b1", Phase: "OCR", AfterChunkID: after, AfterItemIndex: afterIdx, MaxItems: 2})
		require.NoError(t, err)
		if len(page) == 0 {
			break
		}
		for _, it := range page {
			got = append(got, fmt.Sprintf("%s/%d", it.ChunkID, it.ItemIndex))
		}
		last := page[len(page)-1]
		after, afterIdx = last.ChunkID, last.ItemIndex
	}
	require.Equal(t, []string{"0/0", "0/1", "0/2", "10/0", "9/0"}, got)

	set := func(state db.ChunkState, errMsg *string) int64 {
		n, err := q.ChunkSetState(ctx, db.ChunkSetStateParams{BatchID: "b1", Phase: "OCR", ChunkID: "0", State: state, Error: errMsg})
		require.NoError(t, err)
		return n
	}
	require.Equal(t, int64(1), set("FETCHING", nil))
	require.Equal(t, int64(1), set("PROCESSING", nil))
	c, err := q.ChunkGet(ctx, db.ChunkGetParams{BatchID: "b1", Phase: "OCR", ChunkID: "0"})
	require.NoError(t, err)
	require.NotNil(t, c.StartedAt)
	require.Nil(t, c.FinishedAt)
	msg := "too many failed items"
	require.Equal(t, int64(1), set("ERROR", &msg))
	require.Equal(t, int64(0), set("PROCESSING", nil), "a terminal chunk stays terminal")
	c, err = q.ChunkGet(ctx, db.ChunkGetParams{BatchID: "b1", Phase: "OCR", ChunkID: "0"})
	require.NoError(t, err)
	require.Equal(t, db.ChunkError, c.State)
	require.NotNil(t, c.FinishedAt)
	require.Equal(t, &msg, c.Error)
	require.GreaterOrEqual(t, c.ProcessingTimeMs, int64(0))

	open, err := q.ChunkCountOpen(ctx, db.ChunkCountOpenParams{BatchID: "b1", Phase: "OCR"})
	require.NoError(t, err)
	require.Equal(t, int64(2), open)
}
