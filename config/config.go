// Package config holds the orchestrator's settings. They are read once, by
// cmd/, from the environment through Load, from one table of declarations
// (package setting): the deployment's own (settings.go) and each kind of
// executor's, which the kinds declare themselves. Every other package
// takes the parts it needs as a small struct of its own (Jobs, Callbacks,
// API, Executors), so only cmd/ imports config. Names follow the
// "Configuration Reference" of spec 000, plus DATABASE_URL, LISTEN_ADDR,
// R2_ENDPOINT and the credentials.
package config

import (
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strings"
	"time"

	"github.com/arke-institute/orchestrator/api"
	"github.com/arke-institute/orchestrator/batches"
	"github.com/arke-institute/orchestrator/cost"
	"github.com/arke-institute/orchestrator/executor"
	"github.com/arke-institute/orchestrator/fanin"
	"github.com/arke-institute/orchestrator/jobs"
	"github.com/arke-institute/orchestrator/manifest"
	"github.com/arke-institute/orchestrator/phases"
	"github.com/arke-institute/orchestrator/provider"
	"github.com/arke-institute/orchestrator/setting"
	"github.com/arke-institute/orchestrator/tracing"
	"github.com/arke-institute/orchestrator/webhook"
)

// Config is everything the orchestrator reads from its environment: the
// deployment's own settings, and each kind of executor's (Executors).
// Packages take the parts they need as small structs of their own
// (Jobs, Callbacks, API, Executors).
type Config struct {
	DatabaseURL string
	// DatabaseMaxConns sizes the connection pool (DATABASE_MAX_CONNS).
	DatabaseMaxConns int
	// CallbackCommitters is how many groups of callbacks commit at once
	// (CALLBACK_COMMITTERS); CallbackQueueMax bounds the callbacks
	// waiting for a group commit (CALLBACK_QUEUE_MAX).
	CallbackCommitters int
	CallbackQueueMax   int
	ListenAddr         string
	// ShutdownTimeout bounds a drain (SHUTDOWN_TIMEOUT).
	ShutdownTimeout time.Duration
	// Admission are admission control's limits on intake.
	Admission batches.Limits
	// AdminToken, ReadToken, IngestToken and IngestSigningSecret are the
	// API's credentials; StatusPublic opens the status routes to everyone
	// (see api.Credentials).
	AdminToken          string
	ReadToken           string
	IngestToken         string
	IngestSigningSecret string
	StatusPublic        bool
	// MaxStreams bounds the event streams open at once (MAX_STREAMS).
	MaxStreams int
	// ClientIPHeader names the client behind a trusted proxy
	// (CLIENT_IP_HEADER).
	ClientIPHeader string

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
	// FlyFlapsBaseURL points the Machines API client elsewhere (a fake in
	// tests, or Fly's private http://_api.internal:4280).
	FlyFlapsBaseURL string

	// SweepInterval is how often timed-out tasks are failed and stalled
	// batches are nudged; SweepRestartGrace how long after Postgres or
	// this process started no task is timed out.
	SweepInterval     time.Duration
	SweepRestartGrace time.Duration

	// LocalDataDir is where the embedded default (no storage and no compute
	// settings, as `make run` starts it) keeps its generated tokens and
	// the run.env the operator commands read (LOCAL_DATA_DIR).
	LocalDataDir string
	// LocalS3Dir, LocalS3Addr and the key pair configure the embedded S3
	// server used when no R2 setting is given (LOCAL_S3_*).
	LocalS3Dir       string
	LocalS3Addr      string
	LocalS3AccessKey string
	LocalS3SecretKey string
	// LocalWorkerBin is the worker program the local machine runner starts
	// when no FLY_API_TOKEN is set; LocalMaxMachines caps how many run at
	// once.
	LocalWorkerBin   string
	LocalMaxMachines int

	// TaskMaxAttempts bounds the attempts of one task; TaskRetireLimit is
	// how long a task to be retried waits for its last attempt's machine
	// to be destroyed before the wait counts as an outage.
	TaskMaxAttempts int
	TaskRetireLimit time.Duration
	// TransientRetryWindow bounds how long an OCR ref or a document step
	// keeps being retried after transient failures or 429s.
	TransientRetryWindow time.Duration
	// InfraFailureMax bounds a phase's work failed by infrastructure.
	InfraFailureMax setting.Share
	// PriorityAging and PriorityShare keep low-priority work from
	// starving (PRIORITY_AGING, PRIORITY_SHARE).
	PriorityAging time.Duration
	PriorityShare int

	MaxFileSize      int64
	MaxBatchSize     int64
	MaxFilesPerBatch int64
	ManifestMaxBytes int64
	// MaxOutputsPerTask caps the output files one task's result may list
	// (MAX_OUTPUTS_PER_TASK).
	MaxOutputsPerTask int

	// Retention removes the processing state of batches finished long
	// ago (RETENTION_*).
	Retention jobs.Retention

	// Executors are the executors' settings, which each kind declares.
	Executors executor.Config

	// Webhooks are the webhooks' settings (WEBHOOK_*).
	Webhooks WebhookSettings

	// Prices price the cost estimates (PRICE_*).
	Prices cost.Prices

	// LogFormat is "json" or "text"; empty picks text on a terminal and JSON
	// otherwise.
	LogFormat string
	LogLevel  string
	// PprofAddr, CPUProfile and MetricsAddr turn on profiling and metrics
	// (PPROF_ADDR, CPU_PROFILE, METRICS_ADDR).
	PprofAddr   string
	CPUProfile  string
	MetricsAddr string

	// Tracing are OpenTelemetry's standard variables (OTEL_*).
	Tracing TracingSettings
}

