// Package testenv assembles a whole orchestrator for end-to-end tests: a
// fresh Postgres database, a real S3 server with a bucket of the test's own,
// a fake Fly Machines API reached through the real fly-go client, a fake
// ingest service, River workers and the HTTP API on a loopback port.
package testenv

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"maps"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/stretchr/testify/require"

	"github.com/arke-institute/orchestrator/api"
	"github.com/arke-institute/orchestrator/blob"
	apiclient "github.com/arke-institute/orchestrator/client"
	"github.com/arke-institute/orchestrator/compute/flycompute"
	"github.com/arke-institute/orchestrator/config"
	"github.com/arke-institute/orchestrator/executor"
	"github.com/arke-institute/orchestrator/internal/fakes/fakefly"
	"github.com/arke-institute/orchestrator/internal/fakes/ocrfixture"
	"github.com/arke-institute/orchestrator/internal/harness/dbtest"
	"github.com/arke-institute/orchestrator/internal/harness/s3test"
	"github.com/arke-institute/orchestrator/jobs"
	"github.com/arke-institute/orchestrator/metrics"
	"github.com/arke-institute/orchestrator/pause"
	"github.com/arke-institute/orchestrator/phases"
	"github.com/arke-institute/orchestrator/status"
	"github.com/arke-institute/orchestrator/tracing"
	"github.com/arke-institute/orchestrator/webhook"
)

// The credentials of every Env.
const (
	AdminToken  = "test-admin-token"
	ReadToken   = "test-read-token-0"
	IngestToken = "test-ingest-token"
	// WebhookKey is WEBHOOK_SECRET_KEY: 32 bytes in base64.
	WebhookKey = "dGVzdC13ZWJob29rLWtleS0zMi1ieXRlcy1sb25nISE="
)

// flyToken is the fake Fly API's token.
const flyToken = "test-fly-token"

// Env is a running orchestrator for one test.
type Env struct {
	Pool   *pgxpool.Pool
	S3     *s3test.Server
	Bucket string
	Store  blob.Store
	Fly    *fakefly.Server
	Ingest *Ingest
	River  *river.Client[pgx.Tx]
	Config *config.Config
	Server *httptest.Server
	// Client calls the API at Server, with the admin token.
	Client *apiclient.Client
	// Metrics is the orchestrator's metrics, on a registry of this Env's
	// own.
	Metrics *metrics.Metrics

	// Deps are the orchestrator's jobs' outside parts, its executors
	// registered.
	Deps     jobs.Deps
	settings map[string]string
}

// Options adjust an Env.
type Options struct {
	// StoreConfig overrides the S3 client configuration, e.g. to go through a
	// fault-injecting proxy; nil uses the test S3 server directly.
	StoreConfig *blob.S3Config
	// Settings override configuration by its environment names, on top of
	// test defaults (fast alarms and sweeps, no launch limit).
	Settings map[string]string
	// Behave decides how the fake Fly API and its workers act per launch.
	Behave func(fakefly.Launch) fakefly.Behavior
	// NoSweep leaves out the periodic sweep (timeouts and the backstop).
	NoSweep bool
	// Listen runs the process's listener (jobs.Listener), as serve does:
	// a silence of the orchestrator moves the running tasks' deadlines.
	Listen bool
	// NoWorkers starts no River workers: jobs are only inserted.
	NoWorkers bool
	// Logger replaces the default logger, which sends warnings and errors
	// to the test log.
	Logger *slog.Logger
	// Build sets when transitions write generations in chunks, so that
	// small batches can take that path.
	Build jobs.BuildSizes
	// Hooks are the River client's test hooks (jobs.ClientConfig.TestHooks).
	Hooks *jobs.TestHooks
	// ImageRefs makes the image phase's fake workers write each image's
	// variants and ref (ocrfixture.ImageWorker), so the OCR phase has real
	// objects to read; Behave is then unused. CDN_BUCKET is the test's
	// bucket.
	ImageRefs bool
	// Queues limits the orchestrator's River client to these queues
	// (jobs.ClientConfig.Queues); empty works them all.
	Queues []string
	// DatabaseServer, when set, is the Postgres server of the Env's
	// database instead of the tests' one: a cluster the test may stop and
	// restart (internal/harness/pgcluster).
	DatabaseServer string
	// FlyOptions adjust the fake Machines API (Token and Behave are the
	// Env's own).
	FlyOptions fakefly.Options
	// EditRef is ocrfixture.Stores.Edit for ImageRefs: hostile refs.
	EditRef func(inputKey string, variants map[string]string) (writeVariants bool)
	// Tracer traces the orchestrator (its jobs, requests and steps), as
	// serve does with an OTLP endpoint; nil traces nothing.
	Tracer *tracing.Tracer
}

