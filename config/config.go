// Package config holds the orchestrator's settings. They are read once, by
// cmd/orchestrator, from the environment through Load; every other package
// takes the parts it needs as plain values. Names follow the "Configuration
// Reference" of spec 000, plus DATABASE_URL, LISTEN_ADDR, R2_ENDPOINT and
// ADMIN_TOKEN.
package config

import (
	"errors"
	"fmt"
	"log/slog"
	"math"
	"net"
	"net/url"
	"runtime"
	"strconv"
	"strings"
	"time"

	"github.com/arke-institute/orchestrator/phases"
)

// Phase is the per-phase part of the configuration: the phase's registered
// defaults (phases.Spec) with the environment's overrides.
type Phase struct {
	// FlyAppName and WorkerImage select the Fly app and image of the phase's
	// machines (FLY_<SHORT>_APP_NAME, FLY_<SHORT>_WORKER_IMAGE).
	FlyAppName  string
	WorkerImage string
	// BatchSize is how many pending tasks one launch round claims
	// (BATCH_SIZE_<PHASE>).
	BatchSize int
	// AlarmDelay is the pause between launch rounds while tasks are pending
	// (ALARM_DELAY_<PHASE>, milliseconds).
	AlarmDelay time.Duration
	// TaskTimeout is how long a task may stay processing before it is failed
	// (TASK_TIMEOUT_<PHASE>, milliseconds).
	TaskTimeout time.Duration
	// TaskTimeoutPerGB is added to TaskTimeout per 10^9 bytes of a task's
	// input (TASK_TIMEOUT_PER_GB_<PHASE>, milliseconds): a 5 GB TIFF needs
	// longer than a small one.
	TaskTimeoutPerGB time.Duration
	// MemoryMB, CPUs and CPUKind size the phase's machines (spec 000 §4.3).
	MemoryMB int
	CPUs     int
	CPUKind  string
	// ChunkSize is how many directory groups one chunk of a chunked phase
	// holds (<SHORT>_CHUNK_SIZE, e.g. OCR_CHUNK_SIZE).
	ChunkSize int
	// Env holds the phase's own settings (phases.Spec.Settings) by name,
	// passed to its machines as they are.
	Env map[string]string
}

