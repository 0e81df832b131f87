package api

import (
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/arke-institute/orchestrator/manifest"
	"github.com/arke-institute/orchestrator/problem"
	"github.com/arke-institute/orchestrator/status"
)

// createBatch is POST /batches: the queue message of spec 001 as JSON, with
// the ingest credential (checkIntake). The
// first submission of a batch_id answers 202; a repeat answers 200 with the
// batch's current status and changes nothing.
func (h *handlers) createBatch(c echo.Context) error {
	body, err := readBody(c)
	if err != nil {
		return err
	}
	if err := h.checkIntake(c, body); err != nil {
		return err
	}
	msg, err := manifest.ParseQueueMessage(body)
	if err != nil {
		return err
	}
	res, err := h.batches.Create(c.Request().Context(), msg, body)
	if err != nil {
		return err
	}
	code := http.StatusOK
	if res.Created {
		code = http.StatusAccepted
	}
	return c.JSON(code, res)
}

// listBatches is GET /batches: batches newest first, filtered by status,
// uploader and acceptance time (since/until, RFC 3339), a page of limit at a
// time, the next page named by the previous one's cursor.
func (h *handlers) listBatches(c echo.Context) error {
	f := status.BatchFilter{Status: c.QueryParam("status"), Uploader: c.QueryParam("uploader"), Cursor: c.QueryParam("cursor")}
	var problems []string
	for _, p := range []struct {
		name string
		dst  **time.Time
	}{{"since", &f.Since}, {"until", &f.Until}} {
		v := c.QueryParam(p.name)
		if v == "" {
			continue
		}
		t, err := time.Parse(time.RFC3339Nano, v)
		if err != nil {
			problems = append(problems, fmt.Sprintf("%s must be an RFC 3339 time such as 2025-10-29T19:15:30Z, got %q", p.name, v))
			continue
		}
		*p.dst = &t
	}
	limit, err := intParam(c.QueryParam("limit"), "limit")
	if err != nil {
		problems = append(problems, err.Error())
	}
	if len(problems) > 0 {
		return &problem.InputError{Msg: "invalid batch listing: " + strings.Join(problems, "; ")}
	}
	f.Limit = int(min(limit, 1<<20))
	page, err := h.status.List(c.Request().Context(), f)
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, page)
}
