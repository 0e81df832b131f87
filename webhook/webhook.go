// Package webhook delivers the orchestrator's events to subscribed
// receivers, signed as Standard Webhooks has it (webhook-id,
// webhook-timestamp, webhook-signature), so that a receiver verifies them
// with any of its libraries.
//
// The path of an event: the transaction that writes it (a batch_events
// row, a document's move to completed or failed) also copies it into
// webhook_outbox, by triggers, when an enabled subscription wants its type
// (migration 00038); the dispatcher (dispatch.go) claims outbox rows and
// makes a delivery of each for every subscription that wants it, with its
// River job, in one transaction; the delivery job (deliver.go) sends it
// through the SSRF guard (guard.go), records each attempt and retries
// with exponential backoff for WEBHOOK_RETRY_WINDOW. Nothing is lost and
// each delivery keeps its id on every attempt: a receiver sees an event at
// least once and deduplicates by webhook-id.
package webhook

import (
	"fmt"
	"log/slog"
	"net/http"
	"net/netip"
	"slices"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"

	"github.com/arke-institute/orchestrator/db"
	"github.com/arke-institute/orchestrator/metrics"
)

// The document events, which are no batch events: the documents'
// trigger writes them to the outbox (migration 00038).
const (
	EventDocumentCompleted = "document.completed"
	EventDocumentFailed    = "document.failed"
)

// EventTypes are the event types a subscription may name. A batch event
// type is added here and nowhere else: the outbox trigger copies whatever
// type an enabled subscription names.
func EventTypes() []string {
	return []string{
		db.EventBatchDone, db.EventBatchError, db.EventPhaseCompleted, EventDocumentCompleted, EventDocumentFailed,
		db.EventChunkCompleted, db.EventBatchCreated, db.EventBatchDelivered, db.EventPhaseStarted, db.EventChunkFailed,
	}
}

// Config is how webhooks are delivered; zero values take the defaults.
type Config struct {
	// Key seals the signing secrets (WEBHOOK_SECRET_KEY, ParseKey); nil
	// refuses new subscriptions and delivers nothing.
	Key []byte
	// Allow are the networks dialled whatever their kind
	// (WEBHOOK_ALLOW_NETWORKS).
	Allow []netip.Prefix
	// Timeout bounds one request, from dialling to the answer read
	// (WEBHOOK_TIMEOUT); default 10 s.
	Timeout time.Duration
	// RetryWindow is how long a delivery is retried from its first
	// attempt (WEBHOOK_RETRY_WINDOW); default 24 h.
	RetryWindow time.Duration
	// DisableAfter disables a subscription whose attempts have failed for
	// this long without a success (WEBHOOK_DISABLE_AFTER); default 24 h.
	DisableAfter time.Duration
	// FirstRetry is the first retry's delay, doubled at each (with
	// jitter) up to MaxBackoff; defaults 10 s and 2 h.
	FirstRetry time.Duration
	MaxBackoff time.Duration
	// DispatchInterval is how often the dispatcher looks at the outbox
	// when it found nothing; default 1 s.
	DispatchInterval time.Duration
	// Now is the clock of the failure windows; nil is time.Now.
	Now func() time.Time
}

// The defaults of Config.
const (
	DefaultTimeout          = 10 * time.Second
	DefaultRetryWindow      = 24 * time.Hour
	DefaultDisableAfter     = 24 * time.Hour
	DefaultFirstRetry       = 10 * time.Second
	DefaultMaxBackoff       = 2 * time.Hour
	DefaultDispatchInterval = time.Second
)

func (c Config) withDefaults() Config {
	def := func(d *time.Duration, v time.Duration) {
		if *d <= 0 {
			*d = v
		}
	}
	def(&c.Timeout, DefaultTimeout)
	def(&c.RetryWindow, DefaultRetryWindow)
	def(&c.DisableAfter, DefaultDisableAfter)
	def(&c.FirstRetry, DefaultFirstRetry)
	def(&c.MaxBackoff, DefaultMaxBackoff)
	def(&c.DispatchInterval, DefaultDispatchInterval)
	if c.Now == nil {
		c.Now = time.Now
	}
	return c
}

// Service is the webhooks of one process: their subscriptions' commands
// and reads (subscriptions.go), and the jobs that deliver (Register).
type Service struct {
	pool    *pgxpool.Pool
	cfg     Config
	sealer  *Sealer // nil without a key
	guard   Guard
	client  *http.Client
	logger  *slog.Logger
	metrics *metrics.Metrics
}

// New is the webhooks' service over pool. m may be nil.
func New(pool *pgxpool.Pool, cfg Config, logger *slog.Logger, m *metrics.Metrics) (*Service, error) {
	cfg = cfg.withDefaults()
	s := &Service{pool: pool, cfg: cfg, guard: Guard{Allow: cfg.Allow}, logger: logger, metrics: m}
	if cfg.Key != nil {
		sealer, err := NewSealer(cfg.Key)
		if err != nil {
			return nil, err
		}
		s.sealer = sealer
	}
	s.client = s.guard.Client(cfg.Timeout)
	return s, nil
}

// Enabled tells whether subscriptions can be made and delivered: a key is
// set.
func (s *Service) Enabled() bool { return s.sealer != nil }

// Queue is the River queue of the webhook jobs: a slow receiver holds its
// slots, not the pipeline's.
const Queue = "webhooks"

// queueWorkers is how many deliveries one process sends at once.
const queueWorkers = 20

// Register adds the webhook workers to workers and returns the queue they
// run in and the periodic job that keeps a dispatcher alive.
func (s *Service) Register(workers *river.Workers) (map[string]river.QueueConfig, []*river.PeriodicJob) {
	river.AddWorker(workers, &DeliveryWorker{s: s})
	river.AddWorker(workers, &DispatchWorker{s: s})
	periodic := river.NewPeriodicJob(river.PeriodicInterval(time.Minute),
		func() (river.JobArgs, *river.InsertOpts) { return DispatchArgs{}, nil },
		&river.PeriodicJobOpts{RunOnStart: true, ID: "webhook_dispatch"})
	return map[string]river.QueueConfig{Queue: {MaxWorkers: queueWorkers}}, []*river.PeriodicJob{periodic}
}

// knownEventType tells whether t is one of EventTypes.
func knownEventType(t string) bool { return slices.Contains(EventTypes(), t) }

// errNoKey is the refusal of a subscription while WEBHOOK_SECRET_KEY is
// unset.
func errNoKey() error {
	return fmt.Errorf("%w: webhooks are off: WEBHOOK_SECRET_KEY is not set (32 random bytes in base64: openssl rand -base64 32)", errConflict)
}