// Config is everything the orchestrator reads from its environment.
type Config struct {
	DatabaseURL string
	// DatabaseMaxConns sizes the connection pool (DATABASE_MAX_CONNS). pgx's
	// own default (4 on a 2-core machine) caps how many callbacks can be
	// committing at once far below what Postgres sustains.
	DatabaseMaxConns int
	// CallbackCommitters is how many groups of callbacks commit at once
	// (CALLBACK_COMMITTERS, default 1). Callbacks that arrive while these
	// are busy are applied together in the next group, one transaction for
	// all; more committers make smaller groups and more commits.
	CallbackCommitters int
	// CallbackQueueMax bounds the callbacks waiting for a group commit
	// (CALLBACK_QUEUE_MAX); past it callbacks are answered 503.
	CallbackQueueMax int
	ListenAddr       string
	// AdminToken opens the admin routes, River UI and the dashboard with
	// its controls, and every read (ADMIN_TOKEN).
	AdminToken string
	// ReadToken opens the reads: status, listings, events, streams and the
	// dashboard without its controls (READ_TOKEN).
	ReadToken string
	// IngestToken opens intake, POST /batches (INGEST_TOKEN).
	IngestToken string
	// IngestSigningSecret keys the HMAC-SHA256 signature (X-Signature)
	// that also opens intake (INGEST_SIGNING_SECRET).
	IngestSigningSecret string
	// StatusPublic opens GET /status/:batchId and its chunk status to
	// everyone, as spec 000 has it (STATUS_PUBLIC).
	StatusPublic bool
	// MaxStreams bounds the event streams (GET /batches/:id/stream) open
	// at once (MAX_STREAMS).
	MaxStreams int

	OrchestratorURL string
	WorkerURL       string
	CDNPublicURL    string
	CDNAPIURL       string

	R2AccountID       string
	R2AccessKeyID     string
	R2SecretAccessKey string
	R2Endpoint        string
	R2Bucket          string
	ArchiveBucket     string
	// CDNBucket is where image variants are uploaded, served at
	// CDN_PUBLIC_URL/<key>.
	CDNBucket string

	FlyAPIToken string
	FlyRegion   string
	// FlyFlapsBaseURL points the Machines API client elsewhere (a fake in
	// tests, or Fly's private http://_api.internal:4280).
	FlyFlapsBaseURL string
	// FlyLaunchRate and FlyLaunchBurst bound machine launches per app, shared
	// by every orchestrator on the database (Fly documents about 1/s with
	// bursts of 3).
	FlyLaunchRate  float64
	FlyLaunchBurst int
	// OCRLimit shapes the OCR provider's adaptive rate limit, one bucket
	// shared by every process (spec 004's INITIAL_MAX_TOKENS,
	// INITIAL_REFILL_RATE, MAX_MAX_TOKENS, MAX_REFILL_RATE, MIN_MAX_TOKENS,
	// MIN_REFILL_RATE).
	OCRLimit AdaptiveLimit
	// OCR is the OCR phase's provider and chunk processing (spec 004).
	OCR OCR
	// Documents configures document indexing (spec 003).
	Documents Documents
	// LaunchConcurrency is how many launch requests one launcher has in flight.
	LaunchConcurrency int
	// SweepInterval is how often timed-out tasks are failed and stalled
	// batches are nudged.
	SweepInterval time.Duration
	// SweepRestartGrace is how long after Postgres or this process started
	// no task is timed out (SWEEP_RESTART_GRACE, milliseconds): workers
	// retrying their callbacks through the outage (backoff up to 30 s) get
	// to deliver them first, instead of their attempts being superseded.
	SweepRestartGrace time.Duration

	// LocalDataDir is where the embedded default (no storage and no compute
	// settings, as `make run` starts it) keeps its generated admin token and
	// the run.env the operator commands read (LOCAL_DATA_DIR, default .data).
	LocalDataDir string

	// LocalS3Dir, LocalS3Addr and the key pair configure the embedded S3
	// server used when no R2 setting is given (LOCAL_S3_*).
	LocalS3Dir       string
	LocalS3Addr      string
	LocalS3AccessKey string
	LocalS3SecretKey string

	// LocalWorkerBin is the worker program the local machine runner starts
	// when no FLY_API_TOKEN is set (LOCAL_WORKER_BIN; default bin/worker,
	// else "worker" next to the orchestrator binary). LocalMaxMachines caps
	// how many run at once (LOCAL_MAX_MACHINES; default the number of CPUs).
	LocalWorkerBin   string
	LocalMaxMachines int

	Phases map[phases.Name]Phase

	AlarmDelayErrorRetry time.Duration
	// MaxRetryAttempts bounds the phase-level retries after permanent launch
	// errors (MAX_RETRY_ATTEMPTS); transient ones spend LaunchOutageBudget.
	MaxRetryAttempts int
	// LaunchOutageBudget is how long a phase's launches may keep failing
	// transiently (Fly 5xx, timeouts, no capacity) before the batch errs
	// (LAUNCH_OUTAGE_BUDGET, milliseconds).
	LaunchOutageBudget time.Duration
	// TaskMaxAttempts bounds the attempts of one task: a timeout or a
	// transient worker error is retried on a fresh machine until this many
	// attempts have failed (TASK_MAX_ATTEMPTS). A launch that made no
	// machine costs no attempt (jobs.maxUnlaunched bounds those).
	TaskMaxAttempts int
	// TaskRetireLimit is how long a task to be retried waits for its last
	// attempt's machine to be destroyed before it is launched anyway
	// (TASK_RETIRE_LIMIT, milliseconds).
	TaskRetireLimit time.Duration
	// CallbackRetryWindow is how long a worker keeps retrying its callback
	// while the orchestrator is unreachable or answers 5xx
	// (CALLBACK_RETRY_WINDOW, milliseconds; passed to the machines).
	CallbackRetryWindow time.Duration

	MaxFileSize  int64
	MaxBatchSize int64
	// MaxFilesPerBatch caps the files one manifest may list
	// (MAX_FILES_PER_BATCH); ManifestMaxBytes caps the manifest's size
	// (MANIFEST_MAX_BYTES), checked before it is read.
	MaxFilesPerBatch int64
	ManifestMaxBytes int64
	// MaxOutputsPerTask caps the output files one task's result may list
	// (MAX_OUTPUTS_PER_TASK: a TIFF's JPEGs, a PDF's page JPEGs and text
	// files); a callback listing more is refused, failing its task. Raise
	// it with PDF_MAX_PAGES: a PDF makes up to two files a page.
	MaxOutputsPerTask int

	// Retention removes the processing state of batches finished long
	// ago (RETENTION_*).
	Retention Retention

	// LogFormat is "json" or "text"; empty picks text on a terminal and JSON
	// otherwise.
	LogFormat string
	LogLevel  string

	// PprofAddr, when set (PPROF_ADDR, e.g. 127.0.0.1:6060), serves
	// net/http/pprof there, on a listener of its own apart from the API.
	// Off by default: profiles expose internals.
	PprofAddr string
	// CPUProfile, when set (CPU_PROFILE, a file path), records a CPU profile
	// of the whole run of `serve` and writes it there on shutdown.
	CPUProfile string
	// MetricsAddr, when set (METRICS_ADDR, e.g. :9091), serves Prometheus
	// metrics at /metrics there, on a listener of its own apart from the
	// API, which workers and ingest reach. Off by default.
	MetricsAddr string
}

// Retention says when and how the processing state of finished batches
// (tasks, chunks, events, intermediate file generations) is removed. The
// batch row, its final file generation and its documents stay.
type Retention struct {
	// Days is how long a batch keeps its processing state after it
	// finished, DONE or ERROR (RETENTION_DAYS, spec 002's 7); 0 keeps it
	// for ever.
	Days int
	// Staging also deletes the batch's objects under staging/{batch_id}/
	// in R2_BUCKET, all but the processed manifest (RETENTION_STAGING).
	Staging bool
	// Interval is how often the retention job looks for batches to prune
	// (RETENTION_INTERVAL).
	Interval time.Duration
	// DeleteRows bounds the rows one delete statement removes, each in a
	// transaction of its own (RETENTION_DELETE_ROWS).
	DeleteRows int
}

// Age is how long after it finished a batch is pruned; zero when
// retention is off.
func (r Retention) Age() time.Duration { return time.Duration(r.Days) * 24 * time.Hour }

