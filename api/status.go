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

// getChunkStatus is GET /status/:batchId/:chunkId: spec 004's chunk status.
func (h *handlers) getChunkStatus(c echo.Context) error {
	st, err := h.svc.ChunkStatus(c.Request().Context(), c.Param("batchId"), c.Param("chunkId"))
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, st)
}
