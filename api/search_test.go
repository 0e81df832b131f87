package api_test

import (
	"context"
	"encoding/json"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/arke-institute/orchestrator/db"
	"github.com/arke-institute/orchestrator/internal/fakes/fakeai"
	"github.com/arke-institute/orchestrator/internal/harness/eventually"
	"github.com/arke-institute/orchestrator/internal/harness/testenv"
	"github.com/arke-institute/orchestrator/search"
)

// meanings are the concepts meaningVector knows, one dimension each, and
// the words that carry them.
var meanings = [][]string{
	{"sea", "ocean", "ship", "boat", "vessel", "sailor", "mariner", "storm", "sail"},
	{"bread", "loaf", "dough", "baker", "oven", "flour"},
}

// meaningVector is the vector the embeddings provider is made to answer
// for text: dimension i counts the words of meanings[i], so texts about
// one thing in other words are near. The last dimension is a small
// constant: a provider never answers a zero vector.
func meaningVector(text string, dims int) []float64 {
	v := make([]float64, dims)
	v[dims-1] = 0.05
	for _, w := range strings.Fields(strings.ToLower(text)) {
		w = strings.Trim(w, ".,;:!?#")
		for i, ws := range meanings {
			for _, m := range ws {
				if w == m {
					v[i]++
				}
			}
		}
	}
	return v
}

// TestSearchByMeaningThroughTheProvider: with an embeddings provider
// (a fake over HTTP answering vectors designed for the test), a query that
// shares no word with a chunk finds it; the route's filters and pages
// work, and bad parameters are refused.
func TestSearchByMeaningThroughTheProvider(t *testing.T) {
	t.Parallel()
	const dims = 8
	fake := fakeai.New(t, fakeai.Options{Behave: func(r fakeai.Request) fakeai.Behavior {
		if r.Route != fakeai.Embeddings {
			return fakeai.Behavior{}
		}
		data := make([]map[string]any, len(r.Inputs))
		for i, in := range r.Inputs {
			data[i] = map[string]any{"object": "embedding", "index": i, "embedding": meaningVector(in, dims)}
		}
		body, err := json.Marshal(map[string]any{"object": "list", "model": r.Model, "data": data,
			"usage": map[string]int{"prompt_tokens": 1, "total_tokens": 1}})
		if err != nil {
			panic(err)
		}
		return fakeai.Behavior{Body: body}
	}})
	env := testenv.New(t, testenv.Options{Settings: testenv.RoomyLimits(map[string]string{
		"EMBEDDINGS_API_URL": fake.URL, "EMBEDDINGS_API_KEY": fakeai.DefaultKey, "EMBEDDINGS_DIMENSIONS": "8",
	})})
	docs := map[string]string{
		"documents/voyage.md":       "The mariner steered the vessel through the storm.",
		"documents/bakery.md":       "The baker took the loaf from the oven.",
		"documents/notes/bakery.md": "Flour and dough, then the oven.",
	}
	for key, text := range docs {
		env.PutObject(t, key, []byte(text))
		code, doc := postDocument(t, env, key)
		require.Equal(t, http.StatusAccepted, code)
		require.Equal(t, db.DocumentCompleted, awaitDocument(t, env, doc.ID, ended).Status)
	}

	find := func(query string) (searchAnswer, int, string) {
		code, body := env.Do(t, http.MethodGet, "/documents/search?"+query, nil)
		var a searchAnswer
		if code == http.StatusOK {
			require.NoError(t, json.Unmarshal(body, &a), string(body))
		}
		return a, code, string(body)
	}
	a, code, body := find("q=" + url.QueryEscape("a sailor in a boat"))
	require.Equal(t, http.StatusOK, code, body)
	require.Equal(t, search.Hybrid, a.Mode)
	require.Equal(t, "documents/voyage.md", a.Results[0].R2Key)
	require.False(t, a.Results[0].TextMatch, "no word in common")
	require.NotNil(t, a.Results[0].Similarity)
	require.Greater(t, *a.Results[0].Similarity, float32(0.99))

	a, code, body = find("q=bread&prefix=documents/notes/")
	require.Equal(t, http.StatusOK, code, body)
	require.Len(t, a.Results, 1)
	require.Equal(t, "documents/notes/bakery.md", a.Results[0].R2Key)

	a, code, body = find("q=bread&k=2")
	require.Equal(t, http.StatusOK, code, body)
	require.Len(t, a.Results, 2)
	require.NotNil(t, a.NextOffset)
	require.Equal(t, 2, *a.NextOffset)
	next, code, body := find("q=bread&k=2&offset=2")
	require.Equal(t, http.StatusOK, code, body)
	require.Len(t, next.Results, 1)
	require.Nil(t, next.NextOffset)
	require.Contains(t, body, `"query":"bread"`)

	for query, want := range map[string]string{
		"q=bread&offset=x":    "offset must be a whole number",
		"q=bread&offset=99":   "offset must be from 0 to 100 less k",
		"q=bread&k=0":         "k must be from 1 to 100",
		"k=3":                 "q is required",
		"q=bread&tag=a&tag=b": "", // fine: nothing carries both
	} {
		_, code, body := find(query)
		if want == "" {
			require.Equal(t, http.StatusOK, code, body)
			continue
		}
		require.Equal(t, http.StatusBadRequest, code, query)
		require.Contains(t, body, want, query)
	}

	// The dashboard's page says how it searched and pages too.
	resp, page := uiRequest(t, env, http.MethodGet, "/ui/documents/search?q=bread&k=1", "reader", testenv.ReadToken, nil)
	require.Equal(t, http.StatusOK, resp.StatusCode)
	require.Contains(t, page, `id="next" href="?k=1&amp;offset=1&amp;q=bread"`)
}