// Documents configures document indexing (spec 003): what may be indexed
// and the embeddings and tags providers. Without an API URL the local
// providers are used: a feature-hashing embedder and a TF-IDF tagger.
type Documents struct {
	// Prefix is where in R2_BUCKET documents may be (DOCUMENTS_PREFIX).
	Prefix string
	// MaxBytes bounds a document's size (DOCUMENT_MAX_BYTES).
	MaxBytes int64
	// ChunkTokens is the chunks' target size (DOCUMENT_CHUNK_TOKENS).
	ChunkTokens int
	// EmbeddingsAPIURL, EmbeddingsAPIKey, EmbeddingsModel and
	// EmbeddingsDimensions are the embeddings provider's
	// (EMBEDDINGS_API_URL, EMBEDDINGS_API_KEY, EMBEDDINGS_MODEL,
	// EMBEDDINGS_DIMENSIONS).
	EmbeddingsAPIURL     string
	EmbeddingsAPIKey     string
	EmbeddingsModel      string
	EmbeddingsDimensions int
	// TagsAPIURL, TagsAPIKey and TagsModel are the tags provider's
	// (TAGS_API_URL, TAGS_API_KEY, TAGS_MODEL).
	TagsAPIURL string
	TagsAPIKey string
	TagsModel  string
	// Timeout bounds one call to either provider (DOCUMENT_TIMEOUT_MS). A
	// step's run lasts a little longer, and River rescues a crashed
	// process's step jobs once that has passed.
	Timeout time.Duration
}

// OCR configures the OCR phase: its provider and how its chunk jobs work.
type OCR struct {
	// APIURL is the OpenAI-compatible provider's base (OCR_API_URL, e.g.
	// https://api.deepinfra.com/v1/openai); empty runs the local tesseract
	// command instead. APIKey (OCR_API_KEY) is required with it, and never
	// logged. Model is OCR_MODEL.
	APIURL string
	APIKey string
	Model  string
	// Timeout bounds one call to the engine (OCR_TIMEOUT_MS). A chunk
	// job's run lasts a little longer, and River rescues a crashed
	// process's chunk jobs once that has passed.
	Timeout time.Duration
	// MaxConcurrentPerAlarm is how many items one run of a chunk job sends
	// at once (MAX_CONCURRENT_PER_ALARM); AlarmInterval the pause before
	// its next run while items remain (ALARM_INTERVAL_MS).
	MaxConcurrentPerAlarm int
	AlarmInterval         time.Duration
	// MaxRetriesPerRef bounds the retries of one item after transient
	// errors (MAX_RETRIES_PER_REF; a 429 uses none); MaxGlobalRetries
	// those of a chunk after its job failed (MAX_GLOBAL_RETRIES).
	MaxRetriesPerRef int
	MaxGlobalRetries int
	// MaxFailedFraction ends a chunk ERROR when more than this share of
	// its items failed (OCR_MAX_FAILED_FRACTION).
	MaxFailedFraction float64
	// LimitPerChunk gives every chunk its own bucket, as spec 004 does,
	// instead of one per provider (OCR_LIMIT_PER_CHUNK; for comparison:
	// the fleet then sends as many times the provider's rate as it has
	// chunks).
	LimitPerChunk bool
	// Workers is how many chunk jobs one process runs at once: the
	// workers of its "ocr" queue (OCR_WORKERS).
	Workers int
}

// AdaptiveLimit is the range of an adaptive rate limit on an external API:
// a burst of tokens (requests) and a refill rate (requests per second), each
// starting at its initial value and moving between its minimum and maximum
// as the provider answers. Its fields are ratelimit.Adaptive's, so the caller
// converts it with ratelimit.Adaptive(c.OCRLimit); config stays apart from
// the database.
type AdaptiveLimit struct {
	InitialMaxTokens  float64
	InitialRefillRate float64
	MaxMaxTokens      float64
	MaxRefillRate     float64
	MinMaxTokens      float64
	MinRefillRate     float64
}

// DefaultAdaptiveLimit is spec 004's: start at 5 tokens and 3 requests/s,
// between 2 tokens at 1/s and 15 tokens at 10/s.
func DefaultAdaptiveLimit() AdaptiveLimit {
	return AdaptiveLimit{
		InitialMaxTokens:  5,
		InitialRefillRate: 3,
		MaxMaxTokens:      15,
		MaxRefillRate:     10,
		MinMaxTokens:      2,
		MinRefillRate:     1,
	}
}

// DefaultCallbackCommitters is CallbackCommitters unless CALLBACK_COMMITTERS
// says otherwise. On 2 cores one committer, whose groups grow while it
// commits, gave more callbacks a second than 2, 4 or 8 (larger groups,
// fewer commits; measured with make bench's callback ingest).
const DefaultCallbackCommitters = 1

// DefaultTaskRetireLimit is TASK_RETIRE_LIMIT unless set.
const DefaultTaskRetireLimit = 2 * time.Minute

// maxOutputsPerTask bounds MAX_OUTPUTS_PER_TASK: a 1 MiB callback body
// cannot list more output files than this.
const maxOutputsPerTask = 100000

// DefaultDatabaseMaxConns is the pool size unless DATABASE_MAX_CONNS says
// otherwise: enough concurrent transactions for Postgres to group commits.
const DefaultDatabaseMaxConns = 40

