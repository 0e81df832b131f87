// Package api is the orchestrator's HTTP interface: one file per resource,
// handlers that bind, validate, call one backend function and render. Every
// error leaves through ErrorHandler as {"error": "..."} with a fitting status.
package api

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"net/http"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/labstack/echo/v4"
	"github.com/riverqueue/river"
	"go.opentelemetry.io/contrib/instrumentation/github.com/labstack/echo/otelecho"
	"go.opentelemetry.io/otel/propagation"

	"github.com/arke-institute/orchestrator/api/ui"
	"github.com/arke-institute/orchestrator/batches"
	"github.com/arke-institute/orchestrator/blob"
	"github.com/arke-institute/orchestrator/cost"
	"github.com/arke-institute/orchestrator/db"
	"github.com/arke-institute/orchestrator/docindex"
	"github.com/arke-institute/orchestrator/eventhub"
	"github.com/arke-institute/orchestrator/fanin"
	"github.com/arke-institute/orchestrator/jobs"
	"github.com/arke-institute/orchestrator/logcoalesce"
	"github.com/arke-institute/orchestrator/manifest"
	"github.com/arke-institute/orchestrator/metrics"
	"github.com/arke-institute/orchestrator/pause"
	"github.com/arke-institute/orchestrator/phases"
	"github.com/arke-institute/orchestrator/problem"
	"github.com/arke-institute/orchestrator/search"
	"github.com/arke-institute/orchestrator/status"
	"github.com/arke-institute/orchestrator/tasktoken"
	"github.com/arke-institute/orchestrator/tracing"
	"github.com/arke-institute/orchestrator/webhook"
)

// dbRetryAfter is the Retry-After of the 503 answered while the database
// is unreachable, in seconds.
const dbRetryAfter = "2"

// MaxBodyBytes is the largest request body accepted (1 MiB); larger ones get 413.
const MaxBodyBytes = 1 << 20

// Config is what the HTTP layer needs.
type Config struct {
	Backends
	// Executors run the phases' work: their routes are mounted, and they
	// hear of tasks that callbacks put back to be retried.
	Executors *jobs.Executors
	// Callbacks configures the group committer of workers' callbacks; its
	// Pool, River, Executors, Logger and Metrics are this Config's.
	Callbacks fanin.Config
	Pool      *pgxpool.Pool
	Logger    *slog.Logger
	// Credentials are the tokens that open the routes (see auth.go).
	Credentials Credentials
	// River inserts the jobs callbacks enqueue (the phases' fan-in
	// checks), and is served as River UI at /riverui (admin only).
	River *river.Client[pgx.Tx]
	// Context bounds the background work of the server (River UI's caches)
	// and its event streams, which end when it does; nil means
	// context.Background().
	Context context.Context
	// Metrics, when set, times callbacks and counts those rejected. The
	// metrics are served apart from the API (see cmd/orchestrator).
	Metrics *metrics.Metrics
	// MaxStreams bounds the event streams open at once (MAX_STREAMS); one
	// more is answered 503 with Retry-After. Zero means DefaultMaxStreams.
	MaxStreams int
	// ClientIPHeader, when set (CLIENT_IP_HEADER), is the header a trusted
	// proxy names the client in, for the limit on failed credentials;
	// otherwise the connection's address is the client's.
	ClientIPHeader string
	// FailureBurst is how many failed credentials a client may make before
	// it is limited to one a second; zero means DefaultFailureBurst.
	FailureBurst int
	// Tracer, when set, traces every request (Echo's OpenTelemetry
	// middleware, which continues a trace the caller's traceparent
	// names), a created batch's intake and each callback in its task's
	// trace; nil traces nothing and adds no middleware.
	Tracer *tracing.Tracer
}

// Backends are what the routes read and act on. New builds those left nil
// from the Config's Pool, River and Executors (no search, no thumbnails).
type Backends struct {
	// Status reads batches' status, lists and events.
	Status *status.Reader
	// Batches accepts, resets and retries batches.
	Batches *batches.Commands
	// Documents are spec 003's document commands and reads.
	Documents *docindex.Documents
	// Search answers GET /documents/search; nil answers that search is
	// unavailable.
	Search *search.Index
	// Store, CDNBucket and CDNPublicURL serve the dashboard's thumbnails;
	// a nil Store serves none.
	Store        blob.Store
	CDNBucket    string
	CDNPublicURL string
	// Pauses set and lift pauses of work (POST /admin/pause, /admin/resume).
	Pauses *pause.Controls
	// Webhooks are the webhook subscriptions and their deliveries
	// (/admin/webhooks); nil serves them without a key (none can be made).
	Webhooks *webhook.Service
}

