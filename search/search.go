// Package search finds the chunks of current documents that answer a
// query, on Postgres (issue 30): full-text candidates from each chunk's
// tsvector, vector candidates from the signatures of the chunks' vectors,
// the union ranked with the cosine of the vectors (quantised, in a table
// of their own) and the full-text rank, fused by reciprocal rank; only a
// page's chunks are read whole. No process keeps the corpus: an in-memory
// index of signatures (64 bytes a chunk at most) gives
// the vector candidates of unfiltered searches once loaded, and a scan of
// the signatures in Postgres those of filtered searches and of searches
// before it is.
package search

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/arke-institute/orchestrator/db"
	"github.com/arke-institute/orchestrator/embedding"
	"github.com/arke-institute/orchestrator/problem"
)

// Result is a chunk a search found.
type Result struct {
	DocumentID int64  `json:"documentId"`
	R2Key      string `json:"r2Key"`
	ChunkIndex int32  `json:"chunkIndex"`
	// Score orders the results: the reciprocal-rank fusion of the chunk's
	// rank by cosine similarity and its rank by full-text match.
	Score float32 `json:"score"`
	// Similarity is the cosine of the chunk's vector and the query's, from
	// the chunk's vector quantised to 8 bits a component (within about
	// 0.001); absent when the chunk has no vector of the search's embedder.
	Similarity *float32 `json:"similarity,omitempty"`
	// TextMatch says the chunk matched the query's words (full-text).
	TextMatch bool     `json:"textMatch"`
	Text      string   `json:"text"`
	Tags      []string `json:"tags"`
	// FirstPage and LastPage are the pages of a PDF the chunk is from;
	// absent for a document without pages.
	FirstPage int32 `json:"firstPage,omitempty"`
	LastPage  int32 `json:"lastPage,omitempty"`
}

// Mode says how a search ranked its results.
type Mode string

// The modes.
const (
	// Hybrid: full-text and vector candidates, ranked with both.
	Hybrid Mode = "hybrid"
	// TextOnly: full-text candidates alone; Answer.Notice says why.
	TextOnly Mode = "text"
)

// Answer is a page of a search's results.
type Answer struct {
	Results []Result `json:"results"`
	Mode    Mode     `json:"mode"`
	// Notice says why the search answered from full-text alone.
	Notice string `json:"notice,omitempty"`
	// NextOffset is the offset of the next page, absent on the last.
	NextOffset *int `json:"nextOffset,omitempty"`
}

// Query is a search: its text, the page asked for and the filters.
type Query struct {
	Text string
	// K is the page's size (1 to MaxResults), Offset how many results
	// come before it; Offset+K is at most MaxDepth.
	K, Offset int
	// BatchID, KeyPrefix and Tags filter the chunks: those of documents
	// the batch indexed, whose keys begin with KeyPrefix, that carry every
	// tag. Empty means no filter.
	BatchID   string
	KeyPrefix string
	Tags      []string
}

func (q Query) filtered() bool { return q.BatchID != "" || q.KeyPrefix != "" || len(q.Tags) > 0 }

// Bounds of a search.
const (
	// MaxResults bounds a page.
	MaxResults = 100
	// MaxDepth bounds how far pages go, and the full-text candidates.
	MaxDepth = 100
	// vectorDepth is how many chunks nearest the query by their
	// signatures are ranked by their vectors: more than the full-text
	// candidates, since a signature only estimates the angle (recall@10
	// 0.78 at 200, 0.65 at 100, for the local embedder's vectors of short
	// queries, TestSignaturesRecall).
	vectorDepth = 200
	// MaxTags bounds the tags a search filters by.
	MaxTags = 20
	// textScan bounds the full-text matches a search ranks: a query of
	// common words ranks the first textScan chunks that match it.
	textScan = 2000
	// fusionK is reciprocal-rank fusion's constant: a result's score is
	// the sum over the rankings it is in of 1 / (fusionK + rank).
	fusionK = 60
)

