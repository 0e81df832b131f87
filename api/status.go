package api

import (
	"net/http"

	"github.com/labstack/echo/v4"

	"github.com/arke-institute/orchestrator/jobs"
)

// getStatus is GET /status/:batchId.
func (h *handlers) getStatus(c echo.Context) error {
	st, err := h.status.Status(c.Request().Context(), c.Param("batchId"))
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, st)
}

// executorRoute serves one of an executor's routes (jobs.Route): its
// path parameters, query and body in, its value out as JSON.
func (h *handlers) executorRoute(r jobs.Route) echo.HandlerFunc {
	return func(c echo.Context) error {
		req := jobs.Request{Params: map[string]string{}, Query: c.QueryParams()}
		if r.Access == jobs.AccessTask {
			req.Token = bearerToken(c.Request())
		}
		for _, name := range c.ParamNames() {
			req.Params[name] = c.Param(name)
		}
		if c.Request().Method != http.MethodGet {
			body, err := readBody(c)
			if err != nil {
				return err
			}
			req.Body = body
		}
		out, err := r.Handle(c.Request().Context(), req)
		if err != nil {
			return err
		}
		return c.JSON(http.StatusOK, out)
	}
}