// Parts are the running parts of the orchestrator that the API serves.
type Parts struct {
	Pool      *pgxpool.Pool
	River     *river.Client[pgx.Tx]
	Executors *jobs.Executors
	// Store holds the batches' files and the documents; it may be nil.
	Store   blob.Store
	Logger  *slog.Logger
	Metrics *metrics.Metrics
	// Pauses is the process's gate of pauses, which the executors ask
	// (jobs.Deps.Pauses): a pause or resume takes effect in this process at
	// once, in the others within a second.
	Pauses *pause.Gate
	// Webhooks are the process's webhooks (jobs.Deps.Webhooks).
	Webhooks *webhook.Service
	// Tracer traces requests, intake and callbacks; nil traces nothing.
	Tracer *tracing.Tracer
}

// Settings are the API's configuration, as config reads it.
type Settings struct {
	Credentials Credentials
	// Callbacks are the group committer's settings.
	Callbacks      fanin.Config
	MaxStreams     int
	ClientIPHeader string
	// RetentionDays is RETENTION_DAYS, which a pruned batch's status
	// names.
	RetentionDays int
	// Admission are admission control's limits on intake.
	Admission batches.Limits
	// Documents is document indexing's configuration: where documents
	// may be, and the embedder that search embeds queries with.
	Documents docindex.Config
	// StagingBucket holds the documents; CDNBucket and CDNPublicURL the
	// dashboard's thumbnails.
	StagingBucket string
	CDNBucket     string
	CDNPublicURL  string
	// Prices price the status document's cost estimate.
	Prices cost.Prices
}

// ConfigOf is the API's Config of s, serving p. Its Context is left for
// the caller to set.
func ConfigOf(s Settings, p Parts) Config {
	c := Config{Executors: p.Executors, Pool: p.Pool, River: p.River, Logger: p.Logger, Metrics: p.Metrics,
		Credentials: s.Credentials, Callbacks: s.Callbacks, MaxStreams: s.MaxStreams, ClientIPHeader: s.ClientIPHeader, Tracer: p.Tracer}
	c.Status = status.New(p.Pool, p.Executors, s.RetentionDays)
	c.Status.Prices = s.Prices
	c.Batches = batches.New(p.Pool, p.River, p.Executors, c.Status, p.Logger, p.Metrics)
	c.Batches.Limits = s.Admission
	c.Batches.Tracer = p.Tracer
	c.Documents = docindex.NewDocuments(p.Pool, p.River, p.Store, s.StagingBucket, s.Documents.Prefix, p.Logger)
	if providers, err := docindex.NewProviders(s.Documents); err != nil {
		p.Logger.Error("document search is unavailable", "error", err)
	} else {
		c.Search = search.New(p.Pool, providers.Embedder, search.Config{TextConfig: s.Documents.SearchTextConfig,
			MaxIndexChunks: s.Documents.SearchIndexMaxChunks, Logger: p.Logger})
	}
	c.Store, c.CDNBucket, c.CDNPublicURL = p.Store, s.CDNBucket, s.CDNPublicURL
	c.Pauses = &pause.Controls{Pool: p.Pool, Gate: p.Pauses, Logger: p.Logger, Kinds: p.Executors.PausedKinds()}
	c.Webhooks = p.Webhooks
	return c
}

// DefaultMaxStreams is Config.MaxStreams unless set.
const DefaultMaxStreams = 256

