package api

import (
	"context"
	"net/http"
	"strings"

	"github.com/arke-institute/orchestrator/api/ui"
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
	e.Any(riverUIPrefix, wrapped, admin, unsafeSameOrigin, h.logUnsafe)
	e.Any(riverUIPrefix+"/*", wrapped, admin, unsafeSameOrigin, h.logUnsafe)
}

// unsafeSameOrigin is River UI's CSRF defence: a request that may change
// something (any method but GET, HEAD and OPTIONS) must come from a page of
// this server (ui.SameOrigin), unless it carries a bearer token, which a
// browser never adds to another site's request on its own; basic auth it
// does, which is how River UI's pages are let in.
func unsafeSameOrigin(next echo.HandlerFunc) echo.HandlerFunc {
	guarded := ui.SameOrigin(next)
	return func(c echo.Context) error {
		r := c.Request()
		switch {
		case r.Method == http.MethodGet || r.Method == http.MethodHead || r.Method == http.MethodOptions:
			return next(c)
		case strings.HasPrefix(r.Header.Get(echo.HeaderAuthorization), "Bearer "):
			return next(c)
		}
		return guarded(c)
	}
}

// logUnsafe logs River UI's state-changing requests (cancel, retry, delete
// jobs; pause queues) as admin actions, with who made them.
func (h *handlers) logUnsafe(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		switch c.Request().Method {
		case http.MethodGet, http.MethodHead, http.MethodOptions:
		default:
			h.logAdmin(c, "riverui")
		}
		return next(c)
	}
}
