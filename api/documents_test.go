package api_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/arke-institute/orchestrator/db"
	"github.com/arke-institute/orchestrator/docindex"
	"github.com/arke-institute/orchestrator/internal/fakes/fakeai"
	"github.com/arke-institute/orchestrator/internal/harness/eventually"
	"github.com/arke-institute/orchestrator/internal/harness/testenv"
	"github.com/arke-institute/orchestrator/search"
	"github.com/arke-institute/orchestrator/textchunk"
)

// corpus are short documents on distinct topics.
var corpus = map[string]string{
	"documents/lighthouse.md": "# Lighthouses\n\nThe lighthouse keeper climbed the tower every evening to light the lamp. " +
		"Its beam warned ships away from the rocks of the harbour entrance.\n\n## Fresnel lens\n\nA Fresnel lens focuses the lamp's light into a beam seen far out at sea.",
	"documents/bread.md": "# Baking bread\n\nKnead the dough with flour, water, salt and yeast, then let it rise. " +
		"Bake the loaf in a hot oven until the crust is brown.\n\nSourdough uses a starter instead of yeast.",
	"documents/bees.txt": "Honey bees live in colonies with a queen, workers and drones. Workers gather nectar " +
		"and pollen from flowers and make honey in the hive's wax combs.",
}

func postDocument(t *testing.T, env *testenv.Env, key string) (int, docindex.Document) {
	t.Helper()
	code, body := env.Do(t, http.MethodPost, "/documents", strings.NewReader(fmt.Sprintf(`{"r2_key": %q}`, key)))
	var doc docindex.Document
	require.NoError(t, json.Unmarshal(body, &doc), string(body))
	return code, doc
}

func awaitDocument(t *testing.T, env *testenv.Env, id int64, done func(docindex.Document) bool) docindex.Document {
	t.Helper()
	var doc docindex.Document
	var body []byte
	if !eventually.Within(60*time.Second, func() bool {
		var code int
		code, body = env.Do(t, http.MethodGet, fmt.Sprintf("/documents/%d", id), nil)
		require.Equal(t, http.StatusOK, code, string(body))
		doc = docindex.Document{}
		require.NoError(t, json.Unmarshal(body, &doc))
		return done(doc)
	}) {
		t.Fatalf("document %d did not reach the awaited state: %s", id, body)
	}
	return doc
}

func ended(d docindex.Document) bool { return d.Status == "completed" || d.Status == "failed" }

