package api

import (
	"fmt"
	"net/http"

	"github.com/labstack/echo/v4"

	"github.com/arke-institute/orchestrator/batches"
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
