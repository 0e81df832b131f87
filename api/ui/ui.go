// Package ui is the web dashboard of batches and documents (/ui): its
// pages, their templates and scripts, and the view models they render.
// The API mounts it behind its viewer guard (read or admin credential).
package ui

import (
	"bytes"
	"embed"
	"errors"
	"fmt"
	"html/template"
	"io/fs"
	"math"
	"net/http"
	"net/url"
	"strconv"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/labstack/echo/v4"
	"github.com/riverqueue/river"

	"github.com/arke-institute/orchestrator/batches"
	"github.com/arke-institute/orchestrator/blob"
	"github.com/arke-institute/orchestrator/db"
	"github.com/arke-institute/orchestrator/docindex"
	"github.com/arke-institute/orchestrator/jobs"
	"github.com/arke-institute/orchestrator/pause"
	"github.com/arke-institute/orchestrator/phases"
	"github.com/arke-institute/orchestrator/problem"
	"github.com/arke-institute/orchestrator/search"
	"github.com/arke-institute/orchestrator/status"
	"github.com/arke-institute/orchestrator/webhook"
)

// uiPrefix is where the batch dashboard is served.
const uiPrefix = "/ui"

// Dashboard is the web dashboard of batches and documents (/ui): its pages,
// and the views of the data they show.
type Dashboard struct {
	pool      *pgxpool.Pool
	status    *status.Reader
	batches   *batches.Commands
	executors *jobs.Executors
	documents *docindex.Documents
	search    *search.Index
	// store reads image variants from cdnBucket for the thumbnails; nil
	// serves none. cdnPublicURL maps variant URLs to keys.
	store        blob.Store
	cdnBucket    string
	cdnPublicURL string
	// pauses set and lift pauses of work.
	pauses *pause.Controls
	// webhooks are the webhook subscriptions; river enqueues replays.
	webhooks *webhook.Service
	river    *river.Client[pgx.Tx]
	// logAdmin logs an admin's action, naming who (the API's).
	logAdmin func(c echo.Context, action string)
}

// Deps are what the dashboard reads and acts on.
type Deps struct {
	Pool      *pgxpool.Pool
	Status    *status.Reader
	Batches   *batches.Commands
	Executors *jobs.Executors
	Documents *docindex.Documents
	Search    *search.Index
	// Store, CDNBucket and CDNPublicURL serve the files' thumbnails.
	Store        blob.Store
	CDNBucket    string
	CDNPublicURL string
	// Pauses set and lift pauses of work (the pause and resume buttons).
	Pauses *pause.Controls
	// Webhooks are the webhook subscriptions and deliveries; River
	// enqueues the replays.
	Webhooks *webhook.Service
	River    *river.Client[pgx.Tx]
	// LogAdmin logs an admin's action.
	LogAdmin func(c echo.Context, action string)
}

// New returns the dashboard.
func New(d Deps) *Dashboard {
	return &Dashboard{pool: d.Pool, status: d.Status, batches: d.Batches, executors: d.Executors, documents: d.Documents, search: d.Search,
		store: d.Store, cdnBucket: d.CDNBucket, cdnPublicURL: d.CDNPublicURL, pauses: d.Pauses, webhooks: d.Webhooks, river: d.River, logAdmin: d.LogAdmin}
}

//go:embed templates/*.html static/*
var uiFiles embed.FS

// uiTemplates are the dashboard's pages, parsed once. viewBase is a copy
// that is never executed, which the executors' sections are parsed into
// (html/template clones no set once it has executed).
var uiTemplates, viewBase *template.Template

func init() {
	uiTemplates = parseUI()
	viewBase = parseUI()
}

// parseUI parses the dashboard's templates with their functions.
func parseUI() *template.Template {
	return template.Must(template.New("").Funcs(template.FuncMap{
		"pct":      pct,
		"since":    func(t time.Time) string { return humanDuration(time.Since(t)) },
		"elapsed":  elapsed,
		"bytes":    humanBytes,
		"time":     formatTime,
		"terminal": func(s string) bool { return s == string(phases.BatchDone) || s == string(phases.BatchError) },
		"section":  renderSection,
		"view":     renderView,
		"decimal":  decimal,
		"errors":   lastErrors,
		"excerpt":  excerpt,
		"stamp":    formatStamp,
		"usd":      formatUSD,
	}).ParseFS(uiFiles, "templates/*.html"))
}

