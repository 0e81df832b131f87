// Package search finds the chunks of documents closest in meaning to a
// query, by the cosine of their embeddings (issue 18; a later issue moves
// it onto Postgres).
package search

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/arke-institute/orchestrator/db"
	"github.com/arke-institute/orchestrator/embedding"
	"github.com/arke-institute/orchestrator/problem"
)

// Result is a chunk a search found.
type Result struct {
	DocumentID int64    `json:"documentId"`
	R2Key      string   `json:"r2Key"`
	ChunkIndex int32    `json:"chunkIndex"`
	Score      float32  `json:"score"`
	Text       string   `json:"text"`
	Tags       []string `json:"tags"`
	// FirstPage and LastPage are the pages of a PDF the chunk is from;
	// absent for a document without pages.
	FirstPage int32 `json:"firstPage,omitempty"`
	LastPage  int32 `json:"lastPage,omitempty"`
}

// MaxResults bounds k.
const MaxResults = 100

// Search embeds the query with the documents' embedder and ranks
// the chunks of every current document version by cosine similarity, an
// exact scan over an in-memory copy of their vectors kept in step with
// the table.
func (x *Index) Search(ctx context.Context, query string, k int) ([]Result, error) {
	query = strings.TrimSpace(query)
	switch {
	case query == "":
		return nil, &problem.InputError{Msg: "invalid search: q is required"}
	case k < 1 || k > MaxResults:
		return nil, &problem.InputError{Msg: fmt.Sprintf("invalid search: k must be from 1 to %d, got %d", MaxResults, k)}
	case x == nil || x.embedder == nil:
		return nil, errors.New("search has no embedder")
	}
	vecs, err := x.embedder.Embed(ctx, []string{query})
	if err != nil {
		return nil, fmt.Errorf("embedding the query: %w", err)
	}
	if err := x.refresh(ctx, db.New(x.pool)); err != nil {
		return nil, err
	}
	matches, err := x.vectors.Search(vecs[0], k)
	if err != nil {
		return nil, err
	}
	if len(matches) == 0 {
		return []Result{}, nil
	}
	docIDs, idxs := make([]int64, len(matches)), make([]int32, len(matches))
	for i, m := range matches {
		docIDs[i], idxs[i] = chunkKey(m.Index)
	}
	rows, err := db.New(x.pool).DocumentChunksByKeys(ctx, db.DocumentChunksByKeysParams{DocumentIDs: docIDs, ChunkIndexes: idxs})
	if err != nil {
		return nil, err
	}
	type key struct {
		doc int64
		idx int32
	}
	byKey := make(map[key]db.DocumentChunksByKeysRow, len(rows))
	for _, r := range rows {
		byKey[key{r.DocumentID, r.ChunkIndex}] = r
	}
	out := make([]Result, 0, len(matches))
	for i, m := range matches {
		r, ok := byKey[key{docIDs[i], idxs[i]}]
		if !ok {
			continue // replaced since the index was read
		}
		tags := r.Tags
		if tags == nil {
			tags = []string{}
		}
		out = append(out, Result{DocumentID: r.DocumentID, R2Key: r.R2Key, ChunkIndex: r.ChunkIndex, Score: m.Score, Text: r.Text, Tags: tags,
			FirstPage: r.FirstPage, LastPage: r.LastPage})
	}
	return out, nil
}

// chunkBits is how many bits of an index id hold the chunk's index.
const chunkBits = 24

func chunkID(doc int64, idx int32) int64 { return doc<<chunkBits | int64(idx) }

func chunkKey(id int64) (int64, int32) { return id >> chunkBits, int32(id & (1<<chunkBits - 1)) }

// Index searches the chunks of the current documents: it embeds a query
// as the document steps embed chunks, and ranks an in-memory copy of the
// current documents' vectors. Each search first brings the copy in step:
// the current versions are listed (one indexed query), versions that
// stopped being current are dropped and new ones loaded.
type Index struct {
	pool     *pgxpool.Pool
	embedder embedding.Embedder

	mu      sync.Mutex
	vectors *embedding.Index
	chunks  map[int64][]int32 // document id -> its chunk indexes in vectors
}

// New returns an Index whose queries embedder embeds (the documents').
func New(pool *pgxpool.Pool, embedder embedding.Embedder) *Index {
	return &Index{pool: pool, embedder: embedder, vectors: embedding.NewIndex(embedder.Dimensions()), chunks: map[int64][]int32{}}
}

func (x *Index) refresh(ctx context.Context, q *db.Queries) error {
	ids, err := q.DocumentCurrentIDs(ctx)
	if err != nil {
		return err
	}
	x.mu.Lock()
	defer x.mu.Unlock()
	current := make(map[int64]bool, len(ids))
	var added []int64
	for _, id := range ids {
		current[id] = true
		if _, ok := x.chunks[id]; !ok {
			added = append(added, id)
		}
	}
	for doc, idxs := range x.chunks {
		if current[doc] {
			continue
		}
		del := make([]int64, len(idxs))
		for i, idx := range idxs {
			del[i] = chunkID(doc, idx)
		}
		x.vectors.Delete(del...)
		delete(x.chunks, doc)
	}
	if len(added) == 0 {
		return nil
	}
	rows, err := q.DocumentSearchRows(ctx, added)
	if err != nil {
		return err
	}
	for _, id := range added {
		x.chunks[id] = []int32{}
	}
	for _, r := range rows {
		if err := x.vectors.Set(chunkID(r.ID, r.ChunkIndex), r.Embedding); err != nil {
			return fmt.Errorf("document %d chunk %d: %w", r.ID, r.ChunkIndex, err)
		}
		x.chunks[r.ID] = append(x.chunks[r.ID], r.ChunkIndex)
	}
	return nil
}
