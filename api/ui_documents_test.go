package api_test

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/arke-institute/orchestrator/db"
	"github.com/arke-institute/orchestrator/docindex"
	"github.com/arke-institute/orchestrator/internal/harness/testenv"
)

// hostileText is a chunk's text that is markup: the pages must show it as
// text.
const hostileText = "The zebra crossed the savanna at dawn. <script>alert('zebra')</script> <img src=x onerror=alert(1)>"

// uiRequest sends a request to the dashboard as who (basic auth), with
// set's headers, not following redirects; it answers the response and its
// body.
func uiRequest(t *testing.T, env *testenv.Env, method, path, user, password string, set func(*http.Request)) (*http.Response, string) {
	t.Helper()
	return send(t, method, env.Server.URL+path, "", func(r *http.Request) {
		r.SetBasicAuth(user, password)
		if set != nil {
			set(r)
		}
	})
}

// resultDocuments are the document ids of a search page's results, in
// page order.
var resultDocuments = regexp.MustCompile(`<li class="result" data-document="(\d+)"`)

// TestDashboardDocuments: documents indexed with the local providers are
// listed with their step, progress, errors and tags, filtered by status
// and paged; a document's page shows its chunks; the search box ranks the
// answering document first; a chunk's markup is shown as text; only the
// admin sees and may use the retry button of a failed document, from the
// dashboard's own pages only.
func TestDashboardDocuments(t *testing.T) {
	t.Parallel()
	env := testenv.New(t, testenv.Options{})
	ids := map[string]int64{}
	docs := map[string]string{"documents/zebra.md": hostileText, "documents/latin1.txt": "caf\xe9", "documents/blank.txt": " \n"}
	for key, text := range corpus {
		docs[key] = text
	}
	for key, text := range docs {
		env.PutObject(t, key, []byte(text))
		code, doc := postDocument(t, env, key)
		require.Equal(t, http.StatusAccepted, code)
		ids[key] = doc.ID
	}
	done := map[string]docindex.Document{}
	for key, id := range ids {
		done[key] = awaitDocument(t, env, id, ended)
	}
	require.Equal(t, db.DocumentFailed, done["documents/latin1.txt"].Status)
	failed := ids["documents/latin1.txt"]
	admin := func(method, path string, set func(*http.Request)) (*http.Response, string) {
		return uiRequest(t, env, method, path, "admin", testenv.AdminToken, set)
	}
	reader := func(method, path string, set func(*http.Request)) (*http.Response, string) {
		return uiRequest(t, env, method, path, "reader", testenv.ReadToken, set)
	}
	sameSite := func(r *http.Request) { r.Header.Set("Origin", env.Server.URL) }

	t.Run("List", func(t *testing.T) {
		resp, body := reader(http.MethodGet, "/ui/documents", nil)
		require.Equal(t, http.StatusOK, resp.StatusCode, body)
		for key, id := range ids {
			require.Contains(t, body, fmt.Sprintf(`data-document="%d" data-status="%s"`, id, done[key].Status), key)
			require.Contains(t, body, `<a class="doc-key" href="/ui/documents/`+strconv.FormatInt(id, 10)+`">`+key+`</a>`)
		}
		require.Contains(t, body, `<span class="phase-name">store</span> <span class="phase-count">`, "a completed document's step")
		require.Contains(t, body, `aria-valuenow="100"`)
		require.Contains(t, body, `<span class="phase-name">download</span> <time class="meta" datetime="`, "an error's step and time")
		require.Contains(t, body, `documents/latin1.txt is not UTF-8 text</span>`)
		for _, tag := range done["documents/bread.md"].DocumentTags {
			require.Contains(t, body, "<li>"+tag+"</li>")
		}
		require.Contains(t, body, `action="/ui/documents/search"`, "the search box")
		// Newest first.
		order := regexp.MustCompile(`<li class="batch document" data-document="(\d+)"`).FindAllStringSubmatch(body, -1)
		require.Len(t, order, len(ids))
		for i := 1; i < len(order); i++ {
			prev, _ := strconv.ParseInt(order[i-1][1], 10, 64)
			cur, _ := strconv.ParseInt(order[i][1], 10, 64)
			require.Greater(t, prev, cur)
		}

		// A document without text is said to have none, not to be searched.
		blank := regexp.MustCompile(fmt.Sprintf(`(?s)data-document="%d".*?</li>`, ids["documents/blank.txt"])).FindString(body)
		require.Equal(t, db.DocumentCompleted, done["documents/blank.txt"].Status)
		require.Contains(t, blank, `<span class="badge s-notext"`)
		require.NotContains(t, blank, "s-current")
		lighthouse := regexp.MustCompile(fmt.Sprintf(`(?s)data-document="%d".*?</li>`, ids["documents/lighthouse.md"])).FindString(body)
		require.Contains(t, lighthouse, `<span class="badge s-current">searched</span>`)
		require.NotContains(t, lighthouse, "s-notext")

		// The batch list links here.
		_, body = reader(http.MethodGet, "/ui", nil)
		require.Contains(t, body, `<a href="/ui/documents" class="nav-documents">Documents</a>`)
	})

	t.Run("FilterAndCursor", func(t *testing.T) {
		_, body := reader(http.MethodGet, "/ui/documents?status=failed", nil)
		require.Equal(t, 1, strings.Count(body, `<li class="batch document"`), body)
		require.Contains(t, body, fmt.Sprintf(`data-document="%d"`, failed))
		require.Contains(t, body, `<option value="failed" selected>`)
		_, body = reader(http.MethodGet, "/ui/documents?status=processing", nil)
		require.Contains(t, body, "No documents processing.")
		// A cursor is the last id of a page: the next starts below it.
		_, body = reader(http.MethodGet, fmt.Sprintf("/ui/documents?cursor=%d", failed), nil)
		for _, id := range ids {
			require.Equal(t, id < failed, strings.Contains(body, fmt.Sprintf(`data-document="%d"`, id)), "document %d", id)
		}
		// A batch's documents, as its page links them.
		_, err := db.New(env.Pool).BatchInsert(context.Background(), db.BatchInsertParams{ID: "01KDOCSBATCH0000000000000", Uploader: "test", QueueMessage: []byte(`{}`)})
		require.NoError(t, err)
		_, err = env.Pool.Exec(context.Background(), `UPDATE documents SET batch_id = '01KDOCSBATCH0000000000000' WHERE id = $1`, ids["documents/bread.md"])
		require.NoError(t, err)
		_, body = reader(http.MethodGet, "/ui/documents?batch=01KDOCSBATCH0000000000000", nil)
		require.Equal(t, 1, strings.Count(body, `<li class="batch document"`), body)
		require.Contains(t, body, fmt.Sprintf(`data-document="%d"`, ids["documents/bread.md"]))
		require.Contains(t, body, `Documents of batch <a class="batch-id" href="/ui/batches/01KDOCSBATCH0000000000000">`)
		require.Contains(t, body, `<input type="hidden" name="batch" value="01KDOCSBATCH0000000000000">`, "the status filter keeps the batch")
		_, body = reader(http.MethodGet, "/ui/batches/01KDOCSBATCH0000000000000", nil)
		require.Contains(t, body, `<a id="batch-documents" href="/ui/documents?batch=01KDOCSBATCH0000000000000">1 document</a>`)
		for _, q := range []string{"status=nope", "cursor=x", "cursor=-3"} {
			resp, body := reader(http.MethodGet, "/ui/documents?"+q, nil)
			require.Equal(t, http.StatusBadRequest, resp.StatusCode, "%s: %s", q, body)
		}
	})

	t.Run("Page", func(t *testing.T) {
		d := done["documents/lighthouse.md"]
		resp, body := reader(http.MethodGet, fmt.Sprintf("/ui/documents/%d", d.ID), nil)
		require.Equal(t, http.StatusOK, resp.StatusCode, body)
		require.Contains(t, body, fmt.Sprintf("<p class=\"meta\">%d chunks.</p>", d.Progress.TotalChunks))
		require.Equal(t, int(d.Progress.TotalChunks), strings.Count(body, `<tr data-chunk="`))
		require.Contains(t, body, `<span class="badge s-stored">stored</span>`)
		require.Contains(t, body, "the version search reads")
		require.Contains(t, body, "The lighthouse keeper climbed the tower")
		for _, tag := range d.DocumentTags {
			require.Contains(t, body, "<li>"+tag+"</li>")
		}
		require.Contains(t, body, `<p class="empty">No error.</p>`)

		_, body = reader(http.MethodGet, fmt.Sprintf("/ui/documents/%d", failed), nil)
		require.Contains(t, body, `documents/latin1.txt is not UTF-8 text</span>`)
		require.Contains(t, body, `<p class="empty">No chunks yet.</p>`)

		resp, _ = reader(http.MethodGet, "/ui/documents/999999", nil)
		require.Equal(t, http.StatusNotFound, resp.StatusCode)
		resp, _ = reader(http.MethodGet, "/ui/documents/x", nil)
		require.Equal(t, http.StatusBadRequest, resp.StatusCode)
	})

	t.Run("Search", func(t *testing.T) {
		for q, key := range map[string]string{
			"who lights the lamp in the tower":         "documents/lighthouse.md",
			"how long should dough rise before baking": "documents/bread.md",
			"where do bees make honey":                 "documents/bees.txt",
		} {
			resp, body := reader(http.MethodGet, "/ui/documents/search?q="+url.QueryEscape(q), nil)
			require.Equal(t, http.StatusOK, resp.StatusCode, body)
			found := resultDocuments.FindAllStringSubmatch(body, -1)
			require.NotEmpty(t, found, q)
			require.Equal(t, strconv.FormatInt(ids[key], 10), found[0][1], "%q: the first result is %s", q, key)
			require.Contains(t, body, `value="`+q+`"`, "the box keeps the query")
		}
		_, body := reader(http.MethodGet, "/ui/documents/search?k=1&q=honey+bees", nil)
		require.Len(t, resultDocuments.FindAllStringSubmatch(body, -1), 1, "k bounds the results")

		resp, body := reader(http.MethodGet, "/ui/documents/search", nil)
		require.Equal(t, http.StatusOK, resp.StatusCode)
		require.Contains(t, body, `<input type="search" id="q" name="q" value=""`)
		require.NotContains(t, body, `class="result"`)
		for _, q := range []string{"q=bees&k=x", "q=bees&k=0", "q=bees&k=1000"} {
			resp, body := reader(http.MethodGet, "/ui/documents/search?"+q, nil)
			require.Equal(t, http.StatusBadRequest, resp.StatusCode, "%s: %s", q, body)
		}
	})

	t.Run("Escaping", func(t *testing.T) {
		zebra := ids["documents/zebra.md"]
		q := `zebra savanna "><b>bold</b>`
		_, body := reader(http.MethodGet, "/ui/documents/search?q="+url.QueryEscape(q), nil)
		found := resultDocuments.FindAllStringSubmatch(body, -1)
		require.NotEmpty(t, found)
		require.Equal(t, strconv.FormatInt(zebra, 10), found[0][1])
		_, page := reader(http.MethodGet, fmt.Sprintf("/ui/documents/%d", zebra), nil)
		for name, b := range map[string]string{"search": body, "document": page} {
			require.Contains(t, b, "&lt;script&gt;alert(&#39;zebra&#39;)&lt;/script&gt;", name)
			require.Contains(t, b, "&lt;img src=x onerror=alert(1)&gt;", name)
			require.NotContains(t, b, "<script>alert", name)
			require.NotContains(t, b, "<img src=x", name)
		}
		require.NotContains(t, body, "<b>bold</b>", "the query is text too")
		require.Contains(t, body, `value="zebra savanna &#34;&gt;&lt;b&gt;bold&lt;/b&gt;"`)
	})

	page := fmt.Sprintf("/ui/documents/%d", failed)
	t.Run("ReaderHasNoRetry", func(t *testing.T) {
		_, body := reader(http.MethodGet, page, nil)
		require.NotContains(t, body, `id="retry"`)
		require.NotContains(t, body, `class="actions"`)
		_, body = admin(http.MethodGet, page, nil)
		require.Contains(t, body, `<form method="post" action="`+page+`/retry"><button type="submit" id="retry">Retry from download</button></form>`)
		_, body = admin(http.MethodGet, fmt.Sprintf("/ui/documents/%d", ids["documents/bees.txt"]), nil)
		require.NotContains(t, body, `id="retry"`, "only a failed document has the button")

		resp, body := reader(http.MethodPost, page+"/retry", sameSite)
		require.Equal(t, http.StatusForbidden, resp.StatusCode, body)
		resp, _ = uiRequest(t, env, http.MethodPost, page+"/retry", "admin", testenv.ReadToken, sameSite)
		require.Equal(t, http.StatusUnauthorized, resp.StatusCode)
	})

	t.Run("CrossSiteRetryRefused", func(t *testing.T) {
		for name, set := range map[string]func(*http.Request){
			"NoOriginNorReferer": nil,
			"OtherOrigin":        func(r *http.Request) { r.Header.Set("Origin", "https://evil.example") },
			"OtherReferer":       func(r *http.Request) { r.Header.Set("Referer", "https://evil.example"+page) },
			"CrossSiteFetch": func(r *http.Request) {
				sameSite(r)
				r.Header.Set("Sec-Fetch-Site", "cross-site")
			},
		} {
			resp, body := admin(http.MethodPost, page+"/retry", set)
			require.Equal(t, http.StatusForbidden, resp.StatusCode, "%s: %s", name, body)
		}
	})

	// After the refusals above: the document has not moved.
	t.Run("Retry", func(t *testing.T) {
		doc := awaitDocument(t, env, failed, ended)
		require.Equal(t, db.DocumentFailed, doc.Status, "refused posts changed nothing")
		require.Len(t, doc.Errors, 1)

		resp, body := admin(http.MethodPost, page+"/retry", func(r *http.Request) {
			r.Header.Set("Referer", env.Server.URL+page)
			r.Header.Set("Sec-Fetch-Site", "same-origin")
		})
		require.Equal(t, http.StatusSeeOther, resp.StatusCode, body)
		require.Equal(t, page+"?done=retry", resp.Header.Get("Location"))
		// The content is still not UTF-8: it fails again, both errors kept.
		awaitDocument(t, env, failed, func(d docindex.Document) bool { return d.Status == "failed" && len(d.Errors) == 2 })
		_, body = admin(http.MethodGet, page+"?done=retry", nil)
		require.Contains(t, body, `<p class="notice" role="status">Document retried.</p>`)
		require.Equal(t, 2, strings.Count(body, `documents/latin1.txt is not UTF-8 text</span>`))

		// A completed document is not retried: the page says why, 409.
		bees := fmt.Sprintf("/ui/documents/%d", ids["documents/bees.txt"])
		resp, body = admin(http.MethodPost, bees+"/retry", sameSite)
		require.Equal(t, http.StatusConflict, resp.StatusCode)
		require.Contains(t, body, `<p class="notice" role="status">conflict: document `)
		require.Contains(t, body, "only a failed document is retried")
		_, body = admin(http.MethodGet, bees+"?done=<b>phish</b>", nil)
		require.NotContains(t, body, "phish", "a link cannot write on the page")
	})
}
