package config

import (
	"bytes"
	"fmt"
	"log/slog"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/arke-institute/orchestrator/executor/chunked"
	"github.com/arke-institute/orchestrator/executor/chunked/ocrrefs"
	"github.com/arke-institute/orchestrator/executor/machine"
	"github.com/arke-institute/orchestrator/executor/pool"
	"github.com/arke-institute/orchestrator/jobs"
	"github.com/arke-institute/orchestrator/phases"
	"github.com/arke-institute/orchestrator/ratelimit"
)

func lookup(env map[string]string) func(string) (string, bool) {
	return func(k string) (string, bool) {
		v, ok := env[k]
		return v, ok
	}
}

func TestLoadDefaults(t *testing.T) {
	c, err := Load(lookup(nil))
	require.NoError(t, err)
	require.Equal(t, ":8080", c.ListenAddr)
	require.Equal(t, "arke-staging", c.R2Bucket)
	require.Equal(t, "arke-archive", c.ArchiveBucket)
	m := c.Executors.Machine
	require.Equal(t, "ord", m.Region)
	require.Equal(t, 30*time.Second, m.ErrorRetryCap)
	require.Equal(t, 5, m.MaxRetryAttempts)
	require.Equal(t, 3, c.TaskMaxAttempts)
	require.Equal(t, 30*time.Minute, m.OutageBudget)
	require.Equal(t, 15*time.Minute, m.CallbackRetryWindow)
	require.Equal(t, int64(5<<30), c.MaxFileSize)
	require.Equal(t, int64(100<<30), c.MaxBatchSize)
	require.Equal(t, 4001, c.MaxOutputsPerTask)
	tiff := m.Phases[phases.TIFFConversion]
	require.Equal(t, machine.Phase{App: "arke-tiff-worker", Image: "registry.fly.io/arke-tiff-worker:v1.0.0", BatchSize: 1000, AlarmDelay: 5 * time.Second, TaskTimeout: time.Minute,
		TaskTimeoutPerGB: 2 * time.Minute, Guest: phases.Guest{MemoryMB: 1024, CPUs: 2, CPUKind: "shared"}, Env: map[string]string{}}, tiff)
	img := m.Phases[phases.ImageProcessing]
	require.Equal(t, "arke-image-processor", img.App)
	require.Equal(t, 2*time.Minute, img.TaskTimeout)
	require.Equal(t, 2048, img.Guest.MemoryMB)
	require.Equal(t, 1.0, m.LaunchRate)
	require.Equal(t, 3, m.LaunchBurst)
	require.Equal(t, "http://127.0.0.1:8080", c.OrchestratorURL, "workers on this machine reach the default listen address")
	require.True(t, c.LocalStorage())
}

func TestLoadSpecNames(t *testing.T) {
	c, err := Load(lookup(map[string]string{
		"FLY_TIFF_APP_NAME":            "tiff-app",
		"FLY_IMAGE_WORKER_IMAGE":       "img:2",
		"BATCH_SIZE_TIFF_CONVERSION":   "10",
		"ALARM_DELAY_IMAGE_PROCESSING": "250",
		"TASK_TIMEOUT_TIFF_CONVERSION": "90s",
		"ALARM_DELAY_ERROR_RETRY":      "1000",
		"MAX_RETRY_ATTEMPTS":           "3",
		"MAX_OUTPUTS_PER_TASK":         "20001",
		"ORCHESTRATOR_URL":             "https://orch.example/",
		"R2_ENDPOINT":                  "http://127.0.0.1:7070/",
	}))
	require.NoError(t, err)
	m := c.Executors.Machine
	require.Equal(t, "tiff-app", m.Phases[phases.TIFFConversion].App)
	require.Equal(t, "img:2", m.Phases[phases.ImageProcessing].Image)
	require.Equal(t, 10, m.Phases[phases.TIFFConversion].BatchSize)
	require.Equal(t, 250*time.Millisecond, m.Phases[phases.ImageProcessing].AlarmDelay)
	require.Equal(t, 90*time.Second, m.Phases[phases.TIFFConversion].TaskTimeout)
	require.Equal(t, time.Second, m.ErrorRetryCap)
	require.Equal(t, 3, m.MaxRetryAttempts)
	require.Equal(t, 20001, c.MaxOutputsPerTask)
	require.Equal(t, "https://orch.example", c.OrchestratorURL, "trailing slash trimmed so URLs join cleanly")
	require.Equal(t, "http://127.0.0.1:7070", c.R2Endpoint)
	require.False(t, c.LocalStorage())
}

