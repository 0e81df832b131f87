package api

import (
	"crypto/sha256"
	"crypto/subtle"
	"net/http"

	"github.com/labstack/echo/v4"
)

// adminUser is the user name of the admin credential in basic auth (the
// password is ADMIN_TOKEN); browsers, which cannot send a bearer token from
// an address bar, use it for River UI.
const adminUser = "admin"

// adminRealm names the credential in the browser's prompt.
const adminRealm = `Basic realm="orchestrator admin", charset="UTF-8"`

// requireAdmin lets a request through only with the admin credential:
// `Authorization: Bearer <ADMIN_TOKEN>`, or basic auth as admin with
// ADMIN_TOKEN as the password. With no ADMIN_TOKEN configured, admin routes
// refuse everyone rather than admit everyone.
func (h *handlers) requireAdmin(next echo.HandlerFunc) echo.HandlerFunc {
	return h.adminGuard("")(next)
}

// requireAdminBrowser is requireAdmin for pages a browser opens (River UI):
// a refusal carries a basic-auth challenge, so the browser prompts for the
// credential.
func (h *handlers) requireAdminBrowser(next echo.HandlerFunc) echo.HandlerFunc {
	return h.adminGuard(adminRealm)(next)
}

func (h *handlers) adminGuard(challenge string) echo.MiddlewareFunc {
	return func(next echo.HandlerFunc) echo.HandlerFunc {
		return func(c echo.Context) error {
			if h.adminToken == "" {
				return echo.NewHTTPError(http.StatusUnauthorized, "admin routes are disabled: ADMIN_TOKEN is not set")
			}
			if !h.isAdmin(c.Request()) {
				if challenge != "" {
					c.Response().Header().Set(echo.HeaderWWWAuthenticate, challenge)
				}
				return echo.NewHTTPError(http.StatusUnauthorized, "missing or wrong admin credential")
			}
			return next(c)
		}
	}
}

// isAdmin tells whether the request presents the admin credential. Digests
// are compared, in constant time, so the comparison takes the same time
// whatever the length or content of what was presented; the user name and
// the token are both always compared.
func (h *handlers) isAdmin(r *http.Request) bool {
	token, userOK := bearerToken(r), 1
	if token == "" {
		if user, pass, ok := r.BasicAuth(); ok {
			wantUser, gotUser := sha256.Sum256([]byte(adminUser)), sha256.Sum256([]byte(user))
			userOK = subtle.ConstantTimeCompare(wantUser[:], gotUser[:])
			token = pass
		}
	}
	want, got := sha256.Sum256([]byte(h.adminToken)), sha256.Sum256([]byte(token))
	return subtle.ConstantTimeCompare(want[:], got[:])&userOK == 1 && token != ""
}

// resetBatch is POST /admin/reset/:batchId.
func (h *handlers) resetBatch(c echo.Context) error {
	st, err := h.svc.Reset(c.Request().Context(), c.Param("batchId"))
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, st)
}

// retryBatch is POST /admin/retry/:batchId: re-run the failed tasks of the
// batch's current phase, or resume a batch in ERROR where it failed.
func (h *handlers) retryBatch(c echo.Context) error {
	st, err := h.svc.Retry(c.Request().Context(), c.Param("batchId"))
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, st)
}