// TestDocumentsIndexAndSearch: documents go through every step to
// completed with the local providers, search ranks the chunk that answers
// a query first, an unchanged document is not processed again, changed
// content makes a new version that replaces the old one in search.
func TestDocumentsIndexAndSearch(t *testing.T) {
	t.Parallel()
	env := testenv.New(t, testenv.Options{})
	ids := map[string]int64{}
	for key, text := range corpus {
		env.PutObject(t, key, []byte(text))
		code, doc := postDocument(t, env, key)
		require.Equal(t, http.StatusAccepted, code)
		require.Equal(t, docindex.Queued, doc.Status)
		require.Equal(t, "Document queued for processing", doc.Message)
		ids[key] = doc.ID
	}
	for key, id := range ids {
		doc := awaitDocument(t, env, id, ended)
		require.Equal(t, db.DocumentCompleted, doc.Status, "%s: %+v", key, doc.Errors)
		require.Equal(t, "store", doc.CurrentStep)
		require.Positive(t, doc.Progress.TotalChunks)
		require.Equal(t, doc.Progress.TotalChunks, doc.Progress.ProcessedChunks)
		require.Equal(t, 100, doc.Progress.Percentage)
		require.NotEmpty(t, doc.DocumentTags)
		require.NotNil(t, doc.Timing.CompletedAt)
	}

	search := func(q string) []search.Result {
		code, body := env.Do(t, http.MethodGet, "/documents/search?k=3&q="+strings.ReplaceAll(q, " ", "+"), nil)
		require.Equal(t, http.StatusOK, code, string(body))
		var res struct{ Results []search.Result }
		require.NoError(t, json.Unmarshal(body, &res))
		return res.Results
	}
	for q, want := range map[string]string{
		"who lights the lamp in the tower":         "documents/lighthouse.md",
		"how long should dough rise before baking": "documents/bread.md",
		"where do bees make honey":                 "documents/bees.txt",
	} {
		res := search(q)
		require.NotEmpty(t, res, q)
		require.Equal(t, want, res[0].R2Key, q)
	}

	// Unchanged: the same version answers, 200.
	code, doc := postDocument(t, env, "documents/bees.txt")
	require.Equal(t, http.StatusOK, code)
	require.Equal(t, ids["documents/bees.txt"], doc.ID)
	require.Equal(t, db.DocumentCompleted, doc.Status)

	// Changed: a new version, which replaces the old in search.
	env.PutObject(t, "documents/bees.txt", []byte("Wasps build paper nests and hunt caterpillars in the garden."))
	code, doc = postDocument(t, env, "documents/bees.txt")
	require.Equal(t, http.StatusAccepted, code)
	require.EqualValues(t, 2, doc.Version)
	require.Equal(t, db.DocumentCompleted, awaitDocument(t, env, doc.ID, ended).Status)
	res := search("paper nests of wasps")
	require.Equal(t, "documents/bees.txt", res[0].R2Key)
	require.Equal(t, doc.ID, res[0].DocumentID)
	for _, r := range search("where do bees make honey") {
		require.NotEqual(t, ids["documents/bees.txt"], r.DocumentID, "the old version is no longer searched")
	}
	code, body := env.Do(t, http.MethodGet, "/documents?r2_key=documents/bees.txt", nil)
	require.Equal(t, http.StatusOK, code)
	require.Contains(t, string(body), fmt.Sprintf(`"id":%d`, doc.ID))
}

// TestSearchResultsSayTheirPages: a document made of a PDF's pages
// (textchunk.JoinPages) is found with the pages of the chunk that matched;
// one without pages says none.
func TestSearchResultsSayTheirPages(t *testing.T) {
	t.Parallel()
	env := testenv.New(t, testenv.Options{Settings: map[string]string{"DOCUMENT_CHUNK_TOKENS": "50"}})
	pages := []string{
		"Minutes of the harbour council. Present were the mayor, the clerk and four councillors. " +
			"The clerk read the minutes of the last meeting, which were approved without change.",
		"", // a scanned page with no text layer
		"The council voted to repair the lighthouse lamp and to paint the tower white before winter. " +
			"The keeper asked for a new brass lantern and oil for the long nights.",
	}
	text := textchunk.JoinPages(pages)
	chunks := textchunk.Split(text, textchunk.Options{TargetTokens: 50})
	require.Greater(t, len(chunks), 1, "the pages make several chunks")
	env.PutObject(t, "documents/minutes.txt", []byte(text))
	env.PutObject(t, "documents/plain.txt", []byte("The lighthouse keeper trims the wick of the lamp every evening."))
	for _, key := range []string{"documents/minutes.txt", "documents/plain.txt"} {
		code, doc := postDocument(t, env, key)
		require.Equal(t, http.StatusAccepted, code)
		require.Equal(t, db.DocumentCompleted, awaitDocument(t, env, doc.ID, ended).Status)
	}
	code, body := env.Do(t, http.MethodGet, "/documents/search?k=10&q=council+voted+to+repair+the+lighthouse+lamp", nil)
	require.Equal(t, http.StatusOK, code, string(body))
	var res struct{ Results []search.Result }
	require.NoError(t, json.Unmarshal(body, &res))
	require.NotEmpty(t, res.Results)
	top := res.Results[0]
	require.Equal(t, "documents/minutes.txt", top.R2Key)
	require.EqualValues(t, 3, top.LastPage, "the vote is on page 3")
	sawPlain := false
	for _, r := range res.Results {
		if r.R2Key == "documents/plain.txt" {
			sawPlain = true
			require.Zero(t, r.FirstPage)
			require.NotContains(t, string(body), `"firstPage":0`, "a document without pages says none")
			continue
		}
		c := chunks[r.ChunkIndex]
		require.Equal(t, []int32{int32(c.FirstPage), int32(c.LastPage)}, []int32{r.FirstPage, r.LastPage}, "chunk %d", r.ChunkIndex)
	}
	require.True(t, sawPlain)

	// The dashboard's search says them too.
	resp, page := uiRequest(t, env, http.MethodGet, "/ui/documents/search?q=council+voted+to+repair+the+lighthouse+lamp", "reader", testenv.ReadToken, nil)
	require.Equal(t, http.StatusOK, resp.StatusCode)
	want := fmt.Sprintf("chunk %d, page %d<", top.ChunkIndex, top.LastPage)
	if top.FirstPage < top.LastPage {
		want = fmt.Sprintf("chunk %d, pages %d–%d<", top.ChunkIndex, top.FirstPage, top.LastPage)
	}
	require.Contains(t, page, want)
}