// New builds the Echo server with every route registered.
func New(cfg Config) *echo.Echo {
	e := echo.New()
	e.HideBanner = true
	e.HidePort = true
	ctx := cfg.Context
	if ctx == nil {
		ctx = context.Background()
	}
	if cfg.MaxStreams <= 0 {
		cfg.MaxStreams = DefaultMaxStreams
	}
	cb := cfg.Callbacks
	cb.Pool, cb.River, cb.Logger, cb.Metrics = cfg.Pool, cfg.River, cfg.Logger, cfg.Metrics
	if cfg.Executors != nil {
		cb.Executors = cfg.Executors
	}
	b := cfg.Backends
	if b.Status == nil {
		b.Status = status.New(cfg.Pool, cfg.Executors, 0)
	}
	if b.Batches == nil {
		b.Batches = batches.New(cfg.Pool, cfg.River, cfg.Executors, b.Status, cfg.Logger, cfg.Metrics)
		b.Batches.Tracer = cfg.Tracer
	}
	if b.Documents == nil {
		b.Documents = docindex.NewDocuments(cfg.Pool, cfg.River, nil, "", "", cfg.Logger)
	}
	if b.Pauses == nil {
		b.Pauses = &pause.Controls{Pool: cfg.Pool, Logger: cfg.Logger, Kinds: cfg.Executors.PausedKinds()}
	}
	if b.Webhooks == nil {
		b.Webhooks = mustWebhooks(cfg)
	}
	h := &handlers{status: b.Status, batches: b.Batches, pauses: b.Pauses, webhooks: b.Webhooks, river: cfg.River, hub: eventhub.New(cfg.Pool, cfg.Logger, b.Status), documents: b.Documents, search: b.Search,
		callbacks: fanin.New(cb), pool: cfg.Pool, log: cfg.Logger, creds: cfg.Credentials, ctx: ctx, metrics: cfg.Metrics,
		streams: make(chan struct{}, cfg.MaxStreams), quiet: slog.New(logcoalesce.New(cfg.Logger.Handler(), coalescedLogEvery)),
		tokens: tasktoken.New(cfg.Pool), throttle: newThrottle(cfg.ClientIPHeader, cfg.FailureBurst), callbackMax: callbackMaxBytes(cb.MaxOutputs),
		tracer: cfg.Tracer}
	e.HTTPErrorHandler = h.errorHandler
	if cfg.Tracer != nil {
		e.Use(otelecho.Middleware("orchestrator", otelecho.WithTracerProvider(cfg.Tracer.Provider()),
			otelecho.WithPropagators(propagation.TraceContext{}),
			otelecho.WithSkipper(func(c echo.Context) bool { return c.Path() == "/healthz" })))
	}
	e.Use(h.requestLog, h.throttleFailures, boundedIDs, sameSiteWrites)

	// Every route but /healthz needs a credential (auth.go): intake the
	// ingest credential, callbacks the task's token, reads the read token.
	read := h.require(roleReader)
	e.GET("/healthz", h.healthz)
	e.GET("/openapi.yaml", h.openAPI, read)
	e.POST("/batches", h.createBatch, requireJSON)
	e.GET("/batches", h.listBatches, read)
	e.GET("/batches/:batchId/events", h.listEvents, read)
	e.GET("/batches/:batchId/stream", h.streamBatch, read)
	e.GET("/status/:batchId", h.getStatus, h.requireStatus)
	e.POST("/callback/:batchId/:taskId", h.callback, requireJSON)
	e.POST("/documents", h.createDocument, requireJSON)
	e.GET("/documents", h.latestDocument, read)
	e.GET("/documents/search", h.searchDocuments, read)
	e.GET("/documents/:documentId", h.getDocument, read)
	e.POST("/documents/:documentId/retry", h.retryDocument, requireJSON)
	admin := e.Group("/admin", h.require(roleAdmin), requireJSON)
	admin.POST("/reset/:batchId", h.resetBatch)
	admin.POST("/retry/:batchId", h.retryBatch)
	admin.POST("/reindex", h.startReindex)
	admin.GET("/reindex", h.reindexProgress)
	admin.POST("/pause", h.pause)
	admin.POST("/resume", h.resume)
	admin.GET("/pauses", h.listPauses)
	admin.POST("/webhooks", h.createWebhook)
	admin.GET("/webhooks", h.listWebhooks)
	admin.GET("/webhooks/deliveries/:deliveryId", h.getWebhookDelivery)
	admin.POST("/webhooks/deliveries/:deliveryId/replay", h.replayWebhookDelivery)
	admin.GET("/webhooks/:subscriptionId", h.getWebhook)
	admin.DELETE("/webhooks/:subscriptionId", h.deleteWebhook)
	admin.POST("/webhooks/:subscriptionId/enable", h.enableWebhook)
	admin.POST("/webhooks/:subscriptionId/disable", h.disableWebhook)
	admin.GET("/webhooks/:subscriptionId/deliveries", h.listWebhookDeliveries)
	for _, r := range cfg.Executors.Routes() {
		if r.Access == jobs.AccessTask { // a worker's: the handler checks the task's token
			e.Add(r.Method, r.Path, h.executorRoute(r), workerProtocol, requireJSON)
			continue
		}
		access := map[jobs.Access]echo.MiddlewareFunc{jobs.AccessStatus: h.requireStatus, jobs.AccessRead: read, jobs.AccessAdmin: h.require(roleAdmin)}[r.Access]
		if access == nil {
			panic(fmt.Sprintf("api: route %s %s asks for no credential we know", r.Method, r.Path))
		}
		e.Add(r.Method, r.Path, h.executorRoute(r), access, requireJSON)
	}
	ui.New(ui.Deps{Pool: cfg.Pool, Status: b.Status, Batches: b.Batches, Executors: cfg.Executors, Documents: b.Documents, Search: b.Search,
		Store: b.Store, CDNBucket: b.CDNBucket, CDNPublicURL: b.CDNPublicURL, Pauses: b.Pauses, Webhooks: b.Webhooks, River: cfg.River,
		LogAdmin: h.logAdmin}).Mount(e.Group("/ui", h.requireViewer))
	if cfg.River != nil {
		h.mountRiverUI(ctx, e, cfg)
	}
	return e
}