// formatUSD formats an estimate (a float64, or a *float64: nil is
// unpriced) in dollars, to four decimals, or six below a cent.
func formatUSD(v any) string {
	var f float64
	switch x := v.(type) {
	case float64:
		f = x
	case *float64:
		if x == nil {
			return "unpriced"
		}
		f = *x
	}
	if f != 0 && math.Abs(f) < 0.01 {
		return fmt.Sprintf("$%.6f", f)
	}
	return fmt.Sprintf("$%.4f", f)
}

// formatStamp formats an RFC 3339 timestamp (a document error's) as
// formatTime does; a text that is not one is shown as it is.
func formatStamp(s string) string {
	t, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		return s
	}
	return formatTime(t)
}

// renderSection renders the batch page section of the named template, so
// that the page lists its sections (batchSections) instead of naming each.
func renderSection(name string, data any) (template.HTML, error) {
	var buf bytes.Buffer
	if err := uiTemplates.ExecuteTemplate(&buf, name, data); err != nil {
		return "", err
	}
	// html/template escaped the section as it rendered it.
	return template.HTML(buf.String()), nil //nolint:gosec // output of html/template
}

// viewTemplates are the executors' sections' templates (jobs.View), each
// parsed once, with the dashboard's templates and functions, by its text.
var viewTemplates sync.Map // string -> *template.Template

// renderView renders an executor's section of the batch page.
func renderView(v jobs.View) (template.HTML, error) {
	t, ok := viewTemplates.Load(v.Template)
	if !ok {
		base, err := viewBase.Clone()
		if err != nil {
			return "", err
		}
		parsed, err := base.New("view").Parse(v.Template)
		if err != nil {
			return "", fmt.Errorf("the template of section %s: %w", v.ID, err)
		}
		t, _ = viewTemplates.LoadOrStore(v.Template, parsed)
	}
	var buf bytes.Buffer
	if err := t.(*template.Template).ExecuteTemplate(&buf, "view", v.Data); err != nil {
		return "", err
	}
	// html/template escaped the section as it rendered it.
	return template.HTML(buf.String()), nil //nolint:gosec // output of html/template
}

// formatTime formats a time or a *time.Time (nil: "").
func formatTime(v any) string {
	switch t := v.(type) {
	case time.Time:
		if t.IsZero() {
			return ""
		}
		return t.UTC().Format("2006-01-02 15:04:05 UTC")
	case *time.Time:
		if t != nil {
			return formatTime(*t)
		}
	}
	return ""
}

// batchSection is one section of the batch page: one of the page's own,
// rendered by the template it names with the page's data, or an
// executor's (View).
type batchSection struct {
	ID, Title string
	// Template is the name of the template that renders the section.
	Template string
	View     *jobs.View
}

// batchSections are the batch page's sections, in page order, the
// executors' between the phases and the files.
func batchSections(views []jobs.View) []batchSection {
	out := []batchSection{
		{ID: "progress", Title: "Progress", Template: "section-progress"},
		{ID: "timeline", Title: "Phases", Template: "section-timeline"},
		{ID: "cost", Title: "Cost", Template: "section-cost"},
	}
	for i := range views {
		out = append(out, batchSection{ID: views[i].ID, Title: views[i].Title, View: &views[i]})
	}
	return append(out,
		batchSection{ID: "files", Title: "Files", Template: "section-files"},
		batchSection{ID: "ingest", Title: "Ingest delivery", Template: "section-ingest"},
	)
}

// Viewer is who is looking at the dashboard.
type Viewer struct {
	// Admin may reset and retry batches; a reader sees no controls.
	Admin bool
}

// ViewerKey is where the API's guard of the dashboard's routes leaves the
// Viewer in the request's context.
const ViewerKey = "ui.viewer"

// Headers are the security headers of every dashboard page: scripts only
// from /ui/static, no framing, no sniffing.
func Headers(h http.Header) {
	h.Set("Content-Security-Policy",
		"default-src 'self'; style-src 'self' 'unsafe-inline'; img-src 'self'; frame-ancestors 'none'; form-action 'self'")
	h.Set("X-Content-Type-Options", "nosniff")
}

