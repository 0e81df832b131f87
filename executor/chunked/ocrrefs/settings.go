package ocrrefs

import (
	"time"

	"github.com/arke-institute/orchestrator/executor/chunked"
	"github.com/arke-institute/orchestrator/provider"
	"github.com/arke-institute/orchestrator/setting"
)

// Config is the OCR phase's configuration (spec 004): its provider, and
// how its chunks run.
type Config struct {
	// APIURL is the OpenAI-compatible provider's base (OCR_API_URL);
	// empty runs the local tesseract command instead. APIKey
	// (OCR_API_KEY) is required with it, and never logged. Model is
	// OCR_MODEL.
	APIURL string
	APIKey string
	Model  string
	// LimitPerChunk gives every chunk its own limiter bucket, as spec 004
	// does, instead of one per provider (OCR_LIMIT_PER_CHUNK).
	LimitPerChunk bool
	// Bucket names the limiter bucket, before ":" and the provider:
	// "ocr", or the shared bucket's name (PROVIDER_LIMIT_SHARED), which
	// the executors' registry fills in; "" means "ocr".
	Bucket string
	// Tuning says how the chunks run; its Limit is the providers' adaptive
	// limit, which the executors' registry fills in.
	Tuning chunked.Tuning
}

// Settings declares the OCR phase's settings into c.
func Settings(c *Config) []setting.Group {
	t := &c.Tuning
	return []setting.Group{{
		Title: "OCR",
		Doc:   "The OCR phase's provider and chunk jobs (spec 004; see [OCR](operations.md#ocr)).",
		Settings: []setting.Setting{
			setting.URL(&c.APIURL, "OCR_API_URL", "", "OpenAI-compatible provider of the OCR phase; requests go to `{OCR_API_URL}/chat/completions` (e.g. `https://api.deepinfra.com/v1/openai`) with the page's medium variant as a `data:` URL. Without it the local `tesseract` reads the large variant").Shown("(none: local `tesseract`)"),
			setting.Secret(&c.APIKey, "OCR_API_KEY", "sent as `Authorization: Bearer`; never logged; required with an `https://` `OCR_API_URL`, optional with an `http://` one (a server of your own: Ollama, vLLM, llama.cpp)"),
			setting.String(&c.Model, "OCR_MODEL", "allenai/olmOCR-2-7B-1025", "the provider's model"),
			setting.Millis(&t.Timeout, "OCR_TIMEOUT_MS", 45*time.Second, "bound on one OCR call; a chunk job's run starts refs for 5 s and lasts at most this plus 15 s, which is also how soon a dead process's chunks are picked up again (plus River's 30 s rescue interval)"),
			setting.Int(&t.MaxConcurrentPerAlarm, "MAX_CONCURRENT_PER_ALARM", 5, 1, 100, "refs of one chunk in flight at once: as each ends the next starts, so a slow ref holds its own slot only (spec 004's alarm sent this many and waited for all)"),
			setting.Millis(&t.AlarmInterval, "ALARM_INTERVAL_MS", 300*time.Millisecond, "pause between a chunk job's runs (each starts refs for 5 s) while refs remain"),
			setting.Int(&t.MaxRetriesPerRef, "MAX_RETRIES_PER_REF", 3, 0, 100, "retries of a ref after transient errors (5xx, timeouts, connection errors) granted however short `TRANSIENT_RETRY_WINDOW`, which otherwise bounds them by time; a 429 uses none"),
			setting.Int(&t.MaxGlobalRetries, "MAX_GLOBAL_RETRIES", 5, 0, 100, "retries of a chunk whose job failed (a database or storage outage); then the chunk ends `ERROR`, its done refs kept"),
			setting.Fraction(&t.MaxFailedFraction, "OCR_MAX_FAILED_FRACTION", 0.5, "a chunk more than this share of whose refs failed ends `ERROR` (its done refs still published); the batch goes on"),
			setting.Int(&t.Workers, "OCR_WORKERS", 50, 1, 1000, "chunk jobs one process runs at once (its `ocr` queue)"),
			setting.Bool(&c.LimitPerChunk, "OCR_LIMIT_PER_CHUNK", false, "give every chunk its own bucket, as spec 004 does, instead of one per provider: for comparison only (the fleet then sends the provider chunks times the rate)"),
		},
	}}
}

// Missing names the settings the OCR phase lacks to serve: a key for an
// https provider.
func (c Config) Missing() []string {
	if provider.KeyMissing(c.APIURL, c.APIKey) {
		return []string{"OCR_API_KEY (OCR_API_URL is set)"}
	}
	return nil
}
