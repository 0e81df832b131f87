package api

import (
	"net/http"

	"github.com/labstack/echo/v4"
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
// batch's current phase, or resume a batch in ERROR where it failed.
func (h *handlers) retryBatch(c echo.Context) error {
	h.logAdmin(c, "retry")
	st, err := h.batches.Retry(c.Request().Context(), c.Param("batchId"))
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, st)
}
