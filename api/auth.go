package api

import (
	"crypto/sha256"
	"crypto/subtle"
	"net/http"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/arke-institute/orchestrator/api/ui"
	"github.com/arke-institute/orchestrator/intakesig"
)

// Who may do what (docs/security.md):
//   - the admin token (ADMIN_TOKEN): the admin routes, River UI, the
//     dashboard with its controls, the document writes and every read;
//   - the read token (READ_TOKEN): status, listings, events, streams,
//     documents and their search, the OpenAPI document and the dashboard
//     without its controls;
//   - the ingest token (INGEST_TOKEN) or a signature keyed by
//     INGEST_SIGNING_SECRET: intake (POST /batches) and the document
//     writes (POST /documents, POST /documents/:id/retry), nothing else;
//   - a task's callback token: that task's callback and its upload URLs.
//
// Programs send `Authorization: Bearer <token>`; browsers log in with basic
// auth as user "admin" or "reader", the token as the password. Only
// /healthz is open, and /status/:batchId with STATUS_PUBLIC=true.

// Credentials are the tokens the API accepts; an empty one opens nothing.
type Credentials struct {
	AdminToken string
	ReadToken  string
	// IngestToken and IngestSigningSecret each open intake.
	IngestToken         string
	IngestSigningSecret string
	// StatusPublic opens GET /status/:batchId and its chunk status to
	// everyone (spec 000's behaviour).
	StatusPublic bool
}

// role is what a caller may do; a higher role may do what a lower may.
type role int

const (
	roleNone role = iota
	roleReader
	roleAdmin
)

// The basic-auth user names of the two browser credentials; they also name
// the caller in the log of admin actions.
const (
	adminUser  = "admin"
	readerUser = "reader"
)

// realm names the credential in the browser's prompt. One realm for both
// users, so that the credential a browser gave for the dashboard is sent
// again, unprompted, for the dashboard's event stream.
const realm = `Basic realm="orchestrator", charset="UTF-8"`

// caller is who presented a credential.
type caller struct {
	role role
	// name is the credential's name ("admin", "reader"), "" for none.
	name string
}

// callerKey is where the guards leave the caller in the context.
const callerKey = "auth.caller"

// identify tells who presented which credential. Every comparison is of
// digests in constant time, and all of them are always made, so the time
// taken says nothing of what was presented.
func (h *handlers) identify(r *http.Request) caller {
	token, user := bearerToken(r), ""
	if token == "" {
		if u, p, ok := r.BasicAuth(); ok {
			user, token = u, p
		}
	}
	if token == "" {
		return caller{}
	}
	isAdmin := equalSecret(h.creds.AdminToken, token) & equalSecret(adminUser, orDefault(user, adminUser))
	isReader := equalSecret(h.creds.ReadToken, token) & equalSecret(readerUser, orDefault(user, readerUser))
	switch {
	case isAdmin == 1:
		return caller{roleAdmin, adminUser}
	case isReader == 1:
		return caller{roleReader, readerUser}
	}
	return caller{}
}

// orDefault is s, or def when s is empty (a bearer token names no user).
func orDefault(s, def string) string {
	if s == "" {
		return def
	}
	return s
}

// equalSecret is 1 when got is want and want is set, in constant time.
func equalSecret(want, got string) int {
	if want == "" {
		return 0
	}
	a, b := sha256.Sum256([]byte(want)), sha256.Sum256([]byte(got))
	return subtle.ConstantTimeCompare(a[:], b[:])
}

// require admits callers of at least role least. A refusal carries a
// basic-auth challenge, so that a browser prompts (or resends the
// credential it was given for the dashboard).
func (h *handlers) require(least role) echo.MiddlewareFunc {
	return func(next echo.HandlerFunc) echo.HandlerFunc {
		return func(c echo.Context) error {
			if err := h.admit(c, least); err != nil {
				return err
			}
			return next(c)
		}
	}
}

