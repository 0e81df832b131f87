package search_test

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"math"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/arke-institute/orchestrator/db"
	"github.com/arke-institute/orchestrator/embedding"
	"github.com/arke-institute/orchestrator/internal/harness/dbtest"
	"github.com/arke-institute/orchestrator/problem"
	"github.com/arke-institute/orchestrator/search"
	sqlfiles "github.com/arke-institute/orchestrator/sql"
)

// concepts are the meanings conceptEmbedder knows, one dimension each,
// and the words that carry them.
var concepts = [][]string{
	{"sea", "ocean", "ship", "boat", "vessel", "sailor", "mariner", "storm", "harbour", "sail"},
	{"bread", "loaf", "dough", "baker", "oven", "flour", "yeast"},
	{"bee", "bees", "honey", "hive", "wax", "nectar", "pollen"},
	{"court", "judge", "law", "verdict", "trial", "jury"},
}

// conceptEmbedder is an embeddings provider designed for tests of meaning:
// a text's vector counts the words of each concept (dimension i for
// concepts[i]), so texts about one thing in different words are near and
// texts of different things are orthogonal. Other dimensions stay zero.
type conceptEmbedder struct {
	model string
	dims  int
	// fail, when set, is every call's error.
	fail error
}

func (e conceptEmbedder) Embed(ctx context.Context, texts []string) ([][]float32, error) {
	if e.fail != nil {
		return nil, e.fail
	}
	out := make([][]float32, len(texts))
	for i, t := range texts {
		out[i] = conceptVector(t, e.dims)
	}
	return out, nil
}

func (e conceptEmbedder) Dimensions() int  { return e.dims }
func (e conceptEmbedder) Provider() string { return "test" }
func (e conceptEmbedder) Model() string    { return e.model }

// conceptVector is text's vector of dims dimensions (see conceptEmbedder).
func conceptVector(text string, dims int) []float32 {
	v := make([]float32, dims)
	for _, w := range strings.Fields(strings.ToLower(strings.Trim(text, "."))) {
		w = strings.Trim(w, ".,;:!?")
		for i, ws := range concepts {
			for _, c := range ws {
				if w == c {
					v[i]++
				}
			}
		}
	}
	return embedding.Normalize(v)
}

// chunk is a chunk to store: its text and tags.
type chunk struct {
	text string
	tags []string
}

// store stores a completed version of key (of batch, when not "") with
// its chunks as the document steps write them: text and full-text vector
// at download, vectors by e, tags, then current.
func store(t *testing.T, pool *pgxpool.Pool, e embedding.Embedder, key, batch string, chunks ...chunk) int64 {
	t.Helper()
	ctx := context.Background()
	var id int64
	require.NoError(t, pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		q := db.New(tx)
		var b *string
		if batch != "" {
			b = &batch
		}
		doc, err := q.DocumentInsert(ctx, db.DocumentInsertParams{R2Key: key, BatchID: b})
		if err != nil {
			return err
		}
		id = doc.ID
		rows := make([]db.DocumentChunkInsertManyParams, len(chunks))
		texts := make([]string, len(chunks))
		for i, c := range chunks {
			rows[i] = db.DocumentChunkInsertManyParams{DocumentID: id, ChunkIndex: int32(i), Text: c.text, Tokens: 10}
			texts[i] = c.text
		}
		if _, err := q.DocumentChunkInsertMany(ctx, rows); err != nil {
			return err
		}
		if err := q.DocumentChunksSetSearchText(ctx, db.DocumentChunksSetSearchTextParams{DocumentID: id, TextConfig: "simple"}); err != nil {
			return err
		}
		vecs, err := e.Embed(ctx, texts)
		if err != nil {
			return err
		}
		for i, c := range chunks {
			if err := q.DocumentChunkSetEmbedding(ctx, db.DocumentChunkSetEmbeddingParams{DocumentID: id, ChunkIndex: int32(i), Embedding: vecs[i],
				EmbeddingModel: e.Model(), EmbeddingDims: int32(e.Dimensions()), Signature: search.Signature(vecs[i]), Quantised: search.Quantise(vecs[i])}); err != nil {
				return err
			}
			if err := q.DocumentChunkSetTags(ctx, db.DocumentChunkSetTagsParams{DocumentID: id, ChunkIndex: int32(i), Tags: c.tags}); err != nil {
				return err
			}
		}
		if err := q.DocumentUncurrent(ctx, db.DocumentUncurrentParams{R2Key: key, ID: id}); err != nil {
			return err
		}
		if err := q.DocumentChunksStored(ctx, id); err != nil {
			return err
		}
		return q.DocumentComplete(ctx, id)
	}))
	return id
}

var concept = conceptEmbedder{model: "concepts-v1", dims: 16}

