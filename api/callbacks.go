package api

import (
	"net/http"
	"strings"

	"github.com/labstack/echo/v4"
)

// callback is POST /callback/:batchId/:taskId: a worker's result, with the
// task's token as `Authorization: Bearer <CALLBACK_TOKEN>`.
func (h *handlers) callback(c echo.Context) error {
	body, err := readBody(c)
	if err != nil {
		return err
	}
	res, err := h.svc.Callback(c.Request().Context(), c.Param("batchId"), c.Param("taskId"), bearerToken(c.Request()), body)
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, res)
}

// bearerToken returns the token of an `Authorization: Bearer` header, or "".
func bearerToken(r *http.Request) string {
	scheme, token, ok := strings.Cut(r.Header.Get("Authorization"), " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") {
		return ""
	}
	return strings.TrimSpace(token)
}
