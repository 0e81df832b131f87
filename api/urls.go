package api

import (
	"net/http"

	"github.com/labstack/echo/v4"
)

// urls is POST /callback/:batchId/:taskId/urls: a running worker asks for
// presigned URLs of its batch's objects, with its task's token as
// `Authorization: Bearer <CALLBACK_TOKEN>`.
func (h *handlers) urls(c echo.Context) error {
	body, err := readBody(c)
	if err != nil {
		return err
	}
	res, err := h.svc.URLs(c.Request().Context(), c.Param("batchId"), c.Param("taskId"), bearerToken(c.Request()), body)
	if err != nil {
		return err
	}
	h.log.Debug("presigned URLs", append(requestAttrs(c), "count", len(res.URLs))...)
	return c.JSON(http.StatusOK, res)
}
