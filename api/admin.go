package api

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"

	"github.com/labstack/echo/v4"

	"github.com/arke-institute/orchestrator/batches"
	"github.com/arke-institute/orchestrator/db"
	"github.com/arke-institute/orchestrator/pause"
	"github.com/arke-institute/orchestrator/problem"
)

// resetBatch is POST /admin/reset/:batchId.
func (h *handlers) resetBatch(c echo.Context) error {
	h.logAdmin(c, "reset")
	st, err := h.batches.Reset(c.Request().Context(), c.Param("batchId"))
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, st)
}

// retryBatch is POST /admin/retry/:batchId: re-run the failed tasks of the
// batch's current phase, or resume a batch in ERROR where it failed;
// ?mode=infrastructure re-runs only the work infrastructure failed.
func (h *handlers) retryBatch(c echo.Context) error {
	h.logAdmin(c, "retry")
	mode := c.QueryParam("mode")
	if mode != "" && mode != "all" && mode != batches.RetryInfrastructure {
		return &problem.InputError{Msg: fmt.Sprintf("mode must be all or %s, got %q", batches.RetryInfrastructure, mode)}
	}
	st, err := h.batches.Retry(c.Request().Context(), c.Param("batchId"), mode == batches.RetryInfrastructure)
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, st)
}

// pauseRequest is the body of POST /admin/pause and /admin/resume: a
// batch_id, a phase, or neither (the whole fleet); and the pause's reason.
type pauseRequest struct {
	pause.Target
	Reason string `json:"reason"`
}

// readPauseRequest reads a pause or resume request; an empty body is the
// whole fleet.
func readPauseRequest(c echo.Context) (pauseRequest, error) {
	var req pauseRequest
	body, err := readBody(c)
	if err != nil || len(bytes.TrimSpace(body)) == 0 {
		return req, err
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&req); err != nil {
		return req, &problem.InputError{Msg: `invalid pause request: the body must be a JSON object {"batch_id": "...", "phase": "...", "reason": "..."}, each optional: ` + err.Error()}
	}
	return req, nil
}

// pause is POST /admin/pause: no launches, leases, provider calls or
// document steps for the batch, the phase or (neither named) everything,
// until resumed.
func (h *handlers) pause(c echo.Context) error {
	req, err := readPauseRequest(c)
	if err != nil {
		return err
	}
	h.logAdmin(c, "pause")
	p, err := h.pauses.Pause(c.Request().Context(), req.Target, req.Reason)
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, p)
}

// resume is POST /admin/resume: lifts a pause of POST /admin/pause.
func (h *handlers) resume(c echo.Context) error {
	req, err := readPauseRequest(c)
	if err != nil {
		return err
	}
	h.logAdmin(c, "resume")
	r, err := h.pauses.Resume(c.Request().Context(), req.Target)
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, r)
}

// pauseList is the answer of GET /admin/pauses.
type pauseList struct {
	Pauses []pause.Pause `json:"pauses"`
}

// listPauses is GET /admin/pauses: the pauses in force, oldest first.
func (h *handlers) listPauses(c echo.Context) error {
	ps, err := pause.List(c.Request().Context(), db.New(h.pool))
	if err != nil {
		return err
	}
	if ps == nil {
		ps = []pause.Pause{}
	}
	return c.JSON(http.StatusOK, pauseList{Pauses: ps})
}