// Load reads the configuration through lookup (os.LookupEnv in production, a
// map in tests). It reports every malformed value at once; missing required
// settings are checked separately by CheckServe, because `migrate` needs less
// than `serve`.
func Load(lookup func(string) (string, bool)) (*Config, error) {
	specs := make([]phases.Spec, 0, len(phases.All()))
	for _, p := range phases.All() {
		specs = append(specs, p.Spec())
	}
	return load(lookup, specs)
}

// load is Load for the phases of specs, so tests can load a phase that is
// not registered.
func load(lookup func(string) (string, bool), specs []phases.Spec) (*Config, error) {
	r := reader{lookup: lookup}
	c := &Config{
		DatabaseURL:         r.str("DATABASE_URL", ""),
		DatabaseMaxConns:    r.positiveInt("DATABASE_MAX_CONNS", DefaultDatabaseMaxConns),
		CallbackCommitters:  r.positiveInt("CALLBACK_COMMITTERS", DefaultCallbackCommitters),
		CallbackQueueMax:    r.positiveInt("CALLBACK_QUEUE_MAX", 50000),
		ListenAddr:          r.str("LISTEN_ADDR", ":8080"),
		MaxStreams:          r.intIn("MAX_STREAMS", 256, 1, 100000),
		AdminToken:          r.str("ADMIN_TOKEN", ""),
		ReadToken:           r.str("READ_TOKEN", ""),
		IngestToken:         r.str("INGEST_TOKEN", ""),
		IngestSigningSecret: r.str("INGEST_SIGNING_SECRET", ""),
		StatusPublic:        r.boolean("STATUS_PUBLIC", false),
		OrchestratorURL:     strings.TrimRight(r.str("ORCHESTRATOR_URL", ""), "/"),
		WorkerURL:           strings.TrimRight(r.str("WORKER_URL", ""), "/"),
		CDNPublicURL:        strings.TrimRight(r.str("CDN_PUBLIC_URL", ""), "/"),
		CDNAPIURL:           strings.TrimRight(r.str("CDN_API_URL", ""), "/"),
		R2AccountID:         r.str("R2_ACCOUNT_ID", ""),
		R2AccessKeyID:       r.str("R2_ACCESS_KEY_ID", ""),
		R2SecretAccessKey:   r.str("R2_SECRET_ACCESS_KEY", ""),
		R2Endpoint:          strings.TrimRight(r.str("R2_ENDPOINT", ""), "/"),
		R2Bucket:            r.str("R2_BUCKET", "arke-staging"),
		ArchiveBucket:       r.str("ARCHIVE_BUCKET", "arke-archive"),
		CDNBucket:           r.str("CDN_BUCKET", "arke-cdn"),
		FlyAPIToken:         r.str("FLY_API_TOKEN", ""),
		FlyRegion:           r.str("FLY_REGION", "ord"),
		FlyFlapsBaseURL:     strings.TrimRight(r.str("FLY_FLAPS_BASE_URL", ""), "/"),
		FlyLaunchRate:       r.positiveFloat("FLY_LAUNCH_RATE", 1),
		FlyLaunchBurst:      r.positiveInt("FLY_LAUNCH_BURST", 3),
		OCRLimit:            r.adaptiveLimit("", DefaultAdaptiveLimit()),
		OCR: OCR{
			APIURL:                strings.TrimRight(r.str("OCR_API_URL", ""), "/"),
			APIKey:                r.str("OCR_API_KEY", ""),
			Model:                 r.str("OCR_MODEL", "allenai/olmOCR-2-7B-1025"),
			Timeout:               r.millis("OCR_TIMEOUT_MS", 45*time.Second),
			MaxConcurrentPerAlarm: r.intIn("MAX_CONCURRENT_PER_ALARM", 5, 1, 100),
			AlarmInterval:         r.millis("ALARM_INTERVAL_MS", 300*time.Millisecond),
			MaxRetriesPerRef:      r.intIn("MAX_RETRIES_PER_REF", 3, 0, 100),
			MaxGlobalRetries:      r.intIn("MAX_GLOBAL_RETRIES", 5, 0, 100),
			MaxFailedFraction:     r.fraction("OCR_MAX_FAILED_FRACTION", 0.5),
			LimitPerChunk:         r.boolean("OCR_LIMIT_PER_CHUNK", false),
			Workers:               r.intIn("OCR_WORKERS", 50, 1, 1000),
		},
		Documents: Documents{
			Prefix:               r.str("DOCUMENTS_PREFIX", "documents/"),
			MaxBytes:             r.positiveInt64("DOCUMENT_MAX_BYTES", 20_000_000),
			ChunkTokens:          r.intIn("DOCUMENT_CHUNK_TOKENS", 500, 50, 8000),
			EmbeddingsAPIURL:     strings.TrimRight(r.str("EMBEDDINGS_API_URL", ""), "/"),
			EmbeddingsAPIKey:     r.str("EMBEDDINGS_API_KEY", ""),
			EmbeddingsModel:      r.str("EMBEDDINGS_MODEL", "text-embedding-3-small"),
			EmbeddingsDimensions: r.intIn("EMBEDDINGS_DIMENSIONS", 512, 8, 4096),
			TagsAPIURL:           strings.TrimRight(r.str("TAGS_API_URL", ""), "/"),
			TagsAPIKey:           r.str("TAGS_API_KEY", ""),
			TagsModel:            r.str("TAGS_MODEL", "gpt-4o-mini"),
			Timeout:              r.millis("DOCUMENT_TIMEOUT_MS", 45*time.Second),
		},
		LaunchConcurrency:    r.positiveInt("LAUNCH_CONCURRENCY", 32),
		SweepInterval:        r.millis("SWEEP_INTERVAL", 5*time.Second),
		SweepRestartGrace:    r.nonNegativeMillis("SWEEP_RESTART_GRACE", 40*time.Second),
		LocalDataDir:         r.str("LOCAL_DATA_DIR", ".data"),
		LocalS3Dir:           r.str("LOCAL_S3_DIR", ".data/s3"),
		LocalS3Addr:          r.str("LOCAL_S3_ADDR", "127.0.0.1:7070"),
		LocalS3AccessKey:     r.str("LOCAL_S3_ACCESS_KEY", "local"),
		LocalS3SecretKey:     r.str("LOCAL_S3_SECRET_KEY", "localsecret"),
		LocalWorkerBin:       r.str("LOCAL_WORKER_BIN", ""),
		LocalMaxMachines:     r.positiveInt("LOCAL_MAX_MACHINES", runtime.NumCPU()),
		AlarmDelayErrorRetry: r.millis("ALARM_DELAY_ERROR_RETRY", 30*time.Second),
		MaxRetryAttempts:     r.positiveInt("MAX_RETRY_ATTEMPTS", 5),
		LaunchOutageBudget:   r.millis("LAUNCH_OUTAGE_BUDGET", 30*time.Minute),
		TaskMaxAttempts:      r.intIn("TASK_MAX_ATTEMPTS", 3, 1, 100),
		TaskRetireLimit:      r.millis("TASK_RETIRE_LIMIT", DefaultTaskRetireLimit),
		CallbackRetryWindow:  r.millis("CALLBACK_RETRY_WINDOW", 15*time.Minute),
		MaxFileSize:          r.positiveInt64("MAX_FILE_SIZE", 5<<30),
		MaxBatchSize:         r.positiveInt64("MAX_BATCH_SIZE", 100<<30),
		MaxFilesPerBatch:     r.positiveInt64("MAX_FILES_PER_BATCH", 200_000),
		ManifestMaxBytes:     r.positiveInt64("MANIFEST_MAX_BYTES", 64<<20),
		MaxOutputsPerTask:    r.intIn(phases.MaxOutputsSetting, phases.DefaultMaxOutputs, 1, maxOutputsPerTask),
		LogFormat:            r.oneOf("LOG_FORMAT", "", "json", "text"),
		LogLevel:             r.oneOf("LOG_LEVEL", "info", "debug", "info", "warn", "error"),
		PprofAddr:            r.str("PPROF_ADDR", ""),
		CPUProfile:           r.str("CPU_PROFILE", ""),
		MetricsAddr:          r.str("METRICS_ADDR", ""),
		Phases:               make(map[phases.Name]Phase),
	}
	c.Retention = Retention{
		Days:       r.intIn("RETENTION_DAYS", 7, 0, 36500),
		Staging:    r.boolean("RETENTION_STAGING", false),
		Interval:   r.millis("RETENTION_INTERVAL", time.Hour),
		DeleteRows: r.intIn("RETENTION_DELETE_ROWS", 5000, 1, 1_000_000),
	}
	apps := make(map[string]string) // Fly app -> the Short of the phase using it
	for _, spec := range specs {
		name, def := string(spec.Name), spec.Defaults
		pc := Phase{Env: make(map[string]string, len(spec.Settings))}
		machines := spec.Worker != "" // a worker program runs on machines
		if machines {
			pc.BatchSize = r.positiveInt("BATCH_SIZE_"+name, def.BatchSize)
			pc.AlarmDelay = r.millis("ALARM_DELAY_"+name, def.AlarmDelay)
			pc.TaskTimeout = r.millis("TASK_TIMEOUT_"+name, def.TaskTimeout)
			pc.TaskTimeoutPerGB = r.nonNegativeMillis("TASK_TIMEOUT_PER_GB_"+name, def.TaskTimeoutPerGB)
			pc.MemoryMB, pc.CPUs, pc.CPUKind = def.Guest.MemoryMB, def.Guest.CPUs, def.Guest.CPUKind
		}
		for _, st := range spec.Settings {
			pc.Env[st.Name] = strconv.Itoa(r.intIn(st.Name, st.Default, st.Min, st.Max))
		}
		for _, env := range spec.SharedEnv {
			if _, ok := c.Shared(env); !ok {
				r.problems = append(r.problems, fmt.Sprintf("phase %s passes %s to its machines, which is no setting", name, env))
			}
		}
		if !machines {
			// No machines: no Fly app, image or app of its own to check.
			// A documents phase has the document settings (Documents).
			if def.ChunkSize > 0 {
				pc.ChunkSize = r.intIn(spec.Short+"_CHUNK_SIZE", def.ChunkSize, 1, 10000)
			}
			c.Phases[spec.Name] = pc
			continue
		}
		pc.FlyAppName = r.str("FLY_"+spec.Short+"_APP_NAME", def.FlyAppName)
		pc.WorkerImage = r.str("FLY_"+spec.Short+"_WORKER_IMAGE", def.WorkerImage)
		c.Phases[spec.Name] = pc
		// Machines are told apart by their app (the local runner picks the
		// worker program by it), so each phase needs an app of its own.
		if other, dup := apps[pc.FlyAppName]; dup {
			r.problems = append(r.problems, fmt.Sprintf("FLY_%s_APP_NAME and FLY_%s_APP_NAME are both %q; each phase needs an app of its own", other, spec.Short, pc.FlyAppName))
		}
		apps[pc.FlyAppName] = spec.Short
	}
	if c.OrchestratorURL == "" {
		c.OrchestratorURL = localURL(c.ListenAddr)
	}
	if len(r.problems) > 0 {
		return nil, fmt.Errorf("invalid configuration: %s", strings.Join(r.problems, "; "))
	}
	return c, nil
}