func TestLoadReportsEveryMalformedValue(t *testing.T) {
	_, err := Load(lookup(map[string]string{
		"BATCH_SIZE_TIFF_CONVERSION":   "lots",
		"MAX_RETRY_ATTEMPTS":           "0",
		"FLY_LAUNCH_RATE":              "fast",
		"TASK_TIMEOUT_TIFF_CONVERSION": "-5",
		"LOG_FORMAT":                   "xml",
		"MAX_OUTPUTS_PER_TASK":         "0",
	}))
	require.Error(t, err)
	for _, want := range []string{
		`BATCH_SIZE_TIFF_CONVERSION must be a positive integer, got "lots"`,
		`MAX_RETRY_ATTEMPTS must be a positive integer, got "0"`,
		`TASK_TIMEOUT_TIFF_CONVERSION must be a positive number of milliseconds, got "-5"`,
		`LOG_FORMAT must be one of json, text, got "xml"`,
		`FLY_LAUNCH_RATE must be a positive number, got "fast"`,
		`MAX_OUTPUTS_PER_TASK must be a whole number from 1 to 100000, got "0"`,
	} {
		require.Contains(t, err.Error(), want)
	}
}

func TestCheckServe(t *testing.T) {
	tests := []struct {
		name    string
		env     map[string]string
		wantErr string
	}{
		{"MissingDatabase", map[string]string{}, "missing required setting: DATABASE_URL"},
		{"LocalStorageIsFine", map[string]string{"DATABASE_URL": "postgres://x"}, ""},
		{"PartialR2NamesWhatIsMissing", map[string]string{"DATABASE_URL": "postgres://x", "R2_ACCOUNT_ID": "acc"},
			"missing required setting: R2_ACCESS_KEY_ID, R2_SECRET_ACCESS_KEY"},
		{"KeysWithoutEndpoint", map[string]string{"DATABASE_URL": "postgres://x", "R2_ACCESS_KEY_ID": "a", "R2_SECRET_ACCESS_KEY": "s"},
			"missing required setting: R2_ACCOUNT_ID (or R2_ENDPOINT)"},
		{"FullR2", map[string]string{"DATABASE_URL": "postgres://x", "R2_ACCOUNT_ID": "acc", "R2_ACCESS_KEY_ID": "a", "R2_SECRET_ACCESS_KEY": "s"}, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, err := Load(lookup(tt.env))
			require.NoError(t, err)
			err = c.CheckServe()
			if tt.wantErr == "" {
				require.NoError(t, err)
				return
			}
			require.EqualError(t, err, tt.wantErr)
		})
	}
}

// TestLoggingHidesSecrets holds that a Config, logged or printed, shows
// whether each secret is set but never its value.
func TestLoggingHidesSecrets(t *testing.T) {
	env := map[string]string{
		"DATABASE_URL":          "postgres://orch:db-password-1@db.internal:5432/orch?sslmode=disable",
		"ADMIN_TOKEN":           "the-admin-token-2",
		"READ_TOKEN":            "the-read-token-10",
		"INGEST_TOKEN":          "the-ingest-token-11",
		"INGEST_SIGNING_SECRET": "the-signing-secret-12",
		"R2_ACCESS_KEY_ID":      "access-key-3",
		"R2_SECRET_ACCESS_KEY":  "secret-key-4",
		"FLY_API_TOKEN":         "fly-token-5",
		"LOCAL_S3_SECRET_KEY":   "local-secret-6",
		"WORKER_URL":            "https://ingest:ingest-password-7@ingest.example",
		"R2_ENDPOINT":           "https://r2.example?X-Amz-Signature=sig-8&region=auto",
		"CDN_PUBLIC_URL":        "https://cdn.example/?token=cdn-token-9",
	}
	c, err := Load(lookup(env))
	require.NoError(t, err)
	var buf bytes.Buffer
	slog.New(slog.NewJSONHandler(&buf, nil)).Info("config", "config", c)
	slog.New(slog.NewTextHandler(&buf, nil)).Info("config", "config", c)
	// A Config value, not only a pointer, is printed without its secrets.
	out := buf.String() + fmt.Sprint(c) + fmt.Sprintf("%v %+v %#v %s", c, c, c, c) + fmt.Sprintf("%v %+v", *c, *c)
	slog.New(slog.NewJSONHandler(&buf, nil)).Info("config", "config", *c)
	out += buf.String()
	for _, secret := range []string{"password-1", "token-2", "key-3", "key-4", "token-5", "secret-6", "password-7", "sig-8", "cdn-token-9", "token-10", "token-11", "secret-12"} {
		require.NotContains(t, out, secret)
	}
	require.Contains(t, out, "db.internal:5432")
	require.Contains(t, out, "[set]")
	require.Contains(t, out, "https://r2.example")
	require.Contains(t, out, "region=auto")
}