// testSettings make batches move fast in tests.
var testSettings = func() map[string]string {
	s := map[string]string{
		"ALARM_DELAY_ERROR_RETRY": "200",
		"FLY_LAUNCH_RATE":         "100000",
		"FLY_LAUNCH_BURST":        "100000",
		"SWEEP_INTERVAL":          "200",
		// Tests post their documents; one that wants the scan says so.
		"DOCUMENTS_SCAN_INTERVAL_MS": "0",
		"SWEEP_RESTART_GRACE":        "0",
		"MACHINE_CHECK_INTERVAL":     "200",
		"MACHINE_GONE_GRACE":         "500",
		// Tests of other behaviours fail work for infrastructure reasons
		// in small batches; the tests of the bound set it.
		"INFRA_FAILURE_MAX": "100%",
		"CDN_PUBLIC_URL":    "https://cdn.test",
		"ADMIN_TOKEN":       AdminToken,
		"READ_TOKEN":        ReadToken,
		"INGEST_TOKEN":      IngestToken,
		// Receivers of the tests' webhooks listen on loopback.
		"WEBHOOK_SECRET_KEY":     WebhookKey,
		"WEBHOOK_ALLOW_NETWORKS": "127.0.0.0/8,::1/128",
		"WEBHOOK_FIRST_RETRY":    "100",
	}
	for _, p := range phases.All() {
		s["ALARM_DELAY_"+string(p.Spec().Name)] = "100"
		// The tests of the fake Machines API's per-task machines: a test
		// of pools asks for them (PoolSettings).
		if p.Spec().Worker != "" {
			s["EXECUTOR_"+string(p.Spec().Name)] = "machine"
		}
	}
	return s
}()

// PoolSettings are settings that run every phase with a worker program on
// pools of size machines, merged with more (which win).
func PoolSettings(size int, more map[string]string) map[string]string {
	s := map[string]string{}
	for _, p := range phases.All() {
		if p.Spec().Worker != "" {
			s["EXECUTOR_"+string(p.Spec().Name)] = "pool"
			s["POOL_SIZE_"+string(p.Spec().Name)] = strconv.Itoa(size)
		}
	}
	maps.Copy(s, more)
	return s
}