// localURL is where workers on this machine reach a server listening on
// addr: the default ORCHESTRATOR_URL for local runs.
func localURL(addr string) string {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return "http://127.0.0.1:8080"
	}
	if host == "" || host == "0.0.0.0" || host == "::" {
		host = "127.0.0.1"
	}
	return "http://" + net.JoinHostPort(host, port)
}

// LogValue is the configuration as logs may show it: the secrets (tokens,
// storage keys, the database password) only say whether they are set, so
// logging a Config, even by mistake, leaks none of them.
func (c Config) LogValue() slog.Value {
	set := func(v string) string {
		if v == "" {
			return ""
		}
		return "[set]"
	}
	dbURL := set(c.DatabaseURL)
	if u, err := url.Parse(c.DatabaseURL); err == nil && u.Scheme != "" {
		dbURL = redactURL(c.DatabaseURL) // a keyword/value string stays "[set]"
	}
	attrs := []slog.Attr{
		slog.String("database_url", dbURL),
		slog.Int("database_max_conns", c.DatabaseMaxConns),
		slog.Int("callback_committers", c.CallbackCommitters),
		slog.String("listen_addr", c.ListenAddr),
		slog.String("admin_token", set(c.AdminToken)),
		slog.String("read_token", set(c.ReadToken)),
		slog.String("ingest_token", set(c.IngestToken)),
		slog.String("ingest_signing_secret", set(c.IngestSigningSecret)),
		slog.Bool("status_public", c.StatusPublic),
		slog.String("orchestrator_url", redactURL(c.OrchestratorURL)),
		slog.String("worker_url", redactURL(c.WorkerURL)),
		slog.String("cdn_public_url", redactURL(c.CDNPublicURL)),
		slog.String("r2_account_id", c.R2AccountID),
		slog.String("r2_access_key_id", set(c.R2AccessKeyID)),
		slog.String("r2_secret_access_key", set(c.R2SecretAccessKey)),
		slog.String("r2_endpoint", redactURL(c.R2Endpoint)),
		slog.String("r2_bucket", c.R2Bucket),
		slog.String("archive_bucket", c.ArchiveBucket),
		slog.String("cdn_bucket", c.CDNBucket),
		slog.String("fly_api_token", set(c.FlyAPIToken)),
		slog.String("fly_region", c.FlyRegion),
		slog.String("fly_flaps_base_url", redactURL(c.FlyFlapsBaseURL)),
		slog.String("ocr_api_url", redactURL(c.OCR.APIURL)),
		slog.String("ocr_api_key", set(c.OCR.APIKey)),
		slog.String("embeddings_api_url", redactURL(c.Documents.EmbeddingsAPIURL)),
		slog.String("embeddings_api_key", set(c.Documents.EmbeddingsAPIKey)),
		slog.String("tags_api_url", redactURL(c.Documents.TagsAPIURL)),
		slog.String("tags_api_key", set(c.Documents.TagsAPIKey)),
		slog.String("ocr_model", c.OCR.Model),
		slog.String("local_s3_access_key", set(c.LocalS3AccessKey)),
		slog.String("local_s3_secret_key", set(c.LocalS3SecretKey)),
		slog.String("log_format", c.LogFormat),
		slog.String("log_level", c.LogLevel),
		slog.String("metrics_addr", c.MetricsAddr),
		slog.String("pprof_addr", c.PprofAddr),
	}
	return slog.GroupValue(attrs...)
}

