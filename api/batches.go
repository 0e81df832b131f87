package api

import (
	"net/http"

	"github.com/labstack/echo/v4"

	"github.com/arke-institute/orchestrator/manifest"
)

// createBatch is POST /batches: the queue message of spec 001 as JSON. The
// first submission of a batch_id answers 202; a repeat answers 200 with the
// batch's current status and changes nothing.
func (h *handlers) createBatch(c echo.Context) error {
	body, err := readBody(c)
	if err != nil {
		return err
	}
	msg, err := manifest.ParseQueueMessage(body)
	if err != nil {
		return err
	}
	res, err := h.svc.Create(c.Request().Context(), msg, body)
	if err != nil {
		return err
	}
	code := http.StatusOK
	if res.Created {
		code = http.StatusAccepted
	}
	return c.JSON(code, res)
}
