package config

import (
	"runtime"
	"time"

	"github.com/arke-institute/orchestrator/batches"
	"github.com/arke-institute/orchestrator/fanin"
	"github.com/arke-institute/orchestrator/phases"
	"github.com/arke-institute/orchestrator/setting"
	"github.com/arke-institute/orchestrator/webhook"
)

// core declares the deployment's own settings into c: the service, its
// credentials, storage, machines, limits, tasks, retention and the
// embedded default.
func (c *Config) core() []setting.Group {
	service := setting.Group{
		Title: "Service",
		Settings: []setting.Setting{
			setting.String(&c.DatabaseURL, "DATABASE_URL", "", "PostgreSQL URL; `make run` sets it to its local cluster").Shown("(required)").Masked(),
			setting.PositiveInt(&c.DatabaseMaxConns, "DATABASE_MAX_CONNS", DefaultDatabaseMaxConns, "connection pool size (the API and the job workers share it); enough concurrent transactions for Postgres to group commits"),
			setting.String(&c.ListenAddr, "LISTEN_ADDR", ":8080", "HTTP listen address. Connections are bounded: 30 s to read a request, 60 s to write an answer (the event stream excepted), 2 min idle").Shown("`:8080` (`make run`: `127.0.0.1:8080`, this machine only)"),
			setting.URL(&c.OrchestratorURL, "ORCHESTRATOR_URL", "", "base URL machines call back to (`{ORCHESTRATOR_URL}/callback/...`)").Shown("`http://127.0.0.1:<port of LISTEN_ADDR>`"),
			setting.URL(&c.WorkerURL, "WORKER_URL", "", "ingest service base URL, called when a batch is done; unset writes the processed manifest to `R2_BUCKET`"),
			setting.PositiveInt(&c.CallbackCommitters, "CALLBACK_COMMITTERS", fanin.DefaultCommitters, "how many groups of callbacks commit at once (see the callback route); more make smaller groups and more commits"),
			setting.PositiveInt(&c.CallbackQueueMax, "CALLBACK_QUEUE_MAX", fanin.DefaultMaxQueued, "callbacks waiting for their group commit; one more is answered 503 with `Retry-After: 1` (workers retry)"),
			setting.String(&c.ClientIPHeader, "CLIENT_IP_HEADER", "", "the header a trusted proxy in front names the client in, e.g. `Fly-Client-IP` on Fly: each client may fail 30 credentials, then one a second, before it is answered 429. Unset, the connection's address is the client's, so behind a proxy set it, or every client shares one budget. Never set it without such a proxy: clients could name themselves").Shown("unset"),
			setting.Millis(&c.ShutdownTimeout, "SHUTDOWN_TIMEOUT", 25*time.Second, "how long a stopped process (SIGTERM, SIGINT) drains: it takes no new job or connection, answers the requests it holds and lets its running jobs finish; then it cancels the jobs still running, which go back to River for another process, and exits. Keep it under the platform's kill timeout (Fly's `kill_timeout`, Kubernetes' `terminationGracePeriodSeconds`)"),
			setting.Int(&c.MaxStreams, "MAX_STREAMS", 256, 1, 100000, "event streams (`GET /batches/:batchId/stream`) open at once per process; one more is answered 503 with `Retry-After: 5`"),
			setting.OneOf(&c.LogFormat, "LOG_FORMAT", "", []string{"json", "text"}, "the log's format").Shown("JSON, or text on a terminal"),
			setting.OneOf(&c.LogLevel, "LOG_LEVEL", "info", []string{"debug", "info", "warn", "error"}, "the least level logged"),
			setting.String(&c.MetricsAddr, "METRICS_ADDR", "", "serve Prometheus metrics at `/metrics` on this address (e.g. `:9091`), apart from the API and without credential (see [Metrics](operations.md#metrics))").Shown("off"),
			setting.String(&c.PprofAddr, "PPROF_ADDR", "", "serve `net/http/pprof` on this address (e.g. `127.0.0.1:6060`), apart from the API; profiles expose internals").Shown("off"),
			setting.String(&c.CPUProfile, "CPU_PROFILE", "", "write a CPU profile of the whole `serve` run to this file on shutdown").Shown("off"),
		},
		// The default callback base is where workers on this machine reach
		// the listen address.
		Finish: func() {
			if c.OrchestratorURL == "" {
				c.OrchestratorURL = localURL(c.ListenAddr)
			}
		},
	}
	generated := "generated into `LOCAL_DATA_DIR`, on the embedded default"
	credentials := setting.Group{
		Title: "Credentials",
		Doc:   "Every route but `/healthz` needs one of these (see [Security](security.md)). Each is at least 16 characters, and no two are equal.",
		Settings: []setting.Setting{
			setting.Secret(&c.AdminToken, "ADMIN_TOKEN", "opens the admin routes, River UI, the dashboard with its controls, the document writes and every read (browsers: basic auth, user `admin`); without it and off the embedded default, admin routes refuse everyone").Shown(generated),
			setting.Secret(&c.ReadToken, "READ_TOKEN", "opens the reads: status, listings, events, streams, documents and their search, the OpenAPI document, the dashboard without controls (browsers: user `reader`)").Shown(generated),
			setting.Secret(&c.IngestToken, "INGEST_TOKEN", "opens intake (`POST /batches`) and the document writes (`POST /documents`, `POST /documents/:id/retry`), nothing else").Shown(generated),
			setting.Secret(&c.IngestSigningSecret, "INGEST_SIGNING_SECRET", "opens what `INGEST_TOKEN` opens, for requests signed with it (`X-Signature`, see [Signing intake](security.md#signing-intake))"),
			setting.Bool(&c.StatusPublic, "STATUS_PUBLIC", false, "`true` opens `GET /status/:batchId` and its chunk status to everyone, as spec 000 has it"),
		},
	}
	storage := setting.Group{
		Title: "Storage",
		Doc:   "Storage is all or nothing: with no `R2_*` setting at all, the local S3 server is used; a partial set is an error.",
		Settings: []setting.Setting{
			setting.String(&c.R2AccountID, "R2_ACCOUNT_ID", "", "R2 account; the endpoint is `https://{id}.r2.cloudflarestorage.com`"),
			setting.URL(&c.R2Endpoint, "R2_ENDPOINT", "", "overrides the endpoint (any S3-compatible server)"),
			setting.Secret(&c.R2AccessKeyID, "R2_ACCESS_KEY_ID", "storage key id, the orchestrator's alone: machines get presigned URLs"),
			setting.Secret(&c.R2SecretAccessKey, "R2_SECRET_ACCESS_KEY", "its secret"),
			setting.String(&c.R2Bucket, "R2_BUCKET", "arke-staging", "staging bucket: manifests and uploaded files"),
			setting.String(&c.ArchiveBucket, "ARCHIVE_BUCKET", "arke-archive", "where originals are archived"),
			setting.String(&c.CDNBucket, "CDN_BUCKET", "arke-cdn", "bucket the image variants are written to"),
			setting.URL(&c.CDNPublicURL, "CDN_PUBLIC_URL", "", "public base URL of `CDN_BUCKET`").Shown("the local S3 server's `arke-cdn` bucket, locally"),
			setting.URL(&c.CDNAPIURL, "CDN_API_URL", "", "the CDN's API, passed on as spec 000 has it"),
		},
	}
	machines := setting.Group{
		Title: "Machine backend",
		Settings: []setting.Setting{
			setting.Secret(&c.FlyAPIToken, "FLY_API_TOKEN", "Fly.io Machines API token; unset runs machines as local processes"),
			setting.URL(&c.FlyFlapsBaseURL, "FLY_FLAPS_BASE_URL", "", "Machines API address (a private endpoint, or a fake in tests)").Shown("Fly's API"),
			setting.String(&c.LocalWorkerBin, "LOCAL_WORKER_BIN", "", "worker program of the local machine runner (used when `FLY_API_TOKEN` is unset)").Shown("`bin/worker`, else `worker` beside the orchestrator"),
			setting.PositiveInt(&c.LocalMaxMachines, "LOCAL_MAX_MACHINES", runtime.NumCPU(), "local \"machines\" running at once; more launches wait their turn").Shown("number of CPUs"),
		},
	}
	limits := setting.Group{
		Title: "Limits",
		Settings: []setting.Setting{
			setting.PositiveInt64(&c.MaxFileSize, "MAX_FILE_SIZE", 5<<30, "per-file limit, bytes").Shown("`5368709120` (5 GiB)"),
			setting.PositiveInt64(&c.MaxBatchSize, "MAX_BATCH_SIZE", 100<<30, "per-batch limit, bytes").Shown("`107374182400` (100 GiB)"),
			setting.PositiveInt64(&c.MaxFilesPerBatch, "MAX_FILES_PER_BATCH", 200_000, "files one manifest may list"),
			setting.PositiveInt64(&c.ManifestMaxBytes, "MANIFEST_MAX_BYTES", 64<<20, "a larger manifest puts its batch in `ERROR` without being read").Shown("`67108864` (64 MiB)"),
			setting.Int(&c.MaxOutputsPerTask, phases.MaxOutputsSetting, phases.DefaultMaxOutputs, 1, maxOutputsPerTask, "output files one task's result may list (a TIFF's JPEGs, a PDF's page JPEGs and text files); a callback listing more is refused and its task fails. The default is two files a page of a `PDF_MAX_PAGES` PDF, plus one: raise it with `PDF_MAX_PAGES`"),
		},
	}
	admission := setting.Group{
		Title: "Admission",
		Doc: "Admission control: how much may be in flight (accepted, not yet `DONE` or `ERROR`), across the fleet and per uploader. " +
			"Intake beyond a limit answers 429 with `Retry-After` and the limit's name, and keeps nothing; the client and `orchestrator submit` " +
			"wait and submit again. A batch is admitted whatever its size when nothing is in flight in a limit's scope. 0 is no limit " +
			"(see [Admission](operations.md#admission)).",
		Settings: []setting.Setting{
			setting.Int64(&c.Admission.Batches, "MAX_BATCHES_IN_FLIGHT", 1000, 0, 1<<40, "batches in flight, fleet-wide"),
			setting.Int64(&c.Admission.Files, "MAX_FILES_IN_FLIGHT", 2_000_000, 0, 1<<40, "files of the batches in flight (their messages' `total_files`), fleet-wide"),
			setting.Int64(&c.Admission.BatchesPerUploader, "MAX_BATCHES_IN_FLIGHT_PER_UPLOADER", 200, 0, 1<<40, "batches in flight of one uploader (the message's `uploader`)"),
			setting.Int64(&c.Admission.FilesPerUploader, "MAX_FILES_IN_FLIGHT_PER_UPLOADER", 500_000, 0, 1<<40, "files in flight of one uploader"),
			setting.Millis(&c.Admission.RetryAfter, "INTAKE_RETRY_AFTER", batches.DefaultRetryAfter, "the `Retry-After` of a refusal"),
		},
	}
	tasks := setting.Group{
		Title: "Tasks and the sweep",
		Settings: []setting.Setting{
			setting.Int(&c.TaskMaxAttempts, "TASK_MAX_ATTEMPTS", 3, 1, 100, "attempts of one task: a timeout or a transient worker error (`\"retryable\": true`) is retried on a fresh machine until this many have failed (a launch that made no machine costs none; the 10th such launch fails the task)"),
			setting.Millis(&c.TaskRetireLimit, "TASK_RETIRE_LIMIT", fanin.DefaultTaskRetireLimit, "how long a task to be retried waits for its last machine to be destroyed before the wait counts as an outage of the Machines API (LAUNCH_OUTAGE_BUDGET); it is never launched again while that machine may live"),
			setting.Millis(&c.TransientRetryWindow, "TRANSIENT_RETRY_WINDOW", 30*time.Minute, "how long transient failures are retried, from the first in a row: a task whose worker reports `\"retryable\": true` (storage out, say), without costing one of `TASK_MAX_ATTEMPTS`; an OCR ref or a document's step while the provider fails transiently (5xx, timeouts), with backoff up to a minute, or answers 429 (after its Retry-After). Then the work ends with the reason (\"provider quota exhausted for N min\")"),
			setting.ShareOf(&c.InfraFailureMax, "INFRA_FAILURE_MAX", "1%", "how much of a phase's work (tasks, OCR refs, documents) may fail for infrastructure reasons (attempts or retries spent by timeouts, dead machines, outages, a spent quota), as a count or a percentage of the phase's work; past it the batch ends in `ERROR` with the reason instead of going on thinned (`POST /admin/retry/ID?mode=infrastructure` reruns them)"),
			setting.Millis(&c.SweepInterval, "SWEEP_INTERVAL", 5*time.Second, "how often timed-out tasks are failed and stalled batches nudged"),
			setting.MillisOrZero(&c.SweepRestartGrace, "SWEEP_RESTART_GRACE", 40*time.Second, "for this long after Postgres or the process started, no task is timed out, and running tasks' deadlines get this much beyond a silence of the orchestrators: workers retrying their callbacks through the outage (backoff up to 30 s) deliver them first (0: off)"),
		},
	}
	retention := setting.Group{
		Title: "Retention",
		Doc:   "The processing state of finished batches is removed after a while (see [Retention](operations.md#retention)).",
		Settings: []setting.Setting{
			setting.Int(&c.Retention.Days, "RETENTION_DAYS", 7, 0, 36500, "days after a batch ended (`DONE` or `ERROR`) that its processing state is removed; `0` keeps everything for ever"),
			setting.Bool(&c.Retention.Staging, "RETENTION_STAGING", false, "`true` also deletes a pruned batch's objects under `staging/{batch_id}/` in `R2_BUCKET`, all but `_manifest.processed.json`"),
			setting.Millis(&c.Retention.Interval, "RETENTION_INTERVAL", time.Hour, "how often the `retention` job looks for batches to prune"),
			setting.Int(&c.Retention.DeleteRows, "RETENTION_DELETE_ROWS", 5000, 1, 1_000_000, "rows one delete statement of retention removes, each in its own short transaction"),
		},
	}
	priorities := setting.Group{
		Title: "Priorities",
		Doc: "A batch's `priority` (-10 to 10, higher first; see [Priorities](architecture.md#priorities)) puts its launches, " +
			"pool leases and jobs before those of lower ones, without starving them.",
		Settings: []setting.Setting{
			setting.MillisOrZero(&c.PriorityAging, "PRIORITY_AGING", time.Minute, "a job due for this long without being worked (all workers busy with higher-priority jobs) climbs one of River's four priority levels, and another for each further period it waits (0: no aging)"),
			setting.Int(&c.PriorityShare, "PRIORITY_SHARE", 10, 1, 100, "the minimum share, in percent, of machine launches and shared pools' leases that a batch keeps while batches of higher priority wait for theirs"),
		},
	}
	local := setting.Group{
		Title: "Embedded default",
		Doc:   "With no `R2_*` setting and no `FLY_API_TOKEN`, `serve` runs the embedded default: a local S3 server and local machines (see [Running locally](operations.md#running-locally)).",
		Settings: []setting.Setting{
			setting.String(&c.LocalDataDir, "LOCAL_DATA_DIR", ".data", "where the embedded default keeps its generated `admin-token`, `read-token`, `ingest-token`, `webhook-secret-key` and the `run.env` of the operator commands"),
			setting.String(&c.LocalS3Dir, "LOCAL_S3_DIR", ".data/s3", "data folder of the local S3 server"),
			setting.String(&c.LocalS3Addr, "LOCAL_S3_ADDR", "127.0.0.1:7070", "its listen address"),
			setting.String(&c.LocalS3AccessKey, "LOCAL_S3_ACCESS_KEY", "local", "its one account's key (loopback only)").Hidden().Shown("`local`"),
			setting.String(&c.LocalS3SecretKey, "LOCAL_S3_SECRET_KEY", "localsecret", "its secret").Hidden().Shown("`localsecret`"),
		},
	}
	return []setting.Group{service, credentials, storage, machines, limits, admission, tasks, retention, priorities, c.webhooks(), c.tracing(), local}
}