// seed stores the corpus the tests search.
func seed(t *testing.T, pool *pgxpool.Pool) map[string]int64 {
	ids := map[string]int64{}
	ids["sea"] = store(t, pool, concept, "documents/log_book.md", "b1",
		chunk{"The mariner steered the vessel through the storm.", []string{"voyage"}},
		chunk{"Flour, yeast and an oven: the baker's loaf.", []string{"food"}})
	ids["bees"] = store(t, pool, concept, "documents/hives.md", "b1",
		chunk{"Honey bees gather nectar and pollen for the hive.", []string{"nature"}})
	ids["court"] = store(t, pool, concept, "reports/trial.md", "b2",
		chunk{"The jury returned its verdict and the judge closed the trial.", []string{"law", "voyage"}})
	ids["bread"] = store(t, pool, concept, "documents/logXbook.md", "",
		chunk{"Knead the dough, let it rise, bake the bread.", []string{"food"}})
	return ids
}

func newIndex(t *testing.T, pool *pgxpool.Pool, e embedding.Embedder, memory bool) *search.Index {
	maxChunks := 0
	if memory {
		maxChunks = 1000
	}
	x := search.New(pool, e, search.Config{MaxIndexChunks: maxChunks})
	if memory {
		require.NoError(t, x.Load(context.Background()))
	}
	return x
}

func keys(a search.Answer) []string {
	var out []string
	for _, r := range a.Results {
		out = append(out, fmt.Sprintf("%s#%d", r.R2Key, r.ChunkIndex))
	}
	return out
}

// TestSearchFindsByMeaning: a query sharing no word with a chunk finds it
// by its vector, whether the candidates come from the in-memory index or
// from the scan in Postgres; a query sharing words finds it by both.
func TestSearchFindsByMeaning(t *testing.T) {
	t.Parallel()
	pool := dbtest.New(t)
	seed(t, pool)
	ctx := context.Background()
	for _, memory := range []bool{false, true} {
		t.Run(map[bool]string{false: "Postgres", true: "Memory"}[memory], func(t *testing.T) {
			x := newIndex(t, pool, concept, memory)
			a, err := x.Search(ctx, search.Query{Text: "a sailor on a boat at sea", K: 2})
			require.NoError(t, err)
			require.Equal(t, search.Hybrid, a.Mode)
			require.Empty(t, a.Notice)
			require.Equal(t, "documents/log_book.md#0", keys(a)[0])
			top := a.Results[0]
			require.False(t, top.TextMatch, "no word in common")
			require.NotNil(t, top.Similarity)
			require.InDelta(t, 1, *top.Similarity, 1e-5)

			a, err = x.Search(ctx, search.Query{Text: "honey hive", K: 10})
			require.NoError(t, err)
			require.Equal(t, "documents/hives.md#0", keys(a)[0])
			require.True(t, a.Results[0].TextMatch)
			require.Greater(t, a.Results[0].Score, a.Results[1].Score, "matched by words and meaning, ahead of the others")
		})
	}
}

// TestSearchFiltersAndPages: batch, key prefix (its LIKE characters taken
// literally) and tags narrow the results, and pages follow each other.
func TestSearchFiltersAndPages(t *testing.T) {
	t.Parallel()
	pool := dbtest.New(t)
	seed(t, pool)
	ctx := context.Background()
	x := newIndex(t, pool, concept, true)
	for _, tc := range []struct {
		name string
		q    search.Query
		want []string
	}{
		{"Batch", search.Query{BatchID: "b1"}, []string{"documents/hives.md#0", "documents/log_book.md#0", "documents/log_book.md#1"}},
		{"Prefix", search.Query{KeyPrefix: "documents/log_"}, []string{"documents/log_book.md#0", "documents/log_book.md#1"}},
		{"Tags", search.Query{Tags: []string{"voyage"}}, []string{"documents/log_book.md#0", "reports/trial.md#0"}},
		{"TwoTags", search.Query{Tags: []string{"voyage", "law"}}, []string{"reports/trial.md#0"}},
		{"All", search.Query{BatchID: "b2", KeyPrefix: "reports/", Tags: []string{"law"}}, []string{"reports/trial.md#0"}},
		{"None", search.Query{BatchID: "b3"}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			q := tc.q
			q.Text, q.K = "bread", 10
			a, err := x.Search(ctx, q)
			require.NoError(t, err)
			got := keys(a)
			require.ElementsMatch(t, tc.want, got)
		})
	}

	all, err := x.Search(ctx, search.Query{Text: "bread from the oven", K: 10})
	require.NoError(t, err)
	require.Len(t, all.Results, 5)
	require.Nil(t, all.NextOffset)
	var paged []string
	q := search.Query{Text: "bread from the oven", K: 2}
	for {
		a, err := x.Search(ctx, q)
		require.NoError(t, err)
		paged = append(paged, keys(a)...)
		if a.NextOffset == nil {
			break
		}
		q.Offset = *a.NextOffset
	}
	require.Equal(t, keys(all), paged)
	require.ElementsMatch(t, []string{"documents/logXbook.md#0", "documents/log_book.md#1"}, keys(all)[:2], "the bread chunks first")
}