// SameOrigin refuses a state-changing request that does not come from a
// page of this server: the Origin (or, without one, the Referer) must name
// the request's own host, and Sec-Fetch-Site, when the browser sends it,
// must be same-origin. Basic auth credentials are sent by the browser on
// any site's form, so this is the dashboard's CSRF defence.
func SameOrigin(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		r := c.Request()
		if site := r.Header.Get("Sec-Fetch-Site"); site != "" && site != "same-origin" {
			return echo.NewHTTPError(http.StatusForbidden, "cross-site request refused (Sec-Fetch-Site: "+site+")")
		}
		from := r.Header.Get(echo.HeaderOrigin)
		if from == "" || from == "null" {
			from = r.Header.Get("Referer")
		}
		if from == "" {
			return echo.NewHTTPError(http.StatusForbidden, "cross-site request refused: no Origin or Referer")
		}
		u, err := url.Parse(from)
		if err != nil || u.Host != r.Host {
			return echo.NewHTTPError(http.StatusForbidden, "cross-site request refused: the request does not come from this site")
		}
		return next(c)
	}
}

// Mount registers the dashboard's routes on g, the group of /ui, which
// must admit only the dashboard's viewers and set each one's Viewer
// (ViewerKey).
func (d *Dashboard) Mount(g *echo.Group) {
	static, err := fs.Sub(uiFiles, "static")
	if err != nil {
		panic(err) // the embedded tree is fixed at build time
	}
	g.GET("", d.uiBatchList)
	g.GET("/", func(c echo.Context) error { return c.Redirect(http.StatusMovedPermanently, uiPrefix) })
	g.GET("/batches/:batchId", d.uiBatch)
	g.GET("/batches/:batchId/files/:fileId/thumbnail", d.uiThumbnail)
	g.POST("/batches/:batchId/reset", d.uiReset, SameOrigin)
	g.POST("/batches/:batchId/retry", d.uiRetry, SameOrigin)
	g.POST("/pauses", d.uiPause, SameOrigin)
	g.POST("/pauses/resume", d.uiResume, SameOrigin)
	d.mountUIDocuments(g)
	d.mountUIWebhooks(g)
	g.GET("/static/*", echo.WrapHandler(http.StripPrefix(uiPrefix+"/static/", http.FileServerFS(static))))
}

// listPage is the data of the batch list.
type listPage struct {
	Viewer   Viewer
	Status   string
	Statuses []string
	// Pauses are the pauses in force; Phases the phases one may pause.
	Pauses []pause.Pause
	Phases []string
	Page   Page
	// Next is the query of the next page, "" on the last (nextPage).
	Next template.URL
}

// uiBatchList is GET /ui: batches newest first, filtered by ?status=.
func (d *Dashboard) uiBatchList(c echo.Context) error {
	f := status.BatchFilter{Status: c.QueryParam("status"), Cursor: c.QueryParam("cursor")}
	page, err := d.list(c.Request().Context(), f)
	if err != nil {
		return err
	}
	data := listPage{Viewer: c.Get(ViewerKey).(Viewer), Status: f.Status, Page: page}
	for _, st := range phases.Statuses() {
		data.Statuses = append(data.Statuses, string(st))
	}
	for _, p := range phases.All() {
		data.Phases = append(data.Phases, string(p.Spec().Name))
	}
	if data.Pauses, err = pause.List(c.Request().Context(), db.New(d.pool)); err != nil {
		return err
	}
	data.Next = nextPage(page.NextCursor, "status", f.Status)
	return render(c, http.StatusOK, "list.html", data)
}

// nextPage is the query of a listing's next page, at cursor, with the
// listing's filters (name, value, ...; empty values left out); "" on the
// last page (no cursor). It is a template.URL, escaped here once: the
// template puts it after "?" as it is.
func nextPage(cursor *string, filters ...string) template.URL {
	if cursor == nil {
		return ""
	}
	q := url.Values{"cursor": {*cursor}}
	for i := 0; i+1 < len(filters); i += 2 {
		if filters[i+1] != "" {
			q.Set(filters[i], filters[i+1])
		}
	}
	return template.URL(q.Encode()) //nolint:gosec // built here from url.Values, escaped
}

// batchPage is the data of the batch page.
type batchPage struct {
	Viewer   Viewer
	Detail   Detail
	Sections []batchSection
	// Notice is the outcome of the last reset or retry.
	Notice string
}