// String is LogValue's text, so that printing a Config (%v, %s) shows no
// secret either.
func (c Config) String() string { return c.LogValue().String() }

// GoString is String, for %#v.
func (c Config) GoString() string { return c.String() }

// redactURL masks the password of a URL's user info, if it has one, and
// the values of query parameters that may hold a secret (password,
// sslpassword, token, key, secret, signature, ...).
func redactURL(s string) string {
	u, err := url.Parse(s)
	if err != nil {
		return "[invalid URL]"
	}
	if u.RawQuery != "" {
		q := u.Query()
		for k := range q {
			lk := strings.ToLower(k)
			for _, w := range []string{"password", "token", "key", "secret", "signature", "credential"} {
				if strings.Contains(lk, w) {
					q[k] = []string{"xxxxx"}
					break
				}
			}
		}
		u.RawQuery = q.Encode()
	}
	return u.Redacted()
}

// Shared is the value of an orchestrator-wide setting that phases may pass
// to their machines (phases.Spec.SharedEnv), by its environment name; false
// for a name that is not one of them. It is read at launch, so values that
// serve fills in after Load (the local CDN URL) are seen.
func (c *Config) Shared(name string) (string, bool) {
	switch name {
	case "ARCHIVE_BUCKET":
		return c.ArchiveBucket, true
	case "CDN_BUCKET":
		return c.CDNBucket, true
	case "CDN_PUBLIC_URL":
		return c.CDNPublicURL, true
	}
	return "", false
}

