package chunked

import (
	"context"
	"encoding/json"
	"time"

	"github.com/arke-institute/orchestrator/ratelimit"
)

// Engine does the work of a chunked phase's items, one at a time: the
// phase's Spec.Engine names it.
type Engine interface {
	// Name is the name a phase's Spec.Engine selects the engine by.
	Name() string
	// Provider names the service the engine calls ("tesseract", an API's
	// host), for the provider metrics.
	Provider() string
	// LimitKey is the rate limiter bucket a chunk of a batch takes its
	// tokens from: one per provider, shared by every chunk of every
	// process, unless the engine keeps one per chunk.
	LimitKey(batchID, chunkID string) string
	// Tuning says how the phase's chunks run.
	Tuning() Tuning
	// Process does one item's work. Its outcome's error, if any, is
	// classified by provider.ClassOf.
	Process(ctx context.Context, item Item) Outcome
}

// Tuning says how a chunked phase's chunk jobs run (spec 004's settings
// for the OCR phase).
type Tuning struct {
	// Limit is the adaptive rate limit of the engine's provider.
	Limit ratelimit.Adaptive
	// Timeout bounds one call of the engine; a chunk job's run lasts a
	// little longer, and River rescues a dead process's chunk jobs once
	// that has passed.
	Timeout time.Duration
	// MaxConcurrentPerAlarm is how many items one run of a chunk job sends
	// at once; AlarmInterval the pause before its next run while items
	// remain.
	MaxConcurrentPerAlarm int
	AlarmInterval         time.Duration
	// MaxRetriesPerRef bounds the retries of one item after transient
	// errors (a rate-limited call uses none); MaxGlobalRetries those of a
	// chunk after its job failed.
	MaxRetriesPerRef int
	MaxGlobalRetries int
	// MaxFailedFraction ends a chunk ERROR when more than this share of
	// its items failed.
	MaxFailedFraction float64
	// Workers is how many chunk jobs of the phase one process runs at once
	// (its queue's workers).
	Workers int
}

// Item is one item of a chunk, as its engine sees it.
type Item struct {
	BatchID string
	ChunkID string
	Index   int32
	// R2Key is the item's file in the staging bucket.
	R2Key string
	// Instructions are the batch's own for every AI call (its manifest's
	// custom_prompts.general), "" when it gave none.
	Instructions string
}

// Outcome is how an item went.
type Outcome struct {
	// Called says whether the provider was asked, which is what the
	// limiter hears about.
	Called bool
	// Err is nil for a done item.
	Err error
	// RetryAfter is the provider's wish, with a rate-limited error.
	RetryAfter time.Duration
	// Result is a done item's outcome, which the phase's transform reads
	// as its task's result.
	Result json.RawMessage
}