// Config configures search.
type Config struct {
	// TextConfig is the text search configuration queries are parsed with
	// (SEARCH_TEXT_CONFIG), as the chunks' text was; DefaultTextConfig if
	// empty.
	TextConfig string
	// MaxIndexChunks bounds the in-memory index of signatures
	// (SEARCH_INDEX_MAX_CHUNKS). With more chunks of the embedder, or
	// none allowed (0), vector candidates come from Postgres alone.
	MaxIndexChunks int
	Logger         *slog.Logger
}

// DefaultTextConfig is Config.TextConfig unless set.
const (
	DefaultTextConfig = "simple"
)

// indexState is where an Index's in-memory signatures are.
type indexState int

const (
	indexIdle    indexState = iota // not loaded: the next search starts loading it
	indexLoading                   // loading in the background
	indexReady                     // loaded and kept in step
	indexUnheld                    // more than MaxIndexChunks: never held
)

// Index searches the chunks of current documents. It embeds a query as
// the document steps embed chunks and compares only vectors of its own
// embedder (model and dimensions). It is safe for concurrent use.
type Index struct {
	pool     *pgxpool.Pool
	embedder embedding.Embedder
	cfg      Config

	mu      sync.Mutex
	state   indexState
	mem     *signatures
	reindex reindexState
	// noVectorsUntil is when hasVectors asks Postgres again after it
	// answered that no chunk has a vector of the embedder.
	noVectorsUntil time.Time
}