// TestSearchKeepsInStep: the in-memory index follows versions made current
// or replaced after it loaded, and searches never return a replaced one.
func TestSearchKeepsInStep(t *testing.T) {
	t.Parallel()
	pool := dbtest.New(t)
	ids := seed(t, pool)
	ctx := context.Background()
	x := newIndex(t, pool, concept, true)

	// A new version of the log book is about bees; a new document about
	// the sea.
	store(t, pool, concept, "documents/log_book.md", "b1", chunk{"Wax and honey from the hive.", nil})
	storm := store(t, pool, concept, "documents/storm.md", "", chunk{"A ship lost its sail in the storm.", nil})
	a, err := x.Search(ctx, search.Query{Text: "sailor boat", K: 10})
	require.NoError(t, err)
	require.Equal(t, storm, a.Results[0].DocumentID, "the new document is found by meaning")
	for _, r := range a.Results {
		require.NotEqual(t, ids["sea"], r.DocumentID, "the replaced version is not searched")
	}
}

// TestSearchUnderAnotherEmbedder: a search whose embedder made no vector
// yet (another model, or the same model at another size) answers from
// full-text alone and says why; one whose embedder fails does likewise.
func TestSearchUnderAnotherEmbedder(t *testing.T) {
	t.Parallel()
	pool := dbtest.New(t)
	seed(t, pool)
	ctx := context.Background()
	for _, tc := range []struct {
		name   string
		e      conceptEmbedder
		notice string
	}{
		{"Model", conceptEmbedder{model: "concepts-v2", dims: 16}, "no chunk has a vector of the embedder concepts-v2 (16 dimensions)"},
		{"Dimensions", conceptEmbedder{model: "concepts-v1", dims: 32}, "no chunk has a vector of the embedder concepts-v1 (32 dimensions)"},
		{"Failing", conceptEmbedder{model: "concepts-v1", dims: 16, fail: errors.New("provider down")}, "the query could not be embedded"},
	} {
		for _, memory := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s/Memory=%v", tc.name, memory), func(t *testing.T) {
				x := newIndex(t, pool, tc.e, memory)
				a, err := x.Search(ctx, search.Query{Text: "verdict", K: 10})
				require.NoError(t, err)
				require.Equal(t, search.TextOnly, a.Mode)
				require.Contains(t, a.Notice, tc.notice)
				require.Equal(t, []string{"reports/trial.md#0"}, keys(a))
				require.Nil(t, a.Results[0].Similarity, "no vector of another embedder is compared")
				require.True(t, a.Results[0].TextMatch)

				a, err = x.Search(ctx, search.Query{Text: "sailor boat", K: 10})
				require.NoError(t, err)
				require.Empty(t, a.Results, "nothing shares a word, and there is no vector to compare")
			})
		}
	}
}

// TestSearchRefusals: bad queries are refused naming what is wrong.
func TestSearchRefusals(t *testing.T) {
	t.Parallel()
	pool := dbtest.New(t)
	x := newIndex(t, pool, concept, false)
	for _, tc := range []struct {
		q    search.Query
		want string
	}{
		{search.Query{Text: "  ", K: 1}, "q is required"},
		{search.Query{Text: "x", K: 0}, "k must be from 1 to 100, got 0"},
		{search.Query{Text: "x", K: 101}, "k must be from 1 to 100, got 101"},
		{search.Query{Text: "x", K: 10, Offset: 95}, "offset must be from 0 to 100 less k"},
		{search.Query{Text: "x", K: 10, Offset: -1}, "offset must be from 0 to 100 less k"},
		{search.Query{Text: "x", K: 10, Tags: make([]string, 21)}, "at most 20 tags, got 21"},
	} {
		_, err := x.Search(context.Background(), tc.q)
		var input *problem.InputError
		require.ErrorAs(t, err, &input, "%+v", tc.q)
		require.Contains(t, err.Error(), tc.want)
	}
	// A query of operators alone is no error.
	a, err := x.Search(context.Background(), search.Query{Text: `" - or`, K: 10})
	require.NoError(t, err)
	require.Empty(t, a.Results)
}

// TestConceptVector checks the test embedder itself.
func TestConceptVector(t *testing.T) {
	t.Parallel()
	v := conceptVector("Sailor, boat.", 4)
	require.InDelta(t, 1, v[0], 1e-6)
	require.InDelta(t, 0, math.Abs(float64(v[1])), 1e-6)
}