// TestPhasesFromRegistry: every registered phase gets its settings under
// the names its spec gives, with the spec's defaults, from its kind's
// declarations, and its own settings are checked against their range.
func TestPhasesFromRegistry(t *testing.T) {
	t.Parallel()
	c, err := Load(lookup(map[string]string{}))
	require.NoError(t, err)
	for _, p := range phases.All() {
		spec := p.Spec()
		switch {
		case spec.Worker != "":
			require.Equal(t, spec.Executor, c.Executors.Kinds[spec.Name], "%s runs on its spec's executor by default", spec.Name)
			pc, ok := c.Executors.Machine.Phases[spec.Name]
			require.True(t, ok, spec.Name)
			require.Equal(t, spec.Defaults.FlyAppName, pc.App)
			require.Equal(t, spec.Defaults.TaskTimeout, pc.TaskTimeout)
			require.Equal(t, spec.Defaults.Guest, pc.Guest)
			for _, st := range spec.Settings {
				require.Equal(t, strconv.Itoa(st.Default), pc.Env[st.Name])
				_, err := Load(lookup(map[string]string{st.Name: strconv.Itoa(st.Max + 1)}))
				require.ErrorContains(t, err, st.Name+" must be a whole number")
			}
			env := map[string]string{"FLY_" + spec.Short + "_APP_NAME": "app-x", "TASK_TIMEOUT_" + string(spec.Name): "1234"}
			c2, err := Load(lookup(env))
			require.NoError(t, err)
			require.Equal(t, "app-x", c2.Executors.Machine.Phases[spec.Name].App)
			require.Equal(t, 1234*time.Millisecond, c2.Executors.Machine.Phases[spec.Name].TaskTimeout)
			for _, kind := range []string{machine.Kind, pool.Kind} {
				c3, err := Load(lookup(map[string]string{"EXECUTOR_" + string(spec.Name): kind}))
				require.NoError(t, err)
				require.Equal(t, kind, c3.Executors.Kinds[spec.Name])
			}
			_, err = Load(lookup(map[string]string{"EXECUTOR_" + string(spec.Name): "chunked"}))
			require.ErrorContains(t, err, "EXECUTOR_"+string(spec.Name))
		case spec.Executor == chunked.Kind:
			require.Equal(t, spec.Defaults.ChunkSize, c.Executors.Chunked.ChunkSize[spec.Name])
			c2, err := Load(lookup(map[string]string{spec.Short + "_CHUNK_SIZE": "3"}))
			require.NoError(t, err)
			require.Equal(t, phases.ChunkSize{Groups: 3, Refs: spec.Defaults.ChunkSize.Refs}, c2.Executors.Chunked.ChunkSize[spec.Name])
			c2, err = Load(lookup(map[string]string{spec.Short + "_CHUNK_REFS": "7"}))
			require.NoError(t, err)
			require.Equal(t, phases.ChunkSize{Groups: spec.Defaults.ChunkSize.Groups, Refs: 7}, c2.Executors.Chunked.ChunkSize[spec.Name])
			for _, name := range []string{"_CHUNK_SIZE", "_CHUNK_REFS"} {
				_, err = Load(lookup(map[string]string{spec.Short + name: "0"}))
				require.ErrorContains(t, err, spec.Short+name+" must be a whole number")
			}
		}
		if spec.Worker == "" {
			_, ok := c.Executors.Machine.Phases[spec.Name]
			require.False(t, ok, "%s runs no machines", spec.Name)
		}
	}
}