// New returns an Index whose queries embedder embeds (the documents').
func New(pool *pgxpool.Pool, embedder embedding.Embedder, cfg Config) *Index {
	if cfg.TextConfig == "" {
		cfg.TextConfig = DefaultTextConfig
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	x := &Index{pool: pool, embedder: embedder, cfg: cfg}
	if cfg.MaxIndexChunks <= 0 {
		x.state = indexUnheld
	}
	return x
}

// Search answers a page of q's results, best first.
func (x *Index) Search(ctx context.Context, q Query) (Answer, error) {
	if err := x.check(&q); err != nil {
		return Answer{}, err
	}
	queries := db.New(x.pool)
	model, dims := x.embedder.Model(), x.embedder.Dimensions()
	var batchID *string
	if q.BatchID != "" {
		batchID = &q.BatchID
	}
	pattern := keyPattern(q.KeyPrefix)
	tags := q.Tags
	if tags == nil {
		tags = []string{}
	}

	text, err := queries.DocumentSearchText(ctx, db.DocumentSearchTextParams{TextConfig: x.cfg.TextConfig, Query: q.Text,
		BatchID: batchID, KeyPattern: pattern, Tags: tags, Scan: textScan, Max: MaxDepth})
	if err != nil {
		return Answer{}, fmt.Errorf("full-text search: %w", err)
	}
	answer := Answer{Mode: Hybrid}
	var vector []float32
	var near []int64
	switch vecs, err := x.embedder.Embed(ctx, []string{q.Text}); {
	case ctx.Err() != nil:
		return Answer{}, ctx.Err()
	case err != nil:
		answer.Mode, answer.Notice = TextOnly, "the query could not be embedded, so the results are from full-text search alone: "+err.Error()
	case len(vecs) != 1 || len(vecs[0]) != dims:
		answer.Mode, answer.Notice = TextOnly, fmt.Sprintf("the embedder answered a vector of the wrong size (want %d dimensions), so the results are from full-text search alone", dims)
	default:
		vector = vecs[0]
		if near, err = x.vectorCandidates(ctx, queries, q, vector, batchID, pattern, tags); err != nil {
			return Answer{}, err
		}
		if len(near) == 0 {
			has, err := x.hasVectors(ctx, queries)
			if err != nil {
				return Answer{}, err
			}
			if !has {
				answer.Mode, answer.Notice = TextOnly, fmt.Sprintf("no chunk has a vector of the embedder %s (%d dimensions) yet, so the results are from full-text search alone; "+
					"chunks embedded by another embedder are searched by vector once re-indexed (orchestrator reindex)", model, dims)
			}
		}
	}

	// The union of the candidates, full-text first.
	textRank := make(map[int64]int, len(text))
	var docs []int64
	var idxs []int32
	for i, r := range text {
		key := chunkKey(r.DocumentID, r.ChunkIndex)
		textRank[key] = i + 1
		docs, idxs = append(docs, r.DocumentID), append(idxs, r.ChunkIndex)
	}
	for _, key := range near {
		if _, ok := textRank[key]; !ok {
			doc, idx := splitKey(key)
			docs, idxs = append(docs, doc), append(idxs, idx)
		}
	}
	if len(docs) == 0 {
		answer.Results = []Result{}
		return answer, nil
	}
	rows, err := queries.DocumentSearchVectors(ctx, db.DocumentSearchVectorsParams{EmbeddingModel: model, EmbeddingDims: int32(dims),
		WithVectors: vector != nil, DocumentIDs: docs, ChunkIndexes: idxs})
	if err != nil {
		return Answer{}, fmt.Errorf("reading the candidates' vectors: %w", err)
	}
	ranked, err := rank(rows, textRank, vector)
	if err != nil {
		return Answer{}, err
	}
	if q.Offset >= len(ranked) {
		answer.Results = []Result{}
		return answer, nil
	}
	end := min(q.Offset+q.K, len(ranked))
	if answer.Results, err = x.show(ctx, queries, ranked[q.Offset:end]); err != nil {
		return Answer{}, err
	}
	if end < len(ranked) {
		answer.NextOffset = &end
	}
	return answer, nil
}

// show fills in what a page of results shows of their chunks (key, text,
// tags, pages), read for the page alone.
func (x *Index) show(ctx context.Context, queries *db.Queries, page []Result) ([]Result, error) {
	docs, idxs := make([]int64, len(page)), make([]int32, len(page))
	for i, r := range page {
		docs[i], idxs[i] = r.DocumentID, r.ChunkIndex
	}
	rows, err := queries.DocumentSearchChunks(ctx, db.DocumentSearchChunksParams{DocumentIDs: docs, ChunkIndexes: idxs})
	if err != nil {
		return nil, fmt.Errorf("reading the results' chunks: %w", err)
	}
	byKey := make(map[int64]db.DocumentSearchChunksRow, len(rows))
	for _, r := range rows {
		byKey[chunkKey(r.DocumentID, r.ChunkIndex)] = r
	}
	out := make([]Result, 0, len(page))
	for _, r := range page {
		c, ok := byKey[chunkKey(r.DocumentID, r.ChunkIndex)]
		if !ok {
			continue // deleted since it was ranked
		}
		r.R2Key, r.Text, r.Tags, r.FirstPage, r.LastPage = c.R2Key, c.Text, c.Tags, c.FirstPage, c.LastPage
		if r.Tags == nil {
			r.Tags = []string{}
		}
		out = append(out, r)
	}
	return out, nil
}

// noVectorsFor is how long an Index trusts that no chunk has a vector of
// its embedder: the question reads every signature when none has.
const noVectorsFor = 10 * time.Second

// hasVectors says whether any chunk has a vector of the embedder, for a
// search that found no vector candidate: by the in-memory index when it
// is loaded, else by Postgres, whose "none" is trusted for noVectorsFor.
func (x *Index) hasVectors(ctx context.Context, queries *db.Queries) (bool, error) {
	x.mu.Lock()
	mem, state, none := x.mem, x.state, x.noVectorsUntil
	x.mu.Unlock()
	if state == indexReady {
		return mem.len() > 0, nil
	}
	if time.Now().Before(none) {
		return false, nil
	}
	has, err := queries.DocumentSearchHasSignatures(ctx, db.DocumentSearchHasSignaturesParams{EmbeddingModel: x.embedder.Model(),
		EmbeddingDims: int32(x.embedder.Dimensions())})
	if err != nil {
		return false, fmt.Errorf("looking for vectors of the embedder: %w", err)
	}
	if !has {
		x.mu.Lock()
		x.noVectorsUntil = time.Now().Add(noVectorsFor)
		x.mu.Unlock()
	}
	return has, nil
}

// check validates q and trims its text.
func (x *Index) check(q *Query) error {
	q.Text = strings.TrimSpace(q.Text)
	invalid := func(format string, args ...any) error {
		return &problem.InputError{Msg: "invalid search: " + fmt.Sprintf(format, args...)}
	}
	switch {
	case q.Text == "":
		return invalid("q is required")
	case q.K < 1 || q.K > MaxResults:
		return invalid("k must be from 1 to %d, got %d", MaxResults, q.K)
	case q.Offset < 0 || q.Offset+q.K > MaxDepth:
		return invalid("offset must be from 0 to %d less k (pages go at most %d results deep), got %d", MaxDepth, MaxDepth, q.Offset)
	case len(q.Tags) > MaxTags:
		return invalid("at most %d tags, got %d", MaxTags, len(q.Tags))
	case x == nil || x.embedder == nil:
		return errors.New("search has no embedder")
	}
	return nil
}

// vectorCandidates are the keys of the chunks whose vectors' signatures
// are nearest vector's: from the in-memory index for an unfiltered search
// once it is loaded, else from a scan of the signatures in Postgres, which
// applies the filters first.
func (x *Index) vectorCandidates(ctx context.Context, queries *db.Queries, q Query, vector []float32, batchID *string, pattern string, tags []string) ([]int64, error) {
	if !q.filtered() {
		if mem := x.memory(ctx, queries); mem != nil {
			return mem.nearest(signatureOf(vector), vectorDepth), nil
		}
	}
	rows, err := queries.DocumentSearchSignatureScan(ctx, db.DocumentSearchSignatureScanParams{EmbeddingModel: x.embedder.Model(),
		EmbeddingDims: int32(x.embedder.Dimensions()), BatchID: batchID, KeyPattern: pattern, Tags: tags, Signature: Signature(vector), Max: vectorDepth})
	if err != nil {
		return nil, fmt.Errorf("scanning the signatures: %w", err)
	}
	keys := make([]int64, len(rows))
	for i, r := range rows {
		keys[i] = chunkKey(r.DocumentID, r.ChunkIndex)
	}
	return keys, nil
}

// memory is the in-memory index brought in step, or nil while it is not
// loaded (the first call starts loading it in the background) or cannot
// be held.
func (x *Index) memory(ctx context.Context, queries *db.Queries) *signatures {
	x.mu.Lock()
	state, mem := x.state, x.mem
	if state == indexIdle {
		x.state = indexLoading
		go x.load()
	}
	x.mu.Unlock()
	if state != indexReady {
		return nil
	}
	err := mem.refresh(ctx, queries, x.embedder.Model(), x.cfg.MaxIndexChunks)
	switch {
	case errors.Is(err, errTooLarge):
		x.drop(err)
		return nil
	case err != nil && ctx.Err() == nil:
		// The index as it was still gives candidates; the candidates'
		// read drops those no longer current.
		x.cfg.Logger.Warn("search index refresh failed", "error", err)
	}
	return mem
}

// Load loads the in-memory index now, unless it is loaded or loading.
// Searches load it when first needed; a caller may start it at boot.
func (x *Index) Load(ctx context.Context) error {
	x.mu.Lock()
	if x.state != indexIdle {
		x.mu.Unlock()
		return nil
	}
	x.state = indexLoading
	x.mu.Unlock()
	return x.loadWith(ctx)
}

// loadTimeout bounds a background load.
const loadTimeout = 10 * time.Minute

func (x *Index) load() {
	ctx, cancel := context.WithTimeout(context.Background(), loadTimeout)
	defer cancel()
	if err := x.loadWith(ctx); err != nil && !errors.Is(err, errTooLarge) {
		x.cfg.Logger.Warn("search index load failed; searches scan the signatures in Postgres until a later one loads it", "error", err)
	}
}

// loadWith loads the index; the caller has set the state to loading.
func (x *Index) loadWith(ctx context.Context) error {
	start := time.Now()
	mem := newSignatures(x.embedder.Dimensions())
	err := mem.load(ctx, db.New(x.pool), x.embedder.Model(), x.cfg.MaxIndexChunks)
	if errors.Is(err, errTooLarge) {
		x.drop(err)
		return err
	}
	x.mu.Lock()
	defer x.mu.Unlock()
	if err != nil {
		x.state = indexIdle
		return err
	}
	x.state, x.mem = indexReady, mem
	x.cfg.Logger.Info("search index loaded", "chunks", mem.len(), "model", x.embedder.Model(), "dimensions", x.embedder.Dimensions(),
		"bytes", mem.bytes(), "took_ms", time.Since(start).Milliseconds())
	return nil
}

// drop gives up the in-memory index for good: there are more chunks than
// it may hold.
func (x *Index) drop(err error) {
	x.mu.Lock()
	defer x.mu.Unlock()
	x.state, x.mem = indexUnheld, nil
	x.cfg.Logger.Warn("search index not held; vector candidates come from Postgres", "error", err)
}

// rank orders the candidates that are still current (rows) by
// reciprocal-rank fusion of their rank by cosine similarity to vector
// (when there is one and the row has a vector of the embedder) and their
// rank by full-text match (textRank, from 1; absent when they did not
// match), best first. The results carry their keys and scores, not yet
// what show reads.
func rank(rows []db.DocumentSearchVectorsRow, textRank map[int64]int, vector []float32) ([]Result, error) {
	type scored struct {
		Result
		key int64
		sim float32
		has bool
	}
	norm := embedding.Norm(vector)
	all := make([]scored, len(rows))
	for i, r := range rows {
		s := scored{Result: Result{DocumentID: r.DocumentID, ChunkIndex: r.ChunkIndex}, key: chunkKey(r.DocumentID, r.ChunkIndex)}
		switch {
		case vector == nil:
		case r.Quantised != nil:
			if len(r.Quantised) != len(vector) {
				return nil, fmt.Errorf("document %d chunk %d: a vector of %d dimensions stored as the embedder's %d", r.DocumentID, r.ChunkIndex, len(r.Quantised), len(vector))
			}
			s.sim, s.has = cosineQuantised(vector, norm, r.Quantised), true
		case r.Embedding != nil:
			v, err := decodeVector(r.Embedding)
			if err != nil {
				return nil, fmt.Errorf("document %d chunk %d: %w", r.DocumentID, r.ChunkIndex, err)
			}
			if len(v) != len(vector) {
				return nil, fmt.Errorf("document %d chunk %d: a vector of %d dimensions stored as the embedder's %d", r.DocumentID, r.ChunkIndex, len(v), len(vector))
			}
			s.sim, s.has = embedding.Cosine(vector, v), true
		}
		if s.has {
			sim := s.sim
			s.Similarity = &sim
		}
		all[i] = s
	}
	bySimilarity := slices.Clone(all)
	slices.SortFunc(bySimilarity, func(a, b scored) int {
		switch {
		case a.has != b.has:
			if a.has {
				return -1
			}
			return 1
		case a.sim != b.sim:
			if a.sim > b.sim {
				return -1
			}
			return 1
		}
		return compareKeys(a.key, b.key)
	})
	simRank := make(map[int64]int, len(all))
	for i, s := range bySimilarity {
		if s.has {
			simRank[s.key] = i + 1
		}
	}
	for i := range all {
		s := &all[i]
		var score float64
		if r, ok := simRank[s.key]; ok {
			score += 1 / float64(fusionK+r)
		}
		if r, ok := textRank[s.key]; ok {
			score += 1 / float64(fusionK+r)
			s.TextMatch = true
		}
		s.Score = float32(score)
	}
	slices.SortFunc(all, func(a, b scored) int {
		switch {
		case a.Score != b.Score:
			if a.Score > b.Score {
				return -1
			}
			return 1
		case a.sim != b.sim:
			if a.sim > b.sim {
				return -1
			}
			return 1
		}
		return compareKeys(a.key, b.key)
	})
	out := make([]Result, len(all))
	for i, s := range all {
		out[i] = s.Result
	}
	return out, nil
}

func compareKeys(a, b int64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// keyPattern is the LIKE pattern of the keys beginning with prefix, ""
// for any key.
func keyPattern(prefix string) string {
	if prefix == "" {
		return ""
	}
	return strings.NewReplacer(`\`, `\\`, `%`, `\%`, `_`, `\_`).Replace(prefix) + "%"
}
