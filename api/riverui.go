package api

import (
	"context"
	"net/http"

	"github.com/labstack/echo/v4"
	"riverqueue.com/riverui"
)

// riverUIPrefix is where River UI is mounted.
const riverUIPrefix = "/riverui"

// mountRiverUI serves River UI (jobs, queues, their errors; cancel and retry
// by hand) at /riverui behind the admin credential, on the same River client
// and pool as the workers. Its background services (count caches) run until
// ctx ends. If it cannot be built, the rest of the API still serves and
// /riverui answers 503.
func (h *handlers) mountRiverUI(ctx context.Context, e *echo.Echo, cfg Config) {
	var handler http.Handler
	ui, err := riverui.NewHandler(&riverui.HandlerOpts{
		Endpoints: riverui.NewEndpoints(cfg.River, nil),
		Logger:    h.log,
		Prefix:    riverUIPrefix,
	})
	if err == nil {
		err = ui.Start(ctx)
	}
	if err != nil {
		h.log.Error("River UI is unavailable", "error", err)
		handler = http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
			w.Header().Set(echo.HeaderContentType, echo.MIMEApplicationJSON)
			w.WriteHeader(http.StatusServiceUnavailable)
			_, _ = w.Write([]byte(`{"error": "River UI is unavailable"}`))
		})
	} else {
		handler = ui
	}
	wrapped := echo.WrapHandler(handler)
	admin := h.require(roleAdmin)
	e.Any(riverUIPrefix, wrapped, admin, h.logUnsafe)
	e.Any(riverUIPrefix+"/*", wrapped, admin, h.logUnsafe)
}

// logUnsafe logs River UI's state-changing requests (cancel, retry, delete
// jobs; pause queues) as admin actions, with who made them.
func (h *handlers) logUnsafe(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		if !safeMethod(c.Request().Method) {
			h.logAdmin(c, "riverui")
		}
		return next(c)
	}
}