func TestOCR(t *testing.T) {
	t.Parallel()
	c, err := Load(lookup(map[string]string{}))
	require.NoError(t, err)
	require.Equal(t, ocrrefs.Config{Model: "allenai/olmOCR-2-7B-1025", Tuning: chunked.Tuning{Timeout: 45 * time.Second, MaxConcurrentPerAlarm: 5, AlarmInterval: 300 * time.Millisecond,
		MaxRetriesPerRef: 3, MaxGlobalRetries: 5, MaxFailedFraction: 0.5, Workers: 50}}, c.Executors.OCR, "spec 004's defaults, tesseract")

	c, err = Load(lookup(map[string]string{
		"OCR_API_URL": "https://api.example/v1/openai/", "OCR_API_KEY": "sk-secret", "OCR_MODEL": "m",
		"MAX_CONCURRENT_PER_ALARM": "8", "ALARM_INTERVAL_MS": "150", "MAX_RETRIES_PER_REF": "0", "MAX_GLOBAL_RETRIES": "2",
		"OCR_MAX_FAILED_FRACTION": "1", "OCR_LIMIT_PER_CHUNK": "true", "OCR_WORKERS": "7", "OCR_TIMEOUT_MS": "2000",
	}))
	require.NoError(t, err)
	require.Equal(t, ocrrefs.Config{APIURL: "https://api.example/v1/openai", APIKey: "sk-secret", Model: "m", LimitPerChunk: true, Tuning: chunked.Tuning{Timeout: 2 * time.Second, MaxConcurrentPerAlarm: 8,
		AlarmInterval: 150 * time.Millisecond, MaxFailedFraction: 1, MaxGlobalRetries: 2, Workers: 7}}, c.Executors.OCR)
	require.NotContains(t, c.String(), "sk-secret")

	_, err = Load(lookup(map[string]string{"OCR_MAX_FAILED_FRACTION": "1.5", "OCR_LIMIT_PER_CHUNK": "maybe", "MAX_CONCURRENT_PER_ALARM": "0"}))
	require.ErrorContains(t, err, "OCR_MAX_FAILED_FRACTION must be a number from 0 to 1")
	require.ErrorContains(t, err, "OCR_LIMIT_PER_CHUNK must be true or false")
	require.ErrorContains(t, err, "MAX_CONCURRENT_PER_ALARM must be a whole number from 1 to 100")

	c, err = Load(lookup(map[string]string{"DATABASE_URL": "postgres://x/y", "OCR_API_URL": "https://api.example"}))
	require.NoError(t, err)
	require.ErrorContains(t, c.CheckServe(), "OCR_API_KEY (OCR_API_URL is set)")
	c, err = Load(lookup(map[string]string{"DATABASE_URL": "postgres://x/y", "OCR_API_URL": "http://localhost:11434/v1"}))
	require.NoError(t, err)
	if err := c.CheckServe(); err != nil {
		require.NotContains(t, err.Error(), "OCR_API_KEY", "a server of your own may take no key")
	}
}

func TestPhasesNeedAppsOfTheirOwn(t *testing.T) {
	t.Parallel()
	all := phases.All()
	first, second := all[0].Spec(), all[1].Spec()
	_, err := Load(lookup(map[string]string{"FLY_" + second.Short + "_APP_NAME": first.Defaults.FlyAppName}))
	require.ErrorContains(t, err, fmt.Sprintf("FLY_%s_APP_NAME and FLY_%s_APP_NAME are both %q", first.Short, second.Short, first.Defaults.FlyAppName))
}