// searchAnswer is GET /documents/search's answer.
type searchAnswer struct {
	Query string `json:"query"`
	search.Answer
}

// TestReindexRoute: POST /admin/reindex (admin only) embeds again the
// chunks another embedder made, in the background, and GET /admin/reindex
// follows it to the end.
func TestReindexRoute(t *testing.T) {
	t.Parallel()
	env := testenv.New(t, testenv.Options{})
	for key, text := range corpus {
		env.PutObject(t, key, []byte(text))
		code, doc := postDocument(t, env, key)
		require.Equal(t, http.StatusAccepted, code)
		require.Equal(t, db.DocumentCompleted, awaitDocument(t, env, doc.ID, ended).Status)
	}
	// The vectors were made by another embedder, as after EMBEDDINGS_MODEL
	// changed.
	for _, table := range []string{"document_chunks", "chunk_signatures"} {
		_, err := env.Pool.Exec(context.Background(), `UPDATE `+table+` SET embedding_model = 'an-older-model'`)
		require.NoError(t, err)
	}
	a, code, body := searchAs(t, env, "q=who+lights+the+lamp+in+the+tower")
	require.Equal(t, http.StatusOK, code, body)
	require.Equal(t, search.TextOnly, a.Mode)

	code, raw := env.DoAuth(t, http.MethodPost, "/admin/reindex", testenv.ReadToken, nil)
	require.Equal(t, http.StatusForbidden, code, string(raw))
	code, raw = env.DoAuth(t, http.MethodPost, "/admin/reindex", testenv.AdminToken, nil)
	require.Equal(t, http.StatusAccepted, code, string(raw))
	var p search.ReindexProgress
	require.True(t, eventually.Within(30*time.Second, func() bool {
		code, body := env.DoAuth(t, http.MethodGet, "/admin/reindex", testenv.AdminToken, nil)
		require.Equal(t, http.StatusOK, code, string(body))
		p = search.ReindexProgress{}
		require.NoError(t, json.Unmarshal(body, &p))
		require.Empty(t, p.Error)
		return !p.Running && p.Done == p.Chunks
	}), "%+v", p)
	require.Positive(t, p.Chunks)
	require.Equal(t, "simple", p.TextConfig)

	a, code, body = searchAs(t, env, "q=who+lights+the+lamp+in+the+tower")
	require.Equal(t, http.StatusOK, code, body)
	require.Equal(t, search.Hybrid, a.Mode)
	require.Equal(t, "documents/lighthouse.md", a.Results[0].R2Key)
}

// searchAs is GET /documents/search?query with the read token.
func searchAs(t *testing.T, env *testenv.Env, query string) (searchAnswer, int, string) {
	t.Helper()
	code, body := env.Do(t, http.MethodGet, "/documents/search?"+query, nil)
	var a searchAnswer
	if code == http.StatusOK {
		require.NoError(t, json.Unmarshal(body, &a), string(body))
	}
	return a, code, string(body)
}