// LocalStorage reports whether no R2 setting is given at all, in which case
// the orchestrator runs its embedded local S3 server.
func (c *Config) LocalStorage() bool {
	return c.R2AccountID == "" && c.R2Endpoint == "" && c.R2AccessKeyID == "" && c.R2SecretAccessKey == ""
}

// CheckMigrate reports the settings `migrate` needs that are missing.
func (c *Config) CheckMigrate() error {
	if c.DatabaseURL == "" {
		return errors.New("missing required setting: DATABASE_URL")
	}
	return nil
}

// CheckServe reports the settings `serve` needs that are missing, naming
// each one. Storage is all or nothing: no R2 setting at all means the local
// S3 server; a partial set is a mistake worth stopping for.
func (c *Config) CheckServe() error {
	var missing []string
	if c.DatabaseURL == "" {
		missing = append(missing, "DATABASE_URL")
	}
	if c.OCR.APIURL != "" && c.OCR.APIKey == "" {
		missing = append(missing, "OCR_API_KEY (OCR_API_URL is set)")
	}
	if c.Documents.EmbeddingsAPIURL != "" && c.Documents.EmbeddingsAPIKey == "" {
		missing = append(missing, "EMBEDDINGS_API_KEY (EMBEDDINGS_API_URL is set)")
	}
	if c.Documents.TagsAPIURL != "" && c.Documents.TagsAPIKey == "" {
		missing = append(missing, "TAGS_API_KEY (TAGS_API_URL is set)")
	}
	if err := missingSettings(append(missing, c.missingStorage()...)); err != nil {
		return err
	}
	if problems := c.credentialProblems(); len(problems) > 0 {
		return fmt.Errorf("invalid configuration: %s", strings.Join(problems, "; "))
	}
	return nil
}

// credentialProblems refuses credentials that would open more than their
// own routes: each token is for one kind of caller, so no two may be equal
// (an admin token that is also the ingest token would open intake to
// admins), and a secret too short to resist guessing is refused.
func (c *Config) credentialProblems() []string {
	creds := []struct{ name, value string }{
		{"ADMIN_TOKEN", c.AdminToken}, {"READ_TOKEN", c.ReadToken},
		{"INGEST_TOKEN", c.IngestToken}, {"INGEST_SIGNING_SECRET", c.IngestSigningSecret},
	}
	var problems []string
	for i, a := range creds {
		if a.value == "" {
			continue
		}
		if len(a.value) < MinSecretLength {
			problems = append(problems, fmt.Sprintf("%s must be at least %d characters (e.g. openssl rand -hex 24)", a.name, MinSecretLength))
		}
		for _, b := range creds[i+1:] {
			if a.value == b.value {
				problems = append(problems, fmt.Sprintf("%s and %s must differ: each opens different routes", a.name, b.name))
			}
		}
	}
	return problems
}

// MinSecretLength is the shortest token or signing secret accepted.
const MinSecretLength = 16

// CheckStorage reports a partial set of R2 settings (none at all means the
// local S3 server), for commands that only touch storage, like submit.
func (c *Config) CheckStorage() error {
	return missingSettings(c.missingStorage())
}

// missingStorage names the R2 settings missing from a partial set.
func (c *Config) missingStorage() []string {
	if c.LocalStorage() {
		return nil
	}
	var missing []string
	if c.R2AccountID == "" && c.R2Endpoint == "" {
		missing = append(missing, "R2_ACCOUNT_ID (or R2_ENDPOINT)")
	}
	if c.R2AccessKeyID == "" {
		missing = append(missing, "R2_ACCESS_KEY_ID")
	}
	if c.R2SecretAccessKey == "" {
		missing = append(missing, "R2_SECRET_ACCESS_KEY")
	}
	return missing
}

func missingSettings(missing []string) error {
	if len(missing) > 0 {
		return fmt.Errorf("missing required setting: %s", strings.Join(missing, ", "))
	}
	return nil
}

// reader parses settings and collects every problem instead of stopping at
// the first, so one run of `serve` tells an operator all that is wrong.
type reader struct {
	lookup   func(string) (string, bool)
	problems []string
}

func (r *reader) str(name, def string) string {
	v, ok := r.lookup(name)
	v = strings.TrimSpace(v)
	if !ok || v == "" {
		return def
	}
	return v
}

func (r *reader) positiveInt64(name string, def int64) int64 {
	v := r.str(name, "")
	if v == "" {
		return def
	}
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil || n <= 0 {
		r.problems = append(r.problems, fmt.Sprintf("%s must be a positive integer, got %q", name, v))
		return def
	}
	return n
}