func TestAdaptiveLimit(t *testing.T) {
	c, err := Load(lookup(nil))
	require.NoError(t, err)
	for _, a := range []ratelimit.Adaptive{c.Executors.OCRLimit, c.Executors.EmbeddingsLimit, c.Executors.TagsLimit} {
		require.Equal(t, ratelimit.DefaultAdaptive(), a, "spec 004's constants")
	}

	c, err = Load(lookup(map[string]string{
		"INITIAL_MAX_TOKENS": "8", "INITIAL_REFILL_RATE": "2.5", "MAX_MAX_TOKENS": "20",
		"MAX_REFILL_RATE": "12", "MIN_MAX_TOKENS": "1", "MIN_REFILL_RATE": "0.5",
		"EMBEDDINGS_MAX_REFILL_RATE": "300", "EMBEDDINGS_MAX_MAX_TOKENS": "50", "TAGS_INITIAL_REFILL_RATE": "4",
	}))
	require.NoError(t, err)
	require.Equal(t, ratelimit.Adaptive{InitialMaxTokens: 8, InitialRefillRate: 2.5, MaxMaxTokens: 20, MaxRefillRate: 12, MinMaxTokens: 1, MinRefillRate: 0.5}, c.Executors.OCRLimit)
	embeddings, tags := ratelimit.DefaultAdaptive(), ratelimit.DefaultAdaptive()
	embeddings.MaxRefillRate, embeddings.MaxMaxTokens, tags.InitialRefillRate = 300, 50, 4
	require.Equal(t, embeddings, c.Executors.EmbeddingsLimit, "each role reads its own settings")
	require.Equal(t, tags, c.Executors.TagsLimit)
	// Each role draws on a bucket of its own, with its own limit, unless
	// the operator shares them.
	x := c.Executors.WithLimits()
	require.Equal(t, "ocr", x.OCR.Bucket)
	require.Equal(t, c.Executors.OCRLimit, x.OCR.Tuning.Limit)
	require.Equal(t, ratelimit.RoleBucket{Name: "embeddings", Limit: embeddings}, x.Documents.Embeddings)
	require.Equal(t, ratelimit.RoleBucket{Name: "tags", Limit: tags}, x.Documents.Tags)
	require.Equal(t, "embeddings:api.example", x.Documents.Embeddings.Key("api.example"))
	c.Executors.SharedLimit = "embeddings,tags"
	x = c.Executors.WithLimits()
	shared := ratelimit.RoleBucket{Name: "embeddings+tags", Limit: embeddings}
	require.Equal(t, shared, x.Documents.Embeddings, "shared, under the first role's limit")
	require.Equal(t, shared, x.Documents.Tags)
	require.Equal(t, "ocr", x.OCR.Bucket)
	_, err = Load(lookup(map[string]string{"PROVIDER_LIMIT_SHARED": "tags,ocr"}))
	require.ErrorContains(t, err, "PROVIDER_LIMIT_SHARED")

	for name, tc := range map[string]struct {
		env  map[string]string
		want string
	}{
		"NotANumber":      {map[string]string{"MAX_REFILL_RATE": "NaN"}, `MAX_REFILL_RATE must be a positive number, got "NaN"`},
		"Zero":            {map[string]string{"MIN_REFILL_RATE": "0"}, `MIN_REFILL_RATE must be a positive number, got "0"`},
		"TokenFloor":      {map[string]string{"MIN_MAX_TOKENS": "0.5"}, "MIN_MAX_TOKENS must be at least 1"},
		"InitialAboveMax": {map[string]string{"INITIAL_MAX_TOKENS": "16", "MAX_MAX_TOKENS": "15"}, "MIN_MAX_TOKENS <= INITIAL_MAX_TOKENS <= MAX_MAX_TOKENS must hold, got 2, 16, 15"},
		"InitialBelowMin": {map[string]string{"INITIAL_REFILL_RATE": "0.5"}, "MIN_REFILL_RATE <= INITIAL_REFILL_RATE <= MAX_REFILL_RATE must hold, got 1, 0.5, 1000"},
		"MaxBelowInitial": {map[string]string{"MAX_REFILL_RATE": "2"}, "got 1, 3, 2"},
		"RolePrefixed":    {map[string]string{"TAGS_MAX_REFILL_RATE": "2"}, "TAGS_MIN_REFILL_RATE <= TAGS_INITIAL_REFILL_RATE <= TAGS_MAX_REFILL_RATE must hold, got 1, 3, 2"},
	} {
		t.Run(name, func(t *testing.T) {
			_, err := Load(lookup(tc.env))
			require.ErrorContains(t, err, tc.want)
		})
	}
}