// New starts an orchestrator for the test and stops it when the test ends.
func New(t *testing.T, opts Options) *Env {
	t.Helper()
	var pool *pgxpool.Pool
	var dbURL string
	if opts.DatabaseServer != "" {
		pool, dbURL = dbtest.NewOnServer(t, opts.DatabaseServer)
	} else {
		pool, dbURL = dbtest.NewWithURL(t)
	}
	// Runs after every other cleanup (the orchestrator has stopped).
	t.Cleanup(func() { requireTaskCountsExact(t, pool) })
	s3 := s3test.Start(t)
	bucket := s3.NewBucket(t)
	scfg := s3.Config()
	if opts.StoreConfig != nil {
		scfg = *opts.StoreConfig
	}
	store, err := blob.NewS3(scfg)
	require.NoError(t, err)

	behave := opts.Behave
	if opts.ImageRefs {
		behave = ocrfixture.ImageWorker(ocrfixture.Stores{StagingBucket: bucket, CDNBucket: bucket, CDNPublicURL: testSettings["CDN_PUBLIC_URL"], Edit: opts.EditRef})
	}
	flyOpts := opts.FlyOptions
	flyOpts.Token, flyOpts.Behave = flyToken, behave
	fly := fakefly.New(t, flyOpts)
	ingest := newIngest(t)

	// The API's URL must be known before the configuration (workers call
	// back to it), so the server starts first and gets its handler after.
	var handler atomic.Pointer[http.Handler]
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		(*handler.Load()).ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)

	settings := map[string]string{
		"DATABASE_URL":         dbURL, // for child processes: the Env's own client is given the pool
		"ORCHESTRATOR_URL":     srv.URL,
		"WORKER_URL":           ingest.URL,
		"R2_ENDPOINT":          scfg.Endpoint,
		"R2_ACCESS_KEY_ID":     scfg.AccessKeyID,
		"R2_SECRET_ACCESS_KEY": scfg.SecretAccessKey,
		"R2_BUCKET":            bucket,
		"FLY_API_TOKEN":        flyToken,
		"FLY_FLAPS_BASE_URL":   fly.URL,
	}
	if opts.ImageRefs {
		settings["CDN_BUCKET"] = bucket
	}
	for k, v := range testSettings {
		settings[k] = v
	}
	for k, v := range opts.Settings {
		settings[k] = v
	}
	cfg, err := config.Load(func(k string) (string, bool) { v, ok := settings[k]; return v, ok })
	require.NoError(t, err)

	logger := opts.Logger
	if logger == nil {
		logger = slog.New(slog.NewTextHandler(testWriter{t}, &slog.HandlerOptions{Level: slog.LevelWarn}))
	}
	m := metrics.New(metrics.Config{Pool: pool, Logger: logger})
	backend, err := flycompute.New(context.Background(), flycompute.Config{APIToken: cfg.FlyAPIToken, BaseURL: cfg.FlyFlapsBaseURL, Logger: logger})
	require.NoError(t, err)
	pauses := pause.NewGate(pool)
	hooks, err := webhook.New(pool, cfg.Webhook(), logger, m)
	require.NoError(t, err)
	deps, err := executor.Register(jobs.Deps{Pool: pool, Store: store, Compute: backend, Settings: cfg.Jobs(), Logger: logger, Metrics: m, Pauses: pauses,
		Webhooks: hooks, Tracer: opts.Tracer},
		cfg.Executors, executor.Options{})
	require.NoError(t, err)
	var listener *jobs.Listener
	if opts.Listen {
		listener = &jobs.Listener{Pool: pool, ProcessID: jobs.NewProcessID(), Allowance: cfg.SweepRestartGrace, Logger: logger}
		listenCtx, stopListening := context.WithCancel(context.Background())
		t.Cleanup(stopListening)
		go listener.Run(listenCtx)
	}
	client, err := jobs.NewClient(deps, jobs.ClientConfig{FetchPollInterval: 100 * time.Millisecond, NoSweep: opts.NoSweep, Build: opts.Build, TestHooks: opts.Hooks, Queues: opts.Queues,
		Listener: listener})
	require.NoError(t, err)
	if !opts.NoWorkers {
		startClient(t, client)
	}

	apiCtx, apiCancel := context.WithCancel(context.Background())
	t.Cleanup(apiCancel)
	apiCfg := api.ConfigOf(cfg.API(), api.Parts{Pool: pool, River: client, Executors: deps.Executors, Store: store, Logger: logger, Metrics: m, Pauses: pauses,
		Webhooks: hooks, Tracer: opts.Tracer})
	apiCfg.Context = apiCtx
	// The tests of credentials fail many from this one address: the limit
	// on failures has a test of its own (api's TestFailedCredentialsLimited).
	apiCfg.FailureBurst = 1 << 20
	var h http.Handler = api.New(apiCfg)
	handler.Store(&h)
	apiClient, err := apiclient.New(apiclient.Config{URL: srv.URL, AdminToken: cfg.AdminToken, ReadToken: cfg.ReadToken, IngestToken: cfg.IngestToken})
	require.NoError(t, err)
	return &Env{Pool: pool, S3: s3, Bucket: bucket, Store: store, Fly: fly, Ingest: ingest, River: client, Config: cfg, Server: srv,
		Client: apiClient, Metrics: m, Deps: deps, settings: settings}
}

// startClient starts a River client until the test ends.
func startClient(t *testing.T, client *river.Client[pgx.Tx]) {
	ctx, cancel := context.WithCancel(context.Background())
	require.NoError(t, client.Start(ctx))
	t.Cleanup(func() {
		stopCtx, stopCancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer stopCancel()
		_ = client.Stop(stopCtx)
		cancel()
	})
}

// StartClient starts another River client on the same database, store
// and configuration, as a second orchestrator process would (e.g. with
// cfg.Queues ["ocr"]), until the test ends.
func (e *Env) StartClient(t *testing.T, cfg jobs.ClientConfig) *river.Client[pgx.Tx] {
	t.Helper()
	if cfg.FetchPollInterval == 0 {
		cfg.FetchPollInterval = 100 * time.Millisecond
	}
	client, err := jobs.NewClient(e.Deps, cfg)
	require.NoError(t, err)
	startClient(t, client)
	return client
}

// Settings are the environment the Env's configuration was loaded from,
// for a child process that should run as this orchestrator does.
func (e *Env) Settings() map[string]string { return maps.Clone(e.settings) }

// PutObject stores body at key in the test's bucket.
func (e *Env) PutObject(t *testing.T, key string, body []byte) {
	t.Helper()
	err := e.Store.Put(context.Background(), e.Bucket, key, strings.NewReader(string(body)), int64(len(body)), "application/octet-stream")
	require.NoError(t, err)
}

// Do sends a request to the API with the credential its route needs (the
// ingest token for intake, the admin token under /admin, else the read
// token) and returns the status code and body.
func (e *Env) Do(t *testing.T, method, path string, body io.Reader) (int, []byte) {
	t.Helper()
	token := e.Config.ReadToken
	switch {
	case method == http.MethodPost && (path == "/batches" || strings.HasPrefix(path, "/documents")):
		token = e.Config.IngestToken
	case strings.HasPrefix(path, "/admin/"):
		token = e.Config.AdminToken
	}
	return e.DoAuth(t, method, path, token, body)
}