// TestDocumentRefusals: bad keys and bodies are refused naming what is
// wrong; a document that is not UTF-8 fails at once with the reason in its
// errors, and retry refuses a document that has not failed.
func TestDocumentRefusals(t *testing.T) {
	t.Parallel()
	env := testenv.New(t, testenv.Options{})
	for body, want := range map[string]string{
		`{"r2_key": "staging/B/a.md"}`:        `is not under DOCUMENTS_PREFIX \"documents/\"`,
		`{"r2_key": "documents/../etc/x.md"}`: `..`,
		`{"r2_key": "documents/missing.md"}`:  `does not exist`,
		`{}`:                                  `r2_key is required`,
		`[1]`:                                 `must be a JSON object`,
	} {
		code, got := env.Do(t, http.MethodPost, "/documents", strings.NewReader(body))
		require.Equal(t, http.StatusBadRequest, code, "%s: %s", body, got)
		require.Contains(t, string(got), want, body)
	}
	code, _ := env.DoAuth(t, http.MethodPost, "/documents", testenv.ReadToken, strings.NewReader(`{"r2_key": "documents/a.md"}`))
	require.Equal(t, http.StatusUnauthorized, code, "the read token does not index")

	env.PutObject(t, "documents/latin1.txt", []byte("caf\xe9"))
	code, doc := postDocument(t, env, "documents/latin1.txt")
	require.Equal(t, http.StatusAccepted, code)
	doc = awaitDocument(t, env, doc.ID, ended)
	require.Equal(t, db.DocumentFailed, doc.Status)
	require.Len(t, doc.Errors, 1)
	require.Equal(t, "download", doc.Errors[0].Step)
	require.Equal(t, "document s3://"+env.Bucket+"/documents/latin1.txt is not UTF-8 text", doc.Errors[0].Error)

	env.PutObject(t, "documents/ok.md", []byte("# Fine\n\nPlain text."))
	_, ok := postDocument(t, env, "documents/ok.md")
	ok = awaitDocument(t, env, ok.ID, ended)
	code, body := env.Do(t, http.MethodPost, fmt.Sprintf("/documents/%d/retry", ok.ID), nil)
	require.Equal(t, http.StatusConflict, code, string(body))
	require.Contains(t, string(body), "only a failed document is retried")
}