// notices are what ?done= on the batch page may say: fixed texts, so a
// link cannot put words of its own on the admin's page.
var notices = map[string]string{"reset": "Batch reset.", "retry": "Batch retried.", "paused": "Batch paused.", "resumed": "Batch resumed."}

// timelineRow is a phase in the batch page's timeline.
type timelineRow struct {
	Phase string
	Start time.Time
	End   *time.Time
	Tasks status.PhaseProgress
}

// Timeline joins each phase's span with its task counts.
func (p batchPage) Timeline() []timelineRow {
	counts := map[string]status.PhaseProgress{}
	for _, pp := range p.Detail.Status.Phases {
		counts[pp.Phase] = pp
	}
	var out []timelineRow
	for _, span := range p.Detail.Timeline {
		out = append(out, timelineRow{Phase: span.Phase, Start: span.Start, End: span.End, Tasks: counts[span.Phase]})
	}
	return out
}

// uiBatch is GET /ui/batches/:batchId.
func (d *Dashboard) uiBatch(c echo.Context) error {
	return d.renderBatch(c, http.StatusOK, notices[c.QueryParam("done")])
}

// renderBatch renders the batch page with a notice.
func (d *Dashboard) renderBatch(c echo.Context, code int, notice string) error {
	detail, err := d.detail(c.Request().Context(), c.Param("batchId"))
	if err != nil {
		return err
	}
	return render(c, code, "batch.html", batchPage{Viewer: c.Get(ViewerKey).(Viewer), Detail: detail, Sections: batchSections(detail.Views), Notice: notice})
}

// uiThumbnail is GET /ui/batches/:batchId/files/:fileId/thumbnail: the
// file's thumbnail variant, read from the CDN bucket.
func (d *Dashboard) uiThumbnail(c echo.Context) error {
	id, err := strconv.ParseInt(c.Param("fileId"), 10, 64)
	if err != nil {
		return &problem.InputError{Msg: fmt.Sprintf("fileId must be an integer, got %q", c.Param("fileId"))}
	}
	r, size, err := d.thumbnail(c.Request().Context(), c.Param("batchId"), id)
	if err != nil {
		return err
	}
	defer r.Close()
	w := c.Response()
	w.Header().Set(echo.HeaderCacheControl, "private, max-age=300")
	if size >= 0 {
		w.Header().Set(echo.HeaderContentLength, strconv.FormatInt(size, 10))
	}
	return c.Stream(http.StatusOK, "image/jpeg", r)
}

// uiReset is POST /ui/batches/:batchId/reset, the reset button.
func (d *Dashboard) uiReset(c echo.Context) error {
	if !c.Get(ViewerKey).(Viewer).Admin {
		return echo.NewHTTPError(http.StatusForbidden, "only the admin may reset batches")
	}
	d.logAdmin(c, "reset")
	_, err := d.batches.Reset(c.Request().Context(), c.Param("batchId"))
	return d.afterAction(c, "reset", err)
}

// uiRetry is POST /ui/batches/:batchId/retry, the retry buttons (with
// ?mode=infrastructure, the one of infrastructure failures only).
func (d *Dashboard) uiRetry(c echo.Context) error {
	if !c.Get(ViewerKey).(Viewer).Admin {
		return echo.NewHTTPError(http.StatusForbidden, "only the admin may retry batches")
	}
	d.logAdmin(c, "retry")
	_, err := d.batches.Retry(c.Request().Context(), c.Param("batchId"), c.QueryParam("mode") == batches.RetryInfrastructure)
	return d.afterAction(c, "retry", err)
}

// uiPause is POST /ui/pauses, the pause buttons: of a batch (form field
// batch_id), a phase (phase) or everything (neither), with a reason.
func (d *Dashboard) uiPause(c echo.Context) error {
	if !c.Get(ViewerKey).(Viewer).Admin {
		return echo.NewHTTPError(http.StatusForbidden, "only the admin may pause work")
	}
	d.logAdmin(c, "pause")
	t := pause.Target{BatchID: c.FormValue("batch_id"), Phase: c.FormValue("phase")}
	_, err := d.pauses.Pause(c.Request().Context(), t, c.FormValue("reason"))
	return d.afterPause(c, t, "paused", err)
}