// TracingSettings are the OTEL_* variables the orchestrator checks and
// documents; the OpenTelemetry SDK reads them from the environment itself.
type TracingSettings struct {
	Endpoint, TracesEndpoint, Headers, Protocol string
	ServiceName, Sampler                        string
	SamplerArg                                  float64
	Disabled                                    bool
}

// TracingConfig is the tracing's configuration: on when an OTLP endpoint
// is set and the SDK is not disabled.
func (c *Config) TracingConfig() tracing.Config {
	t := c.Tracing
	return tracing.Config{Enabled: (t.Endpoint != "" || t.TracesEndpoint != "") && !t.Disabled, ServiceName: t.ServiceName}
}

// DefaultDatabaseMaxConns is the pool size unless DATABASE_MAX_CONNS says
// otherwise: enough concurrent transactions for Postgres to group commits.
const DefaultDatabaseMaxConns = 40

// maxOutputsPerTask bounds MAX_OUTPUTS_PER_TASK: a 1 MiB callback body
// cannot list more output files than this.
const maxOutputsPerTask = 100000

// Load reads the configuration through lookup (os.LookupEnv in production, a
// map in tests). It reports every malformed value at once; missing required
// settings are checked separately by CheckServe, because `migrate` needs less
// than `serve`.
func Load(lookup func(string) (string, bool)) (*Config, error) {
	c := &Config{}
	if err := setting.Load(lookup, c.Groups()); err != nil {
		return nil, err
	}
	return c, nil
}