// TestDocumentProviderFaults runs documents against OpenAI-compatible
// providers (a fake over HTTP): transient failures are retried, each in
// the document's errors, and the document completes; a 429 is waited out
// and uses no retry; a refused key fails the document at once; more than
// three transient failures past TRANSIENT_RETRY_WINDOW fail it, and retry
// resumes it at the step that failed; so does a 429 past the window.
func TestDocumentProviderFaults(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	script := map[string][]fakeai.Behavior{} // by the first input's first word: answers in turn
	fake := fakeai.New(t, fakeai.Options{Behave: func(r fakeai.Request) fakeai.Behavior {
		if r.Route == fakeai.Chat && len(r.Messages) > 1 && strings.Contains(r.Messages[1].Content, "garbled") {
			return fakeai.Behavior{Content: "Sure! Lighthouses, harbours."} // never JSON, even when shown its answer
		}
		if r.Route != fakeai.Embeddings || len(r.Inputs) == 0 {
			return fakeai.Behavior{}
		}
		mu.Lock()
		defer mu.Unlock()
		for word, answers := range script {
			if strings.Contains(r.Inputs[0], word) && len(answers) > 0 {
				script[word] = answers[1:]
				return answers[0]
			}
		}
		return fakeai.Behavior{}
	}})
	env := testenv.New(t, testenv.Options{Settings: testenv.RoomyLimits(map[string]string{
		"EMBEDDINGS_API_URL": fake.URL, "EMBEDDINGS_API_KEY": fakeai.DefaultKey,
		"TAGS_API_URL": fake.URL, "TAGS_API_KEY": fakeai.DefaultKey,
		// Past the window at once: the three retries spec 003 grants, no more.
		"TRANSIENT_RETRY_WINDOW": "1",
	})})
	mu.Lock()
	script["flaky"] = []fakeai.Behavior{{Status: http.StatusBadGateway}, {Status: http.StatusServiceUnavailable}}
	script["throttled"] = []fakeai.Behavior{{Status: http.StatusTooManyRequests, RetryAfter: "1"}}
	script["refused"] = []fakeai.Behavior{{Status: http.StatusUnauthorized, Message: "bad key"}}
	script["doomed"] = []fakeai.Behavior{{Status: 500}, {Status: 500}, {Status: 500}, {Status: 500}}
	script["exhausted"] = slices.Repeat([]fakeai.Behavior{{Status: http.StatusTooManyRequests, RetryAfter: "0"}}, 1000)
	mu.Unlock()
	post := func(word string) int64 {
		key := "documents/" + word + ".md"
		env.PutObject(t, key, []byte("# "+word+"\n\nThe "+word+" document talks about lighthouses and harbours."))
		code, doc := postDocument(t, env, key)
		require.Equal(t, http.StatusAccepted, code)
		return doc.ID
	}
	flaky, throttled, refused, doomed, exhausted := post("flaky"), post("throttled"), post("refused"), post("doomed"), post("exhausted")
	garbled := post("garbled")

	// Tags that cannot be read even after a repair prompt fail the tags
	// alone: the document is searchable by its text and vectors.
	doc := awaitDocument(t, env, garbled, ended)
	require.Equal(t, db.DocumentCompleted, doc.Status, "%+v", doc.Errors)
	require.Empty(t, doc.DocumentTags)
	require.Len(t, doc.Errors, 2, "the chunks' tags and the document's")
	for _, e := range doc.Errors {
		require.Equal(t, "tags", e.Step)
		require.Contains(t, e.Error, "malformed answer, also after a repair prompt")
	}
	var untagged, embedded int
	require.NoError(t, env.Pool.QueryRow(t.Context(), `SELECT count(*) FILTER (WHERE tags = '{}'), count(*) FILTER (WHERE embedding IS NOT NULL)
		FROM document_chunks WHERE document_id = $1`, garbled).Scan(&untagged, &embedded))
	require.Equal(t, []int{1, 1}, []int{untagged, embedded})

	doc = awaitDocument(t, env, flaky, ended)
	require.Equal(t, db.DocumentCompleted, doc.Status, "%+v", doc.Errors)
	require.Len(t, doc.Errors, 2, "each transient failure is in the history")
	require.Equal(t, "embeddings", doc.Errors[0].Step)
	require.NotEmpty(t, doc.DocumentTags, "tagged by the provider")

	doc = awaitDocument(t, env, throttled, ended)
	require.Equal(t, db.DocumentCompleted, doc.Status)
	require.Empty(t, doc.Errors, "a 429 is back-pressure, not a failure")

	// A 429 that outlasts TRANSIENT_RETRY_WINDOW ends the step.
	doc = awaitDocument(t, env, exhausted, ended)
	require.Equal(t, db.DocumentFailed, doc.Status)
	require.Len(t, doc.Errors, 1)
	require.Contains(t, doc.Errors[0].Error, "provider quota exhausted for ")
	failure := func(id int64) string {
		var f string
		require.NoError(t, env.Pool.QueryRow(t.Context(), `SELECT coalesce(failure, '') FROM documents WHERE id = $1`, id).Scan(&f))
		return f
	}
	require.Equal(t, "infrastructure", failure(exhausted), "the provider's quota, not the document")

	doc = awaitDocument(t, env, refused, ended)
	require.Equal(t, db.DocumentFailed, doc.Status)
	require.Len(t, doc.Errors, 1, "a refused key is not retried")
	require.Contains(t, doc.Errors[0].Error, "bad key")
	require.Equal(t, "permanent", failure(refused))

	doc = awaitDocument(t, env, doomed, ended)
	require.Equal(t, db.DocumentFailed, doc.Status)
	require.Len(t, doc.Errors, 4, "three retries, then failed")
	require.Contains(t, doc.Errors[3].Error, "gave up after 3 retries in ")
	require.Equal(t, "infrastructure", failure(doomed), "a provider that kept failing")
	require.Equal(t, "embeddings", doc.CurrentStep)

	code, body := env.Do(t, http.MethodPost, fmt.Sprintf("/documents/%d/retry", doomed), nil)
	require.Equal(t, http.StatusOK, code, string(body))
	doc = awaitDocument(t, env, doomed, ended)
	require.Equal(t, db.DocumentCompleted, doc.Status, "resumed at embeddings, the provider healthy again")
	require.Len(t, doc.Errors, 4, "the history is kept")
}