// DoAuth sends a request with `Authorization: Bearer <token>`, or with no
// credential when token is "".
func (e *Env) DoAuth(t *testing.T, method, path, token string, body io.Reader) (int, []byte) {
	t.Helper()
	req, err := http.NewRequest(method, e.Server.URL+path, body)
	require.NoError(t, err)
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return resp.StatusCode, b
}

// Status fetches GET /status/:id, failing the test unless it answers 200.
func (e *Env) Status(t *testing.T, id string) status.Status {
	t.Helper()
	st, err := e.Client.Status(context.Background(), id)
	require.NoError(t, err, "status of %s", id)
	return statusOf(t, st)
}

// AwaitStatus polls the batch's status until done says so (or a minute
// passes) and returns it. Polling a condition, not sleeping a guess.
func (e *Env) AwaitStatus(t *testing.T, id string, done func(status.Status) bool) status.Status {
	t.Helper()
	return e.AwaitStatusWithin(t, id, 60*time.Second, done)
}

// AwaitStatusWithin is AwaitStatus with a deadline of limit.
func (e *Env) AwaitStatusWithin(t *testing.T, id string, limit time.Duration, done func(status.Status) bool) status.Status {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), limit)
	defer cancel()
	st, err := e.Client.Await(ctx, id, 20*time.Millisecond, func(st apiclient.Status) bool { return done(statusOf(t, st)) })
	if errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("batch %s did not reach the awaited state; last status: %+v", id, statusOf(t, st))
	}
	require.NoError(t, err, "status of %s", id)
	return statusOf(t, st)
}

// statusOf is the status document the client read, as the service
// type the tests compare with.
func statusOf(t *testing.T, st apiclient.Status) status.Status {
	t.Helper()
	var out status.Status
	if st.Raw != nil {
		require.NoError(t, json.Unmarshal(st.Raw, &out))
	}
	return out
}

// Ingest is a fake ingest service: it records every enqueue-processed call
// and answers FailFirst of them with 503.
type Ingest struct {
	URL       string
	FailFirst atomic.Int32
	mu        sync.Mutex
	calls     []IngestCall
}

// IngestCall is one call the fake ingest service received.
type IngestCall struct {
	Path           string
	IdempotencyKey string
	Body           []byte
	Status         int
}

func newIngest(t *testing.T) *Ingest {
	in := &Ingest{}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		status := http.StatusOK
		if in.FailFirst.Add(-1) >= 0 {
			status = http.StatusServiceUnavailable
		}
		in.mu.Lock()
		in.calls = append(in.calls, IngestCall{Path: r.URL.Path, IdempotencyKey: r.Header.Get("Idempotency-Key"), Body: body, Status: status})
		in.mu.Unlock()
		w.WriteHeader(status)
		_, _ = w.Write([]byte(`{"ok": true}`))
	}))
	t.Cleanup(srv.Close)
	in.URL = srv.URL
	return in
}

// Calls returns the calls received so far.
func (in *Ingest) Calls() []IngestCall {
	in.mu.Lock()
	defer in.mu.Unlock()
	return append([]IngestCall(nil), in.calls...)
}

// testWriter sends log output to the test log, so it shows only on failure.
type testWriter struct{ t *testing.T }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Helper()
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}

// requireTaskCountsExact fails the test when the counters the triggers keep
// (task_counts) differ from counting the tasks, whatever the test did to them.
func requireTaskCountsExact(t *testing.T, pool *pgxpool.Pool) {
	t.Helper()
	rows, err := pool.Query(context.Background(), `
		SELECT coalesce(c.batch_id, k.batch_id), coalesce(c.phase, k.phase), coalesce(c.status, k.status),
			coalesce(c.n, 0), coalesce(k.n, 0)
		FROM (SELECT batch_id, phase, status, count(*) AS n FROM tasks GROUP BY 1, 2, 3) c
		FULL JOIN (SELECT * FROM task_counts WHERE n <> 0) k USING (batch_id, phase, status)
		WHERE c.n IS DISTINCT FROM k.n`)
	require.NoError(t, err)
	defer rows.Close()
	for rows.Next() {
		var batch, phase, status string
		var counted, kept int64
		require.NoError(t, rows.Scan(&batch, &phase, &status, &counted, &kept))
		t.Errorf("task_counts of batch %s, phase %s, status %s: %d, but %d tasks", batch, phase, status, kept, counted)
	}
	require.NoError(t, rows.Err())
}