// TestReindex: after the embedder and the text search configuration
// change, a search answers from full-text alone until the re-index has
// embedded every chunk of a current version again and parsed its text
// again; then by meaning too, with the in-memory index in step. Chunks of
// replaced versions are left alone.
func TestReindex(t *testing.T) {
	t.Parallel()
	pool := dbtest.New(t)
	ids := seed(t, pool)
	ctx := context.Background()
	store(t, pool, concept, "documents/log_book.md", "b1", chunk{"The mariner steered the ship through the storm.", nil})

	next := conceptEmbedder{model: "concepts-v2", dims: 24}
	x := search.New(pool, next, search.Config{TextConfig: "english", MaxIndexChunks: 1000})
	require.NoError(t, x.Load(ctx))
	before, err := x.Progress(ctx)
	require.NoError(t, err)
	require.Equal(t, search.ReindexProgress{Embedder: "concepts-v2 (24 dimensions)", TextConfig: "english", Chunks: 4, Done: 0}, before)
	a, err := x.Search(ctx, search.Query{Text: "sailor boat", K: 10})
	require.NoError(t, err)
	require.Equal(t, search.TextOnly, a.Mode)

	require.NoError(t, x.Reindex(ctx))
	after, err := x.Progress(ctx)
	require.NoError(t, err)
	require.Equal(t, int64(4), after.Done)
	a, err = x.Search(ctx, search.Query{Text: "sailor boat", K: 10})
	require.NoError(t, err)
	require.Equal(t, search.Hybrid, a.Mode)
	require.Equal(t, "documents/log_book.md#0", keys(a)[0])
	require.NotEqual(t, ids["sea"], a.Results[0].DocumentID, "the current version")
	// english stems: "steering" finds "steered".
	a, err = x.Search(ctx, search.Query{Text: "steering", K: 1})
	require.NoError(t, err)
	require.True(t, a.Results[0].TextMatch)

	var model string
	require.NoError(t, pool.QueryRow(ctx, `SELECT embedding_model FROM document_chunks WHERE document_id = $1 AND chunk_index = 0`, ids["sea"]).Scan(&model))
	require.Equal(t, "concepts-v1", model, "a replaced version keeps its vectors")
	require.NoError(t, x.Reindex(ctx), "nothing left: a second run does nothing")
}

// TestVectorsWrittenWithoutQuantised: chunks whose vectors a binary
// without quantised vectors wrote are still ranked by their vectors (read
// whole), and the migration that added them quantises them as
// search.Quantise does, byte for byte, ties rounded to even.
func TestVectorsWrittenWithoutQuantised(t *testing.T) {
	t.Parallel()
	pool := dbtest.New(t)
	ids := seed(t, pool)
	ctx := context.Background()
	ties := []float32{127, 0.5, 1.5, 2.5, -0.5, -2.5, 0.1, -127, 3, 0, 0, 0, 0, 0, 0, 0}
	_, err := pool.Exec(ctx, `UPDATE document_chunks SET embedding = $1 WHERE document_id = $2 AND chunk_index = 1`, ties, ids["sea"])
	require.NoError(t, err)
	_, err = pool.Exec(ctx, `DELETE FROM chunk_vectors`)
	require.NoError(t, err)

	for _, memory := range []bool{false, true} {
		x := newIndex(t, pool, concept, memory)
		a, err := x.Search(ctx, search.Query{Text: "sailor boat", K: 1})
		require.NoError(t, err)
		require.Equal(t, []string{"documents/log_book.md#0"}, keys(a), "found by meaning, from the vector itself")
		require.NotNil(t, a.Results[0].Similarity)
		require.InDelta(t, 1, *a.Results[0].Similarity, 1e-5, "the exact cosine")
	}

	migration, err := fs.ReadFile(sqlfiles.Migrations, "migrations/00035_chunk_quantised.sql")
	require.NoError(t, err)
	up := string(migration)
	backfill := up[strings.Index(up, "INSERT INTO chunk_vectors"):strings.Index(up, "-- +goose Down")]
	_, err = pool.Exec(ctx, backfill)
	require.NoError(t, err)
	rows, err := pool.Query(ctx, `SELECT c.embedding, v.quantised FROM chunk_vectors v
		JOIN document_chunks c ON c.document_id = v.document_id AND c.chunk_index = v.chunk_index`)
	require.NoError(t, err)
	type pair struct {
		Embedding []float32
		Quantised []byte
	}
	pairs, err := pgx.CollectRows(rows, pgx.RowToStructByPos[pair])
	require.NoError(t, err)
	require.Len(t, pairs, 5, "every chunk seed stored")
	for _, p := range pairs {
		require.Equal(t, search.Quantise(p.Embedding), p.Quantised, "%v", p.Embedding)
	}
}