type handlers struct {
	status   *status.Reader
	batches  *batches.Commands
	pauses   *pause.Controls
	webhooks *webhook.Service
	// river enqueues the jobs of the admin's commands (webhook replays).
	river     *river.Client[pgx.Tx]
	hub       *eventhub.Hub
	documents *docindex.Documents
	search    *search.Index
	callbacks *fanin.Committer
	pool      *pgxpool.Pool
	log       *slog.Logger
	creds     Credentials
	// ctx ends with the server: long-lived responses (event streams) end
	// with it, so a graceful shutdown does not wait for them.
	ctx     context.Context
	metrics *metrics.Metrics
	tracer  *tracing.Tracer
	// streams holds a slot per open event stream (MaxStreams of them).
	streams chan struct{}
	// quiet writes the log lines of expected 503s (the database away, the
	// callback queue full) and of refused callbacks: one per message per
	// coalescedLogEvery.
	quiet *slog.Logger
	// tokens opens the tasks' callback tokens.
	tokens *tasktoken.Keyring
	// throttle limits each client's failed credentials.
	throttle *throttle
	// callbackMax is the largest callback body taken (callbackMaxBytes).
	callbackMax int64
}

// coalescedLogEvery is how often a run of expected 503s is logged: one
// warning, saying how many were held back since the last, instead of a
// line per request. A 30 s Postgres restart under load was otherwise
// thousands of error lines.
const coalescedLogEvery = 5 * time.Second

// errorBody is the shape of every error response.
type errorBody struct {
	Error string `json:"error"`
}