// TestDocumentRolesHaveBucketsOfTheirOwn: the embeddings and tags calls
// of a document draw on one bucket per role and provider host, each with
// its role's settings; PROVIDER_LIMIT_SHARED gives two roles one bucket,
// under the first role's settings.
func TestDocumentRolesHaveBucketsOfTheirOwn(t *testing.T) {
	t.Parallel()
	for name, tc := range map[string]struct {
		shared string
		want   map[string]float64 // bucket name: its initial burst
	}{
		"OwnBuckets": {"", map[string]float64{"embeddings": 30, "tags": 40}},
		"Shared":     {"embeddings,tags", map[string]float64{"embeddings+tags": 30}},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			fake := fakeai.New(t, fakeai.Options{})
			settings := testenv.RoomyLimits(map[string]string{
				"EMBEDDINGS_API_URL": fake.URL, "EMBEDDINGS_API_KEY": fakeai.DefaultKey,
				"TAGS_API_URL": fake.URL, "TAGS_API_KEY": fakeai.DefaultKey,
			})
			settings["EMBEDDINGS_INITIAL_MAX_TOKENS"], settings["TAGS_INITIAL_MAX_TOKENS"] = "30", "40"
			if tc.shared != "" {
				settings["PROVIDER_LIMIT_SHARED"] = tc.shared
			}
			env := testenv.New(t, testenv.Options{Settings: settings})
			const key = "documents/roles.md"
			env.PutObject(t, key, []byte("# Roles\n\nThe harbour master keeps the lighthouse log."))
			code, doc := postDocument(t, env, key)
			require.Equal(t, http.StatusAccepted, code)
			doc = awaitDocument(t, env, doc.ID, ended)
			require.Equal(t, db.DocumentCompleted, doc.Status, "%+v", doc.Errors)

			u, err := url.Parse(fake.URL)
			require.NoError(t, err)
			host := u.Host
			rows, err := env.Pool.Query(context.Background(), `SELECT key, max_tokens FROM rate_limits`)
			require.NoError(t, err)
			got := map[string]float64{}
			for rows.Next() {
				var k string
				var burst float64
				require.NoError(t, rows.Scan(&k, &burst))
				got[k] = burst
			}
			require.NoError(t, rows.Err())
			want := map[string]float64{}
			for bucket, burst := range tc.want {
				want[bucket+":"+host] = burst
			}
			require.Equal(t, want, got)
		})
	}
}
