package api

import (
	"mime"
	"net/http"
	"strings"

	"github.com/labstack/echo/v4"

	"github.com/arke-institute/orchestrator/api/ui"
)

// Cross-site request forgery: a browser adds the basic-auth credential it
// was given for the dashboard to any site's request to this server, an
// auto-submitted form included. It never adds a bearer token or an
// X-Signature on its own, and it cannot send a JSON content type to another
// site without a CORS preflight, which this server never grants.

// safeMethod is a method that changes nothing.
func safeMethod(m string) bool {
	return m == http.MethodGet || m == http.MethodHead || m == http.MethodOptions
}

// sameSiteWrites refuses a state-changing request that carries a browser
// credential (basic auth) unless it comes from a page of this server
// (ui.SameOrigin). Programs send their token as a bearer token, which is
// let through.
func sameSiteWrites(next echo.HandlerFunc) echo.HandlerFunc {
	guarded := ui.SameOrigin(next)
	return func(c echo.Context) error {
		r := c.Request()
		if safeMethod(r.Method) || !hasBasicAuth(r) {
			return next(c)
		}
		return guarded(c)
	}
}

// hasBasicAuth tells whether r carries a basic-auth credential.
func hasBasicAuth(r *http.Request) bool {
	scheme, _, _ := strings.Cut(r.Header.Get(echo.HeaderAuthorization), " ")
	return strings.EqualFold(scheme, "Basic")
}

// errNotJSON refuses a body that is not declared JSON.
var errNotJSON = echo.NewHTTPError(http.StatusUnsupportedMediaType,
	"the body must be JSON, sent with Content-Type: application/json")

// requireJSON admits a request to a JSON route only if its body, when it
// has one, is declared application/json (or a +json type): a form of
// another site (text/plain, form-encoded) is refused before it is read.
func requireJSON(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		r := c.Request()
		ct := r.Header.Get(echo.HeaderContentType)
		if ct == echo.MIMEApplicationJSON || r.ContentLength == 0 && ct == "" {
			return next(c) // what every worker sends: no parse on the callback path
		}
		media, _, err := mime.ParseMediaType(ct)
		if err != nil || (media != echo.MIMEApplicationJSON && !strings.HasSuffix(media, "+json")) {
			return errNotJSON
		}
		return next(c)
	}
}