// errorHandler maps errors to status codes in one place. Unexpected errors
// are logged in full and answered with a generic message, so internals (and
// anything secret in them) do not leak to clients.
func (h *handlers) errorHandler(err error, c echo.Context) {
	if c.Response().Committed {
		return
	}
	code, msg := http.StatusInternalServerError, "internal error"
	expected := false // a 503 that is no fault of ours: logged coalesced
	var (
		he     *echo.HTTPError
		verr   *manifest.ValidationError
		ierr   *problem.InputError
		limit  *problem.LimitError
		maxErr *http.MaxBytesError
	)
	switch {
	case errors.As(err, &maxErr):
		code, msg = http.StatusRequestEntityTooLarge, fmt.Sprintf("request body is larger than %d bytes", maxErr.Limit)
	case errors.As(err, &verr), errors.As(err, &ierr), errors.Is(err, manifest.ErrMalformedJSON):
		code, msg = http.StatusBadRequest, err.Error()
	case errors.As(err, &limit):
		code, msg = http.StatusTooManyRequests, err.Error()
		c.Response().Header().Set("Retry-After", strconv.Itoa(int(math.Ceil(limit.RetryAfter.Seconds()))))
	case errors.Is(err, problem.ErrUnauthorized):
		code, msg = http.StatusUnauthorized, err.Error()
	case errors.Is(err, problem.ErrConflict):
		code, msg = http.StatusConflict, err.Error()
	case errors.Is(err, problem.ErrNotFound):
		code, msg = http.StatusNotFound, err.Error()
	case errors.Is(err, fanin.ErrBusy):
		code, msg = http.StatusServiceUnavailable, err.Error()+"; try again shortly"
		c.Response().Header().Set("Retry-After", "1")
		expected = true
	case db.Unavailable(err):
		// Postgres restarting or failing over: the caller's retry will
		// find it back (workers and ingest retry 503s), so this is not
		// an internal error.
		code, msg = http.StatusServiceUnavailable, "the database is unavailable; try again shortly"
		c.Response().Header().Set("Retry-After", dbRetryAfter)
		expected = true
	case errors.As(err, &he):
		code = he.Code
		msg = http.StatusText(code)
		if s, ok := he.Message.(string); ok {
			msg = s
		}
	}
	if code == http.StatusUnauthorized {
		h.throttle.failed(h.throttle.client(c.Request()))
	}
	switch {
	case expected:
		h.quiet.Warn("answering 503: "+msg, append(requestAttrs(c), "method", c.Request().Method, "path", c.Path(), "error", err)...)
	case code >= 500:
		h.log.Error("request failed", append(requestAttrs(c), "method", c.Request().Method, "path", c.Path(), "error", err)...)
	}
	if c.Request().Method == http.MethodHead {
		err = c.NoContent(code)
	} else {
		err = c.JSON(code, errorBody{Error: msg})
	}
	if err != nil {
		h.log.Error("writing error response", "error", err)
	}
}

// requestLog logs each request once it is answered. Only the route pattern
// and the path's batch and task ids are logged: never headers, which carry
// tokens.
func (h *handlers) requestLog(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		start := time.Now()
		err := next(c)
		if err != nil {
			c.Error(err)
		}
		attrs := append(requestAttrs(c), "method", c.Request().Method, "route", c.Path(), "status", c.Response().Status,
			"duration_ms", time.Since(start).Milliseconds())
		h.log.DebugContext(c.Request().Context(), "request", attrs...)
		return nil
	}
}

// maxTaskIDLength bounds a task id in a path: a phase's prefix and a file's
// or a chunk's id are far shorter.
const maxTaskIDLength = 128

// boundedIDs answers 404 at once to a path whose batch or task id is longer
// than any there is, before it is logged, checked or looked up.
func boundedIDs(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		if len(c.Param("batchId")) > manifest.MaxBatchIDLength || len(c.Param("taskId")) > maxTaskIDLength {
			return echo.NewHTTPError(http.StatusNotFound, fmt.Sprintf(
				"not found: a batch id is at most %d bytes, a task id at most %d", manifest.MaxBatchIDLength, maxTaskIDLength))
		}
		return next(c)
	}
}

// requestAttrs are the log attributes naming what a request concerns: the
// path's batch_id, and its task_id with the task's phase.
func requestAttrs(c echo.Context) []any {
	var attrs []any
	if id := c.Param("batchId"); id != "" {
		attrs = append(attrs, "batch_id", id)
	}
	if id := c.Param("taskId"); id != "" {
		attrs = append(attrs, "task_id", id, "phase", string(phases.OfTask(id)))
	}
	return attrs
}

// readBody reads the whole request body, refusing more than MaxBodyBytes.
func readBody(c echo.Context) ([]byte, error) {
	return readBodyUpTo(c, MaxBodyBytes)
}

// readBodyUpTo reads the whole request body, refusing more than limit bytes.
func readBodyUpTo(c echo.Context, limit int64) ([]byte, error) {
	return io.ReadAll(http.MaxBytesReader(c.Response(), c.Request().Body, limit))
}

// healthz answers 200 once the database answers.
func (h *handlers) healthz(c echo.Context) error {
	ctx, cancel := context.WithTimeout(c.Request().Context(), 2*time.Second)
	defer cancel()
	if err := h.pool.Ping(ctx); err != nil {
		c.Response().Header().Set("Retry-After", dbRetryAfter)
		return echo.NewHTTPError(http.StatusServiceUnavailable, "database unreachable")
	}
	return c.JSON(http.StatusOK, map[string]string{"status": "ok"})
}
