package ui

import (
	"errors"
	"html/template"
	"net/http"
	"strconv"
	"strings"

	"github.com/arke-institute/orchestrator/docindex"
	"github.com/arke-institute/orchestrator/problem"
	"github.com/arke-institute/orchestrator/search"
	"github.com/labstack/echo/v4"
)

// mountUIDocuments registers the dashboard's document pages on its group.
func (d *Dashboard) mountUIDocuments(g *echo.Group) {
	g.GET("/documents", d.uiDocumentList)
	g.GET("/documents/search", d.uiDocumentSearch)
	g.GET("/documents/:documentId", d.uiDocument)
	g.POST("/documents/:documentId/retry", d.uiDocumentRetry, SameOrigin)
}

// documentListPage is the data of the document list.
type documentListPage struct {
	Viewer Viewer
	Status string
	// BatchID is the batch the list is of, "" for every document.
	BatchID  string
	Statuses []string
	Page     DocumentPage
	// Next is the query of the next page, "" on the last (nextPage).
	Next template.URL
}

// uiDocumentList is GET /ui/documents: document versions newest first,
// filtered by ?status= and ?batch=, under the search box.
func (d *Dashboard) uiDocumentList(c echo.Context) error {
	f := DocumentFilter{Status: c.QueryParam("status"), BatchID: c.QueryParam("batch"), Cursor: c.QueryParam("cursor")}
	page, err := d.documentList(c.Request().Context(), f)
	if err != nil {
		return err
	}
	data := documentListPage{Viewer: c.Get(ViewerKey).(Viewer), Status: f.Status, BatchID: f.BatchID, Statuses: DocumentStatuses(), Page: page}
	data.Next = nextPage(page.NextCursor, "status", f.Status, "batch", f.BatchID)
	return render(c, http.StatusOK, "documents.html", data)
}

// searchPage is the data of the search page.
type searchPage struct {
	Viewer Viewer
	// Query is the search box's text, "" before a search.
	Query string
	search.Answer
	// Results are the answer's, each with its similarity as shown.
	Results []searchResult
	// Next is the query of the next page, "" on the last.
	Next template.URL
}

// searchResult is a result as the search page shows it.
type searchResult struct {
	search.Result
	// Similarity is the cosine similarity to three places, "" when the
	// chunk has no vector of the search's embedder.
	Similarity string
}

// uiDocumentSearch is GET /ui/documents/search?q=...&k=...: the results
// of GET /documents/search (with its parameters) as a page; without q,
// the search box alone.
func (d *Dashboard) uiDocumentSearch(c echo.Context) error {
	data := searchPage{Viewer: c.Get(ViewerKey).(Viewer), Query: strings.TrimSpace(c.QueryParam("q"))}
	if data.Query == "" {
		return render(c, http.StatusOK, "search.html", data)
	}
	q, err := search.QueryOf(c.QueryParams())
	if err != nil {
		return err
	}
	answer, err := d.search.Search(c.Request().Context(), q)
	if err != nil {
		return err
	}
	data.Answer = answer
	for _, r := range answer.Results {
		v := searchResult{Result: r}
		if r.Similarity != nil {
			v.Similarity = strconv.FormatFloat(float64(*r.Similarity), 'f', 3, 32)
		}
		data.Results = append(data.Results, v)
	}
	if answer.NextOffset != nil {
		next := c.QueryParams()
		next.Set("offset", strconv.Itoa(*answer.NextOffset))
		data.Next = template.URL("?" + next.Encode())
	}
	return render(c, http.StatusOK, "search.html", data)
}

// documentPage is the data of the document page.
type documentPage struct {
	Viewer Viewer
	Detail DocumentDetail
	// Notice is the outcome of the last retry.
	Notice string
}

// documentNotices are what ?done= on the document page may say: fixed
// texts, as the batch page's notices.
var documentNotices = map[string]string{"retry": "Document retried."}

// uiDocument is GET /ui/documents/:documentId.
func (d *Dashboard) uiDocument(c echo.Context) error {
	return d.renderDocument(c, http.StatusOK, documentNotices[c.QueryParam("done")])
}

// renderDocument renders the document page with a notice.
func (d *Dashboard) renderDocument(c echo.Context, code int, notice string) error {
	id, err := documentID(c)
	if err != nil {
		return err
	}
	detail, err := d.documentDetail(c.Request().Context(), id)
	if err != nil {
		return err
	}
	return render(c, code, "document.html", documentPage{Viewer: c.Get(ViewerKey).(Viewer), Detail: detail, Notice: notice})
}

// uiDocumentRetry is POST /ui/documents/:documentId/retry, the retry
// button of a failed document. It answers as the batch page's buttons do:
// 303 back to the page, or the page itself, 409, when the document has not
// failed.
func (d *Dashboard) uiDocumentRetry(c echo.Context) error {
	if !c.Get(ViewerKey).(Viewer).Admin {
		return echo.NewHTTPError(http.StatusForbidden, "only the admin may retry documents")
	}
	id, err := documentID(c)
	if err != nil {
		return err
	}
	d.logAdmin(c, "document_retry")
	_, err = d.documents.Retry(c.Request().Context(), id)
	switch {
	case errors.Is(err, problem.ErrConflict):
		return d.renderDocument(c, http.StatusConflict, err.Error())
	case err != nil:
		return err
	}
	return c.Redirect(http.StatusSeeOther, uiPrefix+"/documents/"+strconv.FormatInt(id, 10)+"?done=retry")
}

// lastErrors is the last n of a document's errors, oldest first.
func lastErrors(errs []docindex.DocumentError, n int) []docindex.DocumentError {
	if len(errs) > n {
		return errs[len(errs)-n:]
	}
	return errs
}

// excerpt is the start of text, at most n characters, cut between words
// and marked with an ellipsis when cut.
func excerpt(n int, text string) string {
	r := []rune(strings.TrimSpace(text))
	if len(r) <= n {
		return string(r)
	}
	cut := string(r[:n])
	if i := strings.LastIndexAny(cut, " \n\t"); i > n/2 {
		cut = cut[:i]
	}
	return strings.TrimSpace(cut) + "…"
}

// documentID is the :documentId of the request, a positive integer.
func documentID(c echo.Context) (int64, error) {
	id, err := strconv.ParseInt(c.Param("documentId"), 10, 64)
	if err != nil || id < 1 {
		return 0, &problem.InputError{Msg: "invalid document id " + strconv.Quote(c.Param("documentId")) + ": a positive whole number"}
	}
	return id, nil
}