// Groups are the declarations of every setting, bound to c's fields: the
// deployment's, then each kind of executor's. Load reads them, the log of
// the configuration shows them (LogValue), and docs/configuration.md is
// generated from them.
func (c *Config) Groups() []setting.Group {
	return append(append(c.core(), cost.Settings(&c.Prices)), executor.Settings(&c.Executors)...)
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

// LogValue is the configuration as logs may show it: every setting by
// its name in lower case, the secrets (tokens, keys, the database
// password) saying only whether they are set (setting.Setting.Value), so
// logging a Config, even by mistake, leaks none of them.
func (c Config) LogValue() slog.Value {
	var attrs []slog.Attr
	for _, g := range c.Groups() {
		for _, s := range g.Settings {
			attrs = append(attrs, slog.String(strings.ToLower(s.Name), s.Value()))
		}
	}
	return slog.GroupValue(attrs...)
}

// String is LogValue's text, so that printing a Config (%v, %s) shows no
// secret either.
func (c Config) String() string { return c.LogValue().String() }

// GoString is String, for %#v.
func (c Config) GoString() string { return c.String() }

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
	missing = append(missing, c.Executors.Missing()...)
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

// Jobs are the pipeline's settings.
func (c *Config) Jobs() jobs.Settings {
	return jobs.Settings{
		Buckets:           map[phases.Bucket]string{phases.StagingBucket: c.R2Bucket, phases.ArchiveBucket: c.ArchiveBucket, phases.CDNBucket: c.CDNBucket},
		CDNPublicURL:      c.CDNPublicURL,
		CallbackURL:       c.OrchestratorURL,
		WorkerURL:         c.WorkerURL,
		Limits:            manifest.Limits{MaxFileSize: c.MaxFileSize, MaxBatchSize: c.MaxBatchSize, MaxFiles: c.MaxFilesPerBatch},
		ManifestMaxBytes:  c.ManifestMaxBytes,
		TaskMaxAttempts:   c.TaskMaxAttempts,
		TaskRetireLimit:   c.TaskRetireLimit,
		SweepInterval:     c.SweepInterval,
		SweepRestartGrace: c.SweepRestartGrace,
		Retention:         c.Retention,
		TransientRetry:    provider.Retry{Window: c.TransientRetryWindow, MaxBackoff: time.Minute},
		InfraFailureMax:   c.InfraFailureMax,
		Priorities:        jobs.Priorities{Aging: c.PriorityAging, Share: c.PriorityShare},
	}
}

// Callbacks are the group committer's settings.
func (c *Config) Callbacks() fanin.Config {
	return fanin.Config{Committers: c.CallbackCommitters, MaxQueued: c.CallbackQueueMax, MaxOutputs: c.MaxOutputsPerTask,
		TaskMaxAttempts: c.TaskMaxAttempts, TaskRetireLimit: c.TaskRetireLimit, TransientRetryWindow: c.TransientRetryWindow}
}

// WebhookSettings are the webhooks' settings as read (WEBHOOK_*).
type WebhookSettings struct {
	// SecretKey seals the signing secrets (base64, webhook.ParseKey).
	SecretKey string
	// AllowNetworks are CIDRs deliveries may reach whatever their kind.
	AllowNetworks string
	Timeout       time.Duration
	RetryWindow   time.Duration
	FirstRetry    time.Duration
	DisableAfter  time.Duration
}

// Webhook is the webhooks' configuration. Load has checked the key and
// the networks.
func (c *Config) Webhook() webhook.Config {
	w := c.Webhooks
	cfg := webhook.Config{Timeout: w.Timeout, RetryWindow: w.RetryWindow, FirstRetry: w.FirstRetry, DisableAfter: w.DisableAfter}
	if w.SecretKey != "" {
		cfg.Key, _ = webhook.ParseKey(w.SecretKey)
	}
	cfg.Allow, _ = webhook.ParseNetworks(w.AllowNetworks)
	return cfg
}

// Credentials are the API's credentials.
func (c *Config) Credentials() api.Credentials {
	return api.Credentials{AdminToken: c.AdminToken, ReadToken: c.ReadToken, IngestToken: c.IngestToken,
		IngestSigningSecret: c.IngestSigningSecret, StatusPublic: c.StatusPublic}
}

// API is the API's settings.
func (c *Config) API() api.Settings {
	return api.Settings{Credentials: c.Credentials(), Callbacks: c.Callbacks(), MaxStreams: c.MaxStreams, ClientIPHeader: c.ClientIPHeader, RetentionDays: c.Retention.Days, Admission: c.Admission,
		Documents: c.Executors.Documents, StagingBucket: c.R2Bucket, CDNBucket: c.CDNBucket, CDNPublicURL: c.CDNPublicURL, Prices: c.Prices}
}
