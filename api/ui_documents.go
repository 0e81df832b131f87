package api

import (
	"errors"
	"net/http"
	"net/url"
	"strconv"
	"strings"

	"github.com/labstack/echo/v4"

	"github.com/arke-institute/orchestrator/service"
)

// defaultSearchResults is k when the search box does not say.
const defaultSearchResults = 10

// mountUIDocuments registers the dashboard's document pages on its group.
func (h *handlers) mountUIDocuments(g *echo.Group) {
	g.GET("/documents", h.uiDocumentList)
	g.GET("/documents/search", h.uiDocumentSearch)
	g.GET("/documents/:documentId", h.uiDocument)
	g.POST("/documents/:documentId/retry", h.uiDocumentRetry, sameOrigin)
}

// documentListPage is the data of the document list.
type documentListPage struct {
	Viewer   viewer
	Status   string
	Statuses []string
	Page     service.DocumentPage
	// Next is the query of the next page, "" on the last.
	Next string
}

// uiDocumentList is GET /ui/documents: document versions newest first,
// filtered by ?status=, under the search box.
func (h *handlers) uiDocumentList(c echo.Context) error {
	f := service.DocumentFilter{Status: c.QueryParam("status"), Cursor: c.QueryParam("cursor")}
	page, err := h.svc.DashboardDocuments(c.Request().Context(), f)
	if err != nil {
		return err
	}
	data := documentListPage{Viewer: c.Get(viewerKey).(viewer), Status: f.Status, Statuses: service.DocumentStatuses(), Page: page}
	if page.NextCursor != nil {
		q := url.Values{"cursor": {*page.NextCursor}}
		if f.Status != "" {
			q.Set("status", f.Status)
		}
		data.Next = q.Encode()
	}
	return render(c, http.StatusOK, "documents.html", data)
}

// searchPage is the data of the search page.
type searchPage struct {
	Viewer viewer
	// Query is the search box's text, "" before a search.
	Query   string
	Results []service.SearchResult
}

// uiDocumentSearch is GET /ui/documents/search?q=...&k=...: the results
// of GET /documents/search as a page; without q, the search box alone.
func (h *handlers) uiDocumentSearch(c echo.Context) error {
	data := searchPage{Viewer: c.Get(viewerKey).(viewer), Query: strings.TrimSpace(c.QueryParam("q"))}
	if data.Query == "" {
		return render(c, http.StatusOK, "search.html", data)
	}
	k := defaultSearchResults
	if v := c.QueryParam("k"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil {
			return &service.InputError{Msg: "invalid search: k must be a whole number, got " + strconv.Quote(v)}
		}
		k = n
	}
	res, err := h.svc.SearchDocuments(c.Request().Context(), data.Query, k)
	if err != nil {
		return err
	}
	data.Results = res
	return render(c, http.StatusOK, "search.html", data)
}

// documentPage is the data of the document page.
type documentPage struct {
	Viewer viewer
	Detail service.DocumentDetail
	// Notice is the outcome of the last retry.
	Notice string
}

// documentNotices are what ?done= on the document page may say: fixed
// texts, as the batch page's notices.
var documentNotices = map[string]string{"retry": "Document retried."}

// uiDocument is GET /ui/documents/:documentId.
func (h *handlers) uiDocument(c echo.Context) error {
	return h.renderDocument(c, http.StatusOK, documentNotices[c.QueryParam("done")])
}

// renderDocument renders the document page with a notice.
func (h *handlers) renderDocument(c echo.Context, code int, notice string) error {
	id, err := documentID(c)
	if err != nil {
		return err
	}
	d, err := h.svc.DashboardDocumentDetail(c.Request().Context(), id)
	if err != nil {
		return err
	}
	return render(c, code, "document.html", documentPage{Viewer: c.Get(viewerKey).(viewer), Detail: d, Notice: notice})
}

// uiDocumentRetry is POST /ui/documents/:documentId/retry, the retry
// button of a failed document. It answers as the batch page's buttons do:
// 303 back to the page, or the page itself, 409, when the document has not
// failed.
func (h *handlers) uiDocumentRetry(c echo.Context) error {
	if !c.Get(viewerKey).(viewer).Admin {
		return echo.NewHTTPError(http.StatusForbidden, "only the admin may retry documents")
	}
	id, err := documentID(c)
	if err != nil {
		return err
	}
	h.logAdmin(c, "document_retry")
	_, err = h.svc.RetryDocument(c.Request().Context(), id)
	switch {
	case errors.Is(err, service.ErrConflict):
		return h.renderDocument(c, http.StatusConflict, err.Error())
	case err != nil:
		return err
	}
	return c.Redirect(http.StatusSeeOther, uiPrefix+"/documents/"+strconv.FormatInt(id, 10)+"?done=retry")
}

// lastErrors is the last n of a document's errors, oldest first.
func lastErrors(errs []service.DocumentError, n int) []service.DocumentError {
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
