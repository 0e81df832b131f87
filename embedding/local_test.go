package embedding_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/arke-institute/orchestrator/embedding"
	"github.com/arke-institute/orchestrator/internal/harness/testcorpus"
	"github.com/arke-institute/orchestrator/textchunk"
)

type corpusChunk struct {
	doc string
	textchunk.Chunk
}

// corpusChunks splits the corpus small enough that each section is a
// chunk of its own.
func corpusChunks(t testing.TB) []corpusChunk {
	t.Helper()
	var out []corpusChunk
	for _, d := range testcorpus.Docs() {
		for _, c := range textchunk.Split(d.Text, textchunk.Options{TargetTokens: 150, OverlapTokens: -1}) {
			out = append(out, corpusChunk{doc: d.Name, Chunk: c})
		}
	}
	require.Greater(t, len(out), 30)
	return out
}

func TestLocalRanksTheAnsweringChunkFirst(t *testing.T) {
	t.Parallel()
	chunks := corpusChunks(t)
	e := embedding.NewLocal(0)
	texts := make([]string, len(chunks))
	for i, c := range chunks {
		// The heading trail says what a section is about when its text
		// does not name it.
		texts[i] = c.Heading + "\n\n" + c.Text
	}
	vectors, err := e.Embed(t.Context(), texts)
	require.NoError(t, err)

	for _, q := range testcorpus.Queries {
		qv, err := e.Embed(t.Context(), []string{q.Text})
		require.NoError(t, err)
		top := embedding.TopK(qv[0], vectors, 3)
		best := chunks[top[0].Index]
		for _, m := range top {
			t.Logf("%q: %.3f %s / %s", q.Text, m.Score, chunks[m.Index].doc, chunks[m.Index].Heading)
		}
		require.Equal(t, q.Doc, best.doc, "query %q", q.Text)
		require.Contains(t, best.Heading+"\n"+best.Text, q.Section, "query %q: the best chunk is not the answer's section", q.Text)
		require.Greater(t, top[0].Score, top[1].Score, "query %q: no tie", q.Text)
	}
}

func TestLocalVectors(t *testing.T) {
	t.Parallel()
	e := embedding.NewLocal(256)
	require.Equal(t, 256, e.Dimensions())
	require.Equal(t, "local", e.Provider())
	require.Equal(t, embedding.LocalModel, e.Model())

	vs, err := e.Embed(t.Context(), []string{"The archive's records", "the ARCHIVE records!", "", "Records of the archive", "honey bees"})
	require.NoError(t, err)
	require.Len(t, vs, 5)
	for _, v := range vs {
		require.Len(t, v, 256)
	}
	require.Equal(t, vs[0], vs[1], "case, punctuation and stopwords do not matter")
	require.InDelta(t, 1, embedding.Norm(vs[0]), 1e-5)
	require.Zero(t, embedding.Norm(vs[2]), "no words, zero vector")
	require.Greater(t, embedding.Cosine(vs[0], vs[3]), float32(0.6), "same words, other order")
	require.Less(t, embedding.Cosine(vs[0], vs[3]), float32(0.999), "word pairs count")
	require.Less(t, embedding.Cosine(vs[0], vs[4]), float32(0.2))
	require.Greater(t, embedding.Cosine(e.Vector("archives"), e.Vector("archive")), float32(0.3), "forms of a word share trigrams")

	again, err := embedding.NewLocal(256).Embed(t.Context(), []string{"The archive's records"})
	require.NoError(t, err)
	require.Equal(t, vs[0], again[0], "deterministic")

	none, err := e.Embed(t.Context(), nil)
	require.NoError(t, err)
	require.Empty(t, none)
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	_, err = e.Embed(ctx, []string{"text"})
	require.ErrorIs(t, err, context.Canceled)
}