// webhooks declares the webhooks' settings (see [Webhooks](webhooks.md)).
func (c *Config) webhooks() setting.Group {
	w := &c.Webhooks
	return setting.Group{
		Title: "Webhooks",
		Doc:   "Signed deliveries of events to subscribed receivers (see [Webhooks](webhooks.md)).",
		Settings: []setting.Setting{
			setting.Secret(&w.SecretKey, "WEBHOOK_SECRET_KEY", "32 random bytes in base64 (`openssl rand -base64 32`) that seal the subscriptions' signing secrets at rest (AES-256-GCM); unset, no subscription can be made and none is delivered").Shown("generated into `LOCAL_DATA_DIR`, on the embedded default"),
			setting.String(&w.AllowNetworks, "WEBHOOK_ALLOW_NETWORKS", "", "networks (CIDRs, comma-separated) that deliveries may reach although loopback, private, link-local, shared or reserved, which are refused otherwise").Shown("none (`make run`: `127.0.0.0/8,::1/128`)"),
			setting.Millis(&w.Timeout, "WEBHOOK_TIMEOUT", webhook.DefaultTimeout, "bound of one delivery request, from dialling to the answer (of which 64 KiB are read)"),
			setting.Millis(&w.RetryWindow, "WEBHOOK_RETRY_WINDOW", webhook.DefaultRetryWindow, "how long a delivery is retried (no answer, 5xx, 408, 429) from its first attempt, with exponential backoff from `WEBHOOK_FIRST_RETRY` up to 2 h"),
			setting.Millis(&w.FirstRetry, "WEBHOOK_FIRST_RETRY", webhook.DefaultFirstRetry, "the first retry's delay, doubled at each retry (or a longer `Retry-After`)"),
			setting.Millis(&w.DisableAfter, "WEBHOOK_DISABLE_AFTER", webhook.DefaultDisableAfter, "a subscription whose attempts have all failed for this long is disabled with the reason"),
		},
		Check: func() []string {
			var problems []string
			if w.SecretKey != "" {
				if _, err := webhook.ParseKey(w.SecretKey); err != nil {
					problems = append(problems, err.Error())
				}
			}
			if _, err := webhook.ParseNetworks(w.AllowNetworks); err != nil {
				problems = append(problems, err.Error())
			}
			return problems
		},
	}
}