// TestCredentialsMustDiffer: serve refuses two equal tokens (each opens its
// own routes: an ingest token equal to the admin token would open intake to
// the admin) and a token too short to resist guessing.
func TestCredentialsMustDiffer(t *testing.T) {
	t.Parallel()
	serve := func(env map[string]string) (*Config, error) {
		env["DATABASE_URL"] = "postgres://db/x"
		c, err := Load(lookup(env))
		require.NoError(t, err, "the operator commands, which send tokens, take any")
		return c, c.CheckServe()
	}
	_, err := serve(map[string]string{"ADMIN_TOKEN": "same-token-for-both", "INGEST_TOKEN": "same-token-for-both"})
	require.EqualError(t, err, "invalid configuration: ADMIN_TOKEN and INGEST_TOKEN must differ: each opens different routes")
	_, err = serve(map[string]string{"READ_TOKEN": "short"})
	require.EqualError(t, err, "invalid configuration: READ_TOKEN must be at least 16 characters (e.g. openssl rand -hex 24)")
	c, err := serve(map[string]string{"ADMIN_TOKEN": "admin-token-long-enough", "READ_TOKEN": "read-token-long-enough",
		"INGEST_TOKEN": "ingest-token-long-enough", "INGEST_SIGNING_SECRET": "signing-secret-long-enough", "STATUS_PUBLIC": "true"})
	require.NoError(t, err)
	require.Equal(t, "read-token-long-enough", c.ReadToken)
	require.Equal(t, "ingest-token-long-enough", c.IngestToken)
	require.Equal(t, "signing-secret-long-enough", c.IngestSigningSecret)
	require.True(t, c.StatusPublic)
}

func TestRetention(t *testing.T) {
	t.Parallel()
	c, err := Load(lookup(map[string]string{}))
	require.NoError(t, err)
	require.Equal(t, jobs.Retention{Days: 7, Interval: time.Hour, DeleteRows: 5000}, c.Retention, "spec 002 keeps 7 days")
	require.Equal(t, 7*24*time.Hour, c.Retention.Age())

	c, err = Load(lookup(map[string]string{"RETENTION_DAYS": "0", "RETENTION_STAGING": "true", "RETENTION_INTERVAL": "10m", "RETENTION_DELETE_ROWS": "100"}))
	require.NoError(t, err)
	require.Equal(t, jobs.Retention{Days: 0, Staging: true, Interval: 10 * time.Minute, DeleteRows: 100}, c.Retention)
	require.Zero(t, c.Retention.Age(), "0 keeps everything")

	_, err = Load(lookup(map[string]string{"RETENTION_DAYS": "-1", "RETENTION_STAGING": "yes please", "RETENTION_INTERVAL": "soon", "RETENTION_DELETE_ROWS": "0"}))
	require.ErrorContains(t, err, `RETENTION_DAYS must be a whole number from 0 to 36500, got "-1"`)
	require.ErrorContains(t, err, `RETENTION_STAGING must be true or false`)
	require.ErrorContains(t, err, `RETENTION_INTERVAL must be a positive number of milliseconds, got "soon"`)
	require.ErrorContains(t, err, `RETENTION_DELETE_ROWS must be a whole number from 1 to 1000000, got "0"`)
}

// TestTracing checks that tracing is on only with an OTLP endpoint and
// without OTEL_SDK_DISABLED, and that a protocol or sampler the
// orchestrator does not speak is refused on start rather than ignored.
func TestTracing(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name string
		env  map[string]string
		on   bool
	}{
		{"Off", nil, false},
		{"Endpoint", map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://localhost:4318"}, true},
		{"TracesEndpoint", map[string]string{"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://localhost:4318/v1/traces"}, true},
		{"Disabled", map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://localhost:4318", "OTEL_SDK_DISABLED": "true"}, false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			c, err := Load(lookup(tt.env))
			require.NoError(t, err)
			require.Equal(t, tt.on, c.TracingConfig().Enabled)
			require.Equal(t, "orchestrator", c.TracingConfig().ServiceName)
		})
	}
	_, err := Load(lookup(map[string]string{"OTEL_EXPORTER_OTLP_PROTOCOL": "grpc", "OTEL_TRACES_SAMPLER": "sometimes"}))
	require.ErrorContains(t, err, "OTEL_EXPORTER_OTLP_PROTOCOL")
	require.ErrorContains(t, err, "OTEL_TRACES_SAMPLER")
}
