package api

import (
	"crypto/sha256"
	"crypto/subtle"
	"net/http"

	"github.com/labstack/echo/v4"
)

// requireAdmin lets a request through only with `Authorization: Bearer
// <ADMIN_TOKEN>`. With no ADMIN_TOKEN configured, admin routes refuse
// everyone rather than admit everyone.
func (h *handlers) requireAdmin(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		if h.adminToken == "" {
			return echo.NewHTTPError(http.StatusUnauthorized, "admin routes are disabled: ADMIN_TOKEN is not set")
		}
		// Compare digests so the comparison takes the same time whatever
		// the length of the presented token.
		want := sha256.Sum256([]byte(h.adminToken))
		got := sha256.Sum256([]byte(bearerToken(c.Request())))
		if subtle.ConstantTimeCompare(want[:], got[:]) != 1 {
			return echo.NewHTTPError(http.StatusUnauthorized, "missing or wrong admin token")
		}
		return next(c)
	}
}

// resetBatch is POST /admin/reset/:batchId.
func (h *handlers) resetBatch(c echo.Context) error {
	st, err := h.svc.Reset(c.Request().Context(), c.Param("batchId"))
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, st)
}
