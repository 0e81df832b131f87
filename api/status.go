package api

import (
	"net/http"

	"github.com/labstack/echo/v4"
)

// getStatus is GET /status/:batchId.
func (h *handlers) getStatus(c echo.Context) error {
	st, err := h.svc.Status(c.Request().Context(), c.Param("batchId"))
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, st)
}
