package api

import (
	"encoding/json"
	"errors"
	"net/http"
	"strconv"

	"github.com/arke-institute/orchestrator/problem"
	"github.com/arke-institute/orchestrator/search"
	"github.com/labstack/echo/v4"
)

// documentRequest is the body of POST /documents (spec 003's /process).
type documentRequest struct {
	R2Key *string `json:"r2_key"`
}

// createDocument is POST /documents: index the object at r2_key. It takes
// the ingest credential (token or signature) or the admin token; it
// answers 202 with the new version queued, or 200 with the version that
// is under way or already has the object's content.
func (h *handlers) createDocument(c echo.Context) error {
	body, err := readBody(c)
	if err != nil {
		return err
	}
	if err := h.admitWriter(c, body); err != nil {
		return err
	}
	var req documentRequest
	if err := json.Unmarshal(body, &req); err != nil {
		return &problem.InputError{Msg: "invalid document request: the body must be a JSON object {\"r2_key\": \"...\"}: " + err.Error()}
	}
	if req.R2Key == nil || *req.R2Key == "" {
		return &problem.InputError{Msg: "invalid document request: r2_key is required"}
	}
	doc, created, err := h.documents.Create(c.Request().Context(), *req.R2Key)
	if err != nil {
		return err
	}
	if created {
		return c.JSON(http.StatusAccepted, doc)
	}
	return c.JSON(http.StatusOK, doc)
}

// admitWriter lets in the admin token, or the ingest credential of body.
func (h *handlers) admitWriter(c echo.Context, body []byte) error {
	if who := h.identify(c.Request()); who.role == roleAdmin {
		c.Set(callerKey, who)
		return nil
	}
	return h.checkIntake(c, body)
}

// getDocument is GET /documents/:id, spec 003's status.
func (h *handlers) getDocument(c echo.Context) error {
	id, err := documentID(c)
	if err != nil {
		return err
	}
	doc, err := h.documents.Get(c.Request().Context(), id)
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, doc)
}

// latestDocument is GET /documents?r2_key=...: the key's latest version.
func (h *handlers) latestDocument(c echo.Context) error {
	key := c.QueryParam("r2_key")
	if key == "" {
		return &problem.InputError{Msg: "invalid document query: r2_key is required"}
	}
	doc, err := h.documents.Latest(c.Request().Context(), key)
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, doc)
}

// retryDocument is POST /documents/:id/retry: a failed document resumes
// from the step that failed.
func (h *handlers) retryDocument(c echo.Context) error {
	body, err := readBody(c)
	if err != nil {
		return err
	}
	if err := h.admitWriter(c, body); err != nil {
		return err
	}
	id, err := documentID(c)
	if err != nil {
		return err
	}
	doc, err := h.documents.Retry(c.Request().Context(), id)
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, doc)
}

// searchResults is the answer of GET /documents/search.
type searchResults struct {
	Query string `json:"query"`
	search.Answer
}

// searchDocuments is GET /documents/search?q=...&k=10: a page of the
// chunks that answer q, filtered by batch_id, prefix and tag.
func (h *handlers) searchDocuments(c echo.Context) error {
	q, err := search.QueryOf(c.QueryParams())
	if err != nil {
		return err
	}
	answer, err := h.search.Search(c.Request().Context(), q)
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, searchResults{Query: c.QueryParam("q"), Answer: answer})
}

func documentID(c echo.Context) (int64, error) {
	id, err := strconv.ParseInt(c.Param("documentId"), 10, 64)
	if err != nil || id < 1 {
		return 0, &problem.InputError{Msg: "invalid document id " + strconv.Quote(c.Param("documentId")) + ": a positive whole number"}
	}
	return id, nil
}

// startReindex is POST /admin/reindex: the chunks of current documents
// are embedded again by the configured embedder and their text parsed
// again by SEARCH_TEXT_CONFIG, in the background of this process; it
// answers 202 with the progress. Stopped (a restart, a failure), it
// resumes where it was when asked again.
func (h *handlers) startReindex(c echo.Context) error {
	if h.search == nil {
		return errors.New("search is unavailable: its embedder could not be made (see the log at start)")
	}
	h.logAdmin(c, "reindex")
	h.search.StartReindex(h.ctx)
	p, err := h.search.Progress(c.Request().Context())
	if err != nil {
		return err
	}
	return c.JSON(http.StatusAccepted, p)
}

// reindexProgress is GET /admin/reindex: how far the re-index is.
func (h *handlers) reindexProgress(c echo.Context) error {
	if h.search == nil {
		return errors.New("search is unavailable: its embedder could not be made (see the log at start)")
	}
	p, err := h.search.Progress(c.Request().Context())
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, p)
}