// tracing declares OpenTelemetry's standard variables that the
// orchestrator's tracing uses. The exporter and the SDK read them from the
// environment themselves; they are declared here so that they are
// checked on start (a protocol or sampler the orchestrator does not speak
// is refused, not ignored) and documented.
func (c *Config) tracing() setting.Group {
	samplers := []string{"always_on", "always_off", "traceidratio", "parentbased_always_on", "parentbased_always_off", "parentbased_traceidratio"}
	return setting.Group{
		Title: "Tracing",
		Doc: "OpenTelemetry traces, exported over OTLP/HTTP, are off unless an endpoint is set (see [Tracing](operations.md#tracing)). " +
			"These are OpenTelemetry's standard variables, read by its SDK; its other `OTEL_EXPORTER_OTLP_*` variables (timeout, compression, certificates) and `OTEL_RESOURCE_ATTRIBUTES` apply too.",
		Settings: []setting.Setting{
			setting.URL(&c.Tracing.Endpoint, "OTEL_EXPORTER_OTLP_ENDPOINT", "", "the OpenTelemetry collector's OTLP/HTTP base URL, e.g. `http://localhost:4318`: spans go to `/v1/traces` under it. Setting it (or the next) turns tracing on").Shown("off"),
			setting.URL(&c.Tracing.TracesEndpoint, "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "", "the full URL spans are sent to, instead of the base URL's `/v1/traces`").Shown("off"),
			setting.Secret(&c.Tracing.Headers, "OTEL_EXPORTER_OTLP_HEADERS", "headers sent with every export, `key=value` pairs separated by commas (a hosted collector's API key)"),
			setting.OneOf(&c.Tracing.Protocol, "OTEL_EXPORTER_OTLP_PROTOCOL", "http/protobuf", []string{"http/protobuf"}, "the OTLP transport: only HTTP (collectors take it on port 4318 beside gRPC on 4317)"),
			setting.String(&c.Tracing.ServiceName, "OTEL_SERVICE_NAME", "orchestrator", "the spans' `service.name`"),
			setting.OneOf(&c.Tracing.Sampler, "OTEL_TRACES_SAMPLER", "parentbased_always_on", samplers, "which traces are kept. A batch's trace and each task's, chunk's and document's are sampled whole, in every process: the ratio samplers decide by trace id"),
			setting.Fraction(&c.Tracing.SamplerArg, "OTEL_TRACES_SAMPLER_ARG", 1, "the share of traces the `traceidratio` samplers keep"),
			setting.Bool(&c.Tracing.Disabled, "OTEL_SDK_DISABLED", false, "`true` turns tracing off whatever else is set"),
		},
	}
}