func (r *reader) positiveFloat(name string, def float64) float64 {
	v := r.str(name, "")
	if v == "" {
		return def
	}
	f, err := strconv.ParseFloat(v, 64)
	if err != nil || !(f > 0) || math.IsInf(f, 0) { // !(f > 0) refuses NaN too
		r.problems = append(r.problems, fmt.Sprintf("%s must be a positive number, got %q", name, v))
		return def
	}
	return f
}

// intIn reads a whole number in [lo, hi].
func (r *reader) intIn(name string, def, lo, hi int) int {
	v := r.str(name, "")
	if v == "" {
		return def
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < lo || n > hi {
		r.problems = append(r.problems, fmt.Sprintf("%s must be a whole number from %d to %d, got %q", name, lo, hi, v))
		return def
	}
	return n
}

// adaptiveLimit reads an adaptive limit from spec 004's six settings, their
// names after prefix (e.g. "EMBEDDINGS_" for EMBEDDINGS_INITIAL_MAX_TOKENS),
// and checks that each initial value lies between its minimum and maximum.
func (r *reader) adaptiveLimit(prefix string, def AdaptiveLimit) AdaptiveLimit {
	l := AdaptiveLimit{
		InitialMaxTokens:  r.positiveFloat(prefix+"INITIAL_MAX_TOKENS", def.InitialMaxTokens),
		InitialRefillRate: r.positiveFloat(prefix+"INITIAL_REFILL_RATE", def.InitialRefillRate),
		MaxMaxTokens:      r.positiveFloat(prefix+"MAX_MAX_TOKENS", def.MaxMaxTokens),
		MaxRefillRate:     r.positiveFloat(prefix+"MAX_REFILL_RATE", def.MaxRefillRate),
		MinMaxTokens:      r.positiveFloat(prefix+"MIN_MAX_TOKENS", def.MinMaxTokens),
		MinRefillRate:     r.positiveFloat(prefix+"MIN_REFILL_RATE", def.MinRefillRate),
	}
	if l.MinMaxTokens < 1 {
		r.problems = append(r.problems, fmt.Sprintf("%sMIN_MAX_TOKENS must be at least 1 (a bucket holding less never grants a token), got %v", prefix, l.MinMaxTokens))
	}
	if l.MinMaxTokens > l.InitialMaxTokens || l.InitialMaxTokens > l.MaxMaxTokens {
		r.problems = append(r.problems, fmt.Sprintf("%[1]sMIN_MAX_TOKENS <= %[1]sINITIAL_MAX_TOKENS <= %[1]sMAX_MAX_TOKENS must hold, got %[2]v, %[3]v, %[4]v", prefix, l.MinMaxTokens, l.InitialMaxTokens, l.MaxMaxTokens))
	}
	if l.MinRefillRate > l.InitialRefillRate || l.InitialRefillRate > l.MaxRefillRate {
		r.problems = append(r.problems, fmt.Sprintf("%[1]sMIN_REFILL_RATE <= %[1]sINITIAL_REFILL_RATE <= %[1]sMAX_REFILL_RATE must hold, got %[2]v, %[3]v, %[4]v", prefix, l.MinRefillRate, l.InitialRefillRate, l.MaxRefillRate))
	}
	return l
}

// fraction reads a number in [0, 1].
func (r *reader) fraction(name string, def float64) float64 {
	v := r.str(name, "")
	if v == "" {
		return def
	}
	f, err := strconv.ParseFloat(v, 64)
	if err != nil || !(f >= 0 && f <= 1) {
		r.problems = append(r.problems, fmt.Sprintf("%s must be a number from 0 to 1, got %q", name, v))
		return def
	}
	return f
}

// boolean reads true/false (also 1/0, yes/no, on/off).
func (r *reader) boolean(name string, def bool) bool {
	switch v := strings.ToLower(r.str(name, "")); v {
	case "":
		return def
	case "1", "true", "yes", "on":
		return true
	case "0", "false", "no", "off":
		return false
	default:
		r.problems = append(r.problems, fmt.Sprintf("%s must be true or false, got %q", name, v))
		return def
	}
}

func (r *reader) positiveInt(name string, def int) int {
	return int(r.positiveInt64(name, int64(def)))
}

// millis reads a duration given in milliseconds, as spec 000's settings are;
// a Go duration ("5s", "250ms") is accepted too.
func (r *reader) millis(name string, def time.Duration) time.Duration {
	v := r.str(name, "")
	if v == "" {
		return def
	}
	if n, err := strconv.ParseInt(v, 10, 64); err == nil && n > 0 {
		return time.Duration(n) * time.Millisecond
	}
	if d, err := time.ParseDuration(v); err == nil && d > 0 {
		return d
	}
	r.problems = append(r.problems, fmt.Sprintf("%s must be a positive number of milliseconds, got %q", name, v))
	return def
}

func (r *reader) oneOf(name, def string, allowed ...string) string {
	v := strings.ToLower(r.str(name, def))
	for _, a := range allowed {
		if v == a {
			return v
		}
	}
	if v == def {
		return v
	}
	r.problems = append(r.problems, fmt.Sprintf("%s must be one of %s, got %q", name, strings.Join(allowed, ", "), v))
	return def
}

// nonNegativeMillis is millis that also accepts 0 (nothing added).
func (r *reader) nonNegativeMillis(name string, def time.Duration) time.Duration {
	if v := r.str(name, ""); v == "0" {
		return 0
	}
	return r.millis(name, def)
}