// admit checks the request's caller against least and keeps the caller in
// the context.
func (h *handlers) admit(c echo.Context, least role) error {
	who := h.identify(c.Request())
	if who.role >= least {
		c.Set(callerKey, who)
		return nil
	}
	c.Response().Header().Set(echo.HeaderWWWAuthenticate, realm)
	switch {
	case least == roleAdmin && h.creds.AdminToken == "":
		return echo.NewHTTPError(http.StatusUnauthorized, "admin routes are disabled: ADMIN_TOKEN is not set")
	case least == roleAdmin && who.role == roleReader:
		return echo.NewHTTPError(http.StatusForbidden, "the read token does not open admin routes")
	case least == roleAdmin:
		return echo.NewHTTPError(http.StatusUnauthorized, "missing or wrong admin credential")
	case h.creds.AdminToken == "" && h.creds.ReadToken == "":
		return echo.NewHTTPError(http.StatusUnauthorized, "reads are disabled: neither READ_TOKEN nor ADMIN_TOKEN is set")
	}
	return echo.NewHTTPError(http.StatusUnauthorized, "missing or wrong read credential (READ_TOKEN or ADMIN_TOKEN)")
}

// requireStatus guards the status routes: the read credential, unless
// STATUS_PUBLIC opens them.
func (h *handlers) requireStatus(next echo.HandlerFunc) echo.HandlerFunc {
	if h.creds.StatusPublic {
		return next
	}
	return h.require(roleReader)(next)
}

// callerOf is the caller a guard admitted.
func callerOf(c echo.Context) caller {
	who, _ := c.Get(callerKey).(caller)
	return who
}

// Refusals of intake.
var (
	errIntakeDisabled = echo.NewHTTPError(http.StatusUnauthorized,
		"intake is disabled: neither INGEST_TOKEN nor INGEST_SIGNING_SECRET is set")
	errIntakeCredential = echo.NewHTTPError(http.StatusUnauthorized,
		"missing or wrong ingest credential: send the ingest token (Authorization: Bearer) or sign the body (X-Signature); the admin and read tokens do not open intake")
)

// checkIntake admits an intake request whose body is body: the ingest
// token as a bearer token, or a fresh X-Signature of the request (its
// method, path and body).
func (h *handlers) checkIntake(c echo.Context, body []byte) error {
	if h.creds.IngestToken == "" && h.creds.IngestSigningSecret == "" {
		return errIntakeDisabled
	}
	r := c.Request()
	if token := bearerToken(r); token != "" {
		if equalSecret(h.creds.IngestToken, token) == 1 {
			return nil
		}
		return errIntakeCredential
	}
	header := r.Header.Get(intakesig.Header)
	if header == "" || h.creds.IngestSigningSecret == "" {
		return errIntakeCredential
	}
	sig, signed, err := intakesig.Verify(h.creds.IngestSigningSecret, header,
		intakesig.Request{Method: r.Method, Path: r.URL.RequestURI(), Body: body}, time.Now())
	if err != nil {
		return echo.NewHTTPError(http.StatusUnauthorized, err.Error())
	}
	fresh, err := h.batches.RecordIntakeSignature(r.Context(), sig, signed, intakesig.Window)
	if err != nil {
		return err
	}
	if !fresh {
		return echo.NewHTTPError(http.StatusUnauthorized,
			intakesig.ErrInvalid.Error()+": this signature was used before (a replay); sign each request anew")
	}
	return nil
}

// requireViewer admits the dashboard's viewers: the read or the admin
// credential (basic auth in a browser). A refusal carries a basic-auth
// challenge so that the browser prompts.
func (h *handlers) requireViewer(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		if err := h.admit(c, roleReader); err != nil {
			return err
		}
		c.Set(ui.ViewerKey, ui.Viewer{Admin: callerOf(c).role == roleAdmin})
		ui.Headers(c.Response().Header())
		return next(c)
	}
}

// logAdmin records an admin action with who took it.
func (h *handlers) logAdmin(c echo.Context, action string) {
	h.log.Info("admin action", append(requestAttrs(c), "who", callerOf(c).name, "action", action,
		"method", c.Request().Method, "path", c.Request().URL.Path)...)
}