// uiResume is POST /ui/pauses/resume, the resume buttons.
func (d *Dashboard) uiResume(c echo.Context) error {
	if !c.Get(ViewerKey).(Viewer).Admin {
		return echo.NewHTTPError(http.StatusForbidden, "only the admin may resume work")
	}
	d.logAdmin(c, "resume")
	t := pause.Target{BatchID: c.FormValue("batch_id"), Phase: c.FormValue("phase")}
	_, err := d.pauses.Resume(c.Request().Context(), t)
	return d.afterPause(c, t, "resumed", err)
}

// afterPause sends the browser back to the batch's page (a batch's pause)
// or the list (303).
func (d *Dashboard) afterPause(c echo.Context, t pause.Target, done string, err error) error {
	if err != nil {
		return err
	}
	if t.BatchID != "" {
		return c.Redirect(http.StatusSeeOther, uiPrefix+"/batches/"+url.PathEscape(t.BatchID)+"?done="+done)
	}
	return c.Redirect(http.StatusSeeOther, uiPrefix)
}

// afterAction sends the browser back to the batch page (303, so a reload
// does not post again) saying what was done. A refusal the admin can act
// on (nothing to retry, still stopping) is answered with the batch page
// itself, 409, the reason as its notice.
func (d *Dashboard) afterAction(c echo.Context, done string, err error) error {
	switch {
	case errors.Is(err, problem.ErrConflict):
		return d.renderBatch(c, http.StatusConflict, err.Error())
	case err != nil:
		return err
	}
	return c.Redirect(http.StatusSeeOther, uiPrefix+"/batches/"+url.PathEscape(c.Param("batchId"))+"?done="+done)
}

// render executes a page template into a buffer first, so a template error
// is an ordinary 500 rather than half a page.
func render(c echo.Context, code int, name string, data any) error {
	var buf bytes.Buffer
	if err := uiTemplates.ExecuteTemplate(&buf, name, data); err != nil {
		return fmt.Errorf("rendering %s: %w", name, err)
	}
	c.Response().Header().Set(echo.HeaderCacheControl, "no-store")
	return c.HTMLBlob(code, buf.Bytes())
}

// pct is done out of total, integers of any size, as a whole percentage.
func pct(done, total any) (int64, error) {
	d, err := toInt64(done)
	if err != nil {
		return 0, err
	}
	t, err := toInt64(total)
	if err != nil || t <= 0 {
		return 0, err
	}
	return d * 100 / t, nil
}

// toInt64 is an integer of the templates' data as an int64.
func toInt64(v any) (int64, error) {
	switch n := v.(type) {
	case int:
		return int64(n), nil
	case int32:
		return int64(n), nil
	case int64:
		return n, nil
	}
	return 0, fmt.Errorf("pct: %T is not an integer", v)
}

// decimal is x to one decimal place, without a trailing ".0": 50, 12.3.
func decimal(x float64) string {
	return strconv.FormatFloat(math.Round(x*10)/10, 'f', -1, 64)
}

// elapsed is how long a batch ran: to its completion, or until now.
func elapsed(start time.Time, end *time.Time) string {
	if end != nil {
		return humanDuration(end.Sub(start))
	}
	return humanDuration(time.Since(start))
}

// humanDuration is d rounded for people: 45s, 12m 5s, 3h 20m, 2d 4h.
func humanDuration(d time.Duration) string {
	switch {
	case d < time.Minute:
		return fmt.Sprintf("%ds", int(d.Seconds()))
	case d < time.Hour:
		return fmt.Sprintf("%dm %ds", int(d.Minutes()), int(d.Seconds())%60)
	case d < 48*time.Hour:
		return fmt.Sprintf("%dh %dm", int(d.Hours()), int(d.Minutes())%60)
	default:
		return fmt.Sprintf("%dd %dh", int(d.Hours())/24, int(d.Hours())%24)
	}
}

// humanBytes is n in B, KiB, MiB or GiB.
func humanBytes(n int64) string {
	const unit = 1024
	if n < unit {
		return fmt.Sprintf("%d B", n)
	}
	div, exp := int64(unit), 0
	for m := n / unit; m >= unit && exp < 2; m /= unit {
		div *= unit
		exp++
	}
	return fmt.Sprintf("%.1f %ciB", float64(n)/float64(div), "KMG"[exp])
}
