package tagging_test

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/arke-institute/orchestrator/internal/harness/testcorpus"
	"github.com/arke-institute/orchestrator/tagging"
	"github.com/arke-institute/orchestrator/textchunk"
)

// tagDocument tags a document as the pipeline does: chunks in batches of
// five, then the document.
func tagDocument(t *testing.T, tg tagging.Tagger, text string) ([]textchunk.Chunk, [][]string, []string) {
	t.Helper()
	chunks := textchunk.Split(text, textchunk.Options{TargetTokens: 150, OverlapTokens: -1})
	texts := make([]string, len(chunks))
	for i, c := range chunks {
		texts[i] = c.Text
	}
	var chunkTags [][]string
	for start := 0; start < len(texts); start += tagging.DefaultBatchSize {
		tags, err := tg.TagChunks(t.Context(), texts[start:min(start+tagging.DefaultBatchSize, len(texts))], "")
		require.NoError(t, err)
		chunkTags = append(chunkTags, tags...)
	}
	require.Len(t, chunkTags, len(chunks))
	docTags, err := tg.TagDocument(t.Context(), texts, chunkTags, "")
	require.NoError(t, err)
	return chunks, chunkTags, docTags
}

func TestLocalTagsTheCorpus(t *testing.T) {
	t.Parallel()
	// Each document's five best tags hold these.
	want := map[string][]string{
		"aqueducts":  {"aqueducts", "water"},
		"beekeeping": {"honey", "bees"},
		"bicycle":    {"bicycle", "chain", "puncture"},
		"chess":      {"chess", "sicilian defence"},
		"compost":    {"compost", "greens"},
		"jazz":       {"chord", "jazz"},
		"parchment":  {"parchment"},
		"postgres":   {"vacuum", "autovacuum"},
		"solar":      {"panels", "solar"},
		"sourdough":  {"sourdough", "starter"},
		"tea":        {"绿茶", "冲泡"},
		"tidepools":  {"tide"},
		"volcanoes":  {"magma", "eruptions"},
	}
	// A section's tags hold these.
	wantSection := map[string]string{
		"Swarming in spring":   "swarming",
		"Fixing a puncture":    "puncture",
		"Feeding the starter":  "starter",
		"Explosive eruptions":  "explosive",
		"The Sicilian Defence": "sicilian defence",
		"Autovacuum":           "autovacuum",
		"绿茶的冲泡":                "冲泡",
	}
	var l tagging.Local
	require.Equal(t, "local", l.Provider())
	require.Equal(t, tagging.LocalModel, l.Model())
	docs := testcorpus.Docs()
	require.Len(t, want, len(docs))
	for _, d := range docs {
		chunks, chunkTags, docTags := tagDocument(t, l, d.Text)
		t.Logf("%s: %v", d.Name, docTags)
		require.LessOrEqual(t, len(docTags), tagging.MaxDocumentTags)
		require.Equal(t, tagging.Normalize(docTags, tagging.MaxDocumentTags), docTags)
		for _, w := range want[d.Name] {
			require.Contains(t, docTags[:5], w, "%s: %v", d.Name, docTags)
		}
		for i, c := range chunks {
			t.Logf("  %s: %v", c.Heading, chunkTags[i])
			require.NotEmpty(t, chunkTags[i])
			require.LessOrEqual(t, len(chunkTags[i]), tagging.MaxChunkTags)
			for section, tag := range wantSection {
				if strings.HasSuffix(c.Heading, section) {
					require.Contains(t, chunkTags[i], tag, "%s: %v", c.Heading, chunkTags[i])
				}
			}
		}
		_, again, docAgain := tagDocument(t, l, d.Text)
		require.Equal(t, chunkTags, again, "deterministic")
		require.Equal(t, docTags, docAgain, "deterministic")
	}
}

func TestLocalLeavesOutGenericWords(t *testing.T) {
	t.Parallel()
	tags, err := tagging.Local{}.TagChunks(t.Context(), []string{
		"It usually gives results quickly; keeping and making things takes time every day. 2024 12 ab",
		"",
	}, "")
	require.NoError(t, err)
	require.Equal(t, []string{"results"}, tags[0])
	require.Empty(t, tags[1])

	doc, err := tagging.Local{}.TagDocument(t.Context(), nil, [][]string{{"Archives"}, {"archives", "maps"}}, "")
	require.NoError(t, err)
	require.Equal(t, []string{"archives", "maps"}, doc, "chunk tags vote")
}

func TestNormalize(t *testing.T) {
	t.Parallel()
	require.Equal(t,
		[]string{"archives", "c++", "c#", "relative humidity", "bees"},
		tagging.Normalize([]string{" #Archives ", "archives.", "C++", "\"C#\"", "Relative\n  Humidity", "", "--", strings.Repeat("x", 41), "Bees", "more", "tags"}, 5))
	require.Empty(t, tagging.Normalize(nil, 3))
}
