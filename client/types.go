package client

import (
	"encoding/json"
	"time"

	"github.com/arke-institute/orchestrator/cost"
)

// The batch statuses that are not phase names (Status.Status).
const (
	StatusPending = "PENDING" // accepted, manifest not read yet
	StatusDone    = "DONE"
	StatusError   = "ERROR" // see Status.Error
)

// The states of the final manifest's delivery to ingest (Ingest.Status).
const (
	IngestNone      = "none" // the batch is not DONE
	IngestPending   = "pending"
	IngestDelivered = "delivered"
	IngestFailed    = "failed" // gave up; see Ingest.LastError
)

// Receipt is the answer to Submit.
type Receipt struct {
	BatchID string `json:"batch_id"`
	// Status is PENDING for a new batch, the current status for one the
	// orchestrator knew already.
	Status string `json:"status"`
	// Created is true when the batch is new (202 Accepted), false when the
	// orchestrator knew it already (200 OK: a redelivery, which changed
	// nothing).
	Created bool `json:"-"`
}

// Status is the status document of GET /status/:batchId, which Reset and
// Retry answer too.
type Status struct {
	BatchID string `json:"batch_id"`
	// Status is PENDING, a phase name (TIFF_CONVERSION, ...), DONE or ERROR.
	Status string `json:"status"`
	// Priority is the batch's priority, -10 (lowest) to 10 (highest); 0
	// when its queue message gave none.
	Priority int `json:"priority"`
	// Progress counts the tasks of the current phase, or of the last one
	// once the batch has ended.
	Progress    Progress   `json:"progress"`
	StartedAt   time.Time  `json:"started_at"`
	UpdatedAt   time.Time  `json:"updated_at"`
	CompletedAt *time.Time `json:"completed_at"`
	// Error says why the batch is in ERROR.
	Error *string `json:"error"`
	// Phase is the current (or last) phase; nil before the first.
	Phase *string `json:"phase"`
	// Phases lists every phase that had work, in order.
	Phases []PhaseProgress `json:"phases"`
	// Failures counts the failed work over the phases by cause.
	Failures Failures `json:"failures"`
	// Ingest is the delivery of the final manifest to the ingest service.
	Ingest Ingest `json:"ingest"`
	// Pruned is set once retention (RETENTION_DAYS) removed the batch's
	// processing details; Phases and Progress are then as they were.
	Pruned *Pruning `json:"pruned,omitempty"`
	// Paused is the pause that holds the batch's work, if one does.
	Paused *Pause `json:"paused,omitempty"`
	// Cost is what the batch consumed so far (machine-seconds, provider
	// requests and tokens), per phase, with its estimated price.
	Cost cost.Cost `json:"cost"`
	// Raw is the document as the server sent it, to print or decode as is
	// (with any field this client does not know).
	Raw json.RawMessage `json:"-"`
}

// Failures are a batch's failed work by cause: Permanent because the file
// is bad, Infrastructure because its attempts or retries were spent by
// timeouts, dead machines, outages or a spent quota (RetryInfrastructure
// reruns only these).
type Failures struct {
	Permanent      int64 `json:"permanent"`
	Infrastructure int64 `json:"infrastructure"`
}

// Pruning says that retention removed a batch's processing details (tasks,
// chunks, events, intermediate files).
type Pruning struct {
	// At is when the removal ended; nil while it is going on.
	At *time.Time `json:"at"`
	// Note says what is gone, for people.
	Note string `json:"note"`
}

// Ended reports whether the batch is DONE or ERROR.
func (s Status) Ended() bool { return s.Status == StatusDone || s.Status == StatusError }

// Progress counts the work of one phase (its tasks, refs, documents...:
// the phase's Unit).
type Progress struct {
	TasksTotal     int64 `json:"tasks_total"`
	TasksCompleted int64 `json:"tasks_completed"`
	TasksFailed    int64 `json:"tasks_failed"`
}

// PhaseProgress counts the work of a named phase, open work included, as
// the phase's executor counts it: Unit says what a unit is ("tasks",
// "refs", "documents"); Detail has the executor's own counts (e.g. a
// chunked phase's chunks_total).
type PhaseProgress struct {
	Phase           string `json:"phase"`
	Executor        string `json:"executor"`
	Unit            string `json:"unit"`
	TasksTotal      int64  `json:"tasks_total"`
	TasksPending    int64  `json:"tasks_pending"`
	TasksProcessing int64  `json:"tasks_processing"`
	TasksCompleted  int64  `json:"tasks_completed"`
	TasksFailed     int64  `json:"tasks_failed"`
	// TasksFailedInfrastructure are the failed ones whose attempts or
	// retries infrastructure spent; the others' files are bad.
	TasksFailedInfrastructure int64            `json:"tasks_failed_infrastructure"`
	TasksSkipped              int64            `json:"tasks_skipped,omitempty"`
	Detail                    map[string]int64 `json:"detail,omitempty"`
}

// Current is the progress of the batch's current (or last) phase, false
// before its first.
func (s Status) Current() (PhaseProgress, bool) {
	for _, p := range s.Phases {
		if s.Phase != nil && p.Phase == *s.Phase {
			return p, true
		}
	}
	return PhaseProgress{}, false
}

// Ingest reports the delivery of a DONE batch's final manifest to the
// ingest service.
type Ingest struct {
	// Status is IngestNone, IngestPending, IngestDelivered or IngestFailed.
	Status      string     `json:"status"`
	Attempts    int32      `json:"attempts"`
	LastError   *string    `json:"last_error"`
	DeliveredAt *time.Time `json:"delivered_at"`
}

// The states of a document (Document.Status), spec 003's.
const (
	DocumentNotStarted = "not_started"
	DocumentProcessing = "processing"
	DocumentCompleted  = "completed"
	DocumentFailed     = "failed"
)

// Document is a document's status (spec 003's), the answer of
// IndexDocument and Document.
type Document struct {
	ID      int64  `json:"id"`
	R2Key   string `json:"r2Key"`
	Version int32  `json:"version"`
	// Status is DocumentNotStarted, DocumentProcessing, DocumentCompleted
	// or DocumentFailed.
	Status string `json:"status"`
	// CurrentStep is download, embeddings, tags or store.
	CurrentStep string `json:"currentStep"`
	Progress    struct {
		TotalChunks     int32 `json:"totalChunks"`
		ProcessedChunks int32 `json:"processedChunks"`
		Percentage      int   `json:"percentage"`
		StepPercentage  int   `json:"stepPercentage"`
	} `json:"progress"`
	Errors []struct {
		Step      string `json:"step"`
		Error     string `json:"error"`
		Timestamp string `json:"timestamp"`
	} `json:"errors"`
	Timing struct {
		StartedAt   *time.Time `json:"startedAt"`
		CompletedAt *time.Time `json:"completedAt"`
	} `json:"timing"`
	DocumentTags []string `json:"documentTags"`
	// Message says what IndexDocument did.
	Message string `json:"message,omitempty"`
}

// Ended reports whether the document is completed or failed.
func (d Document) Ended() bool { return d.Status == DocumentCompleted || d.Status == DocumentFailed }

// ReindexProgress is how far the re-index of the documents' chunks is
// (search.ReindexProgress): the configured embedder and text search
// configuration, the chunks of current versions and those done, whether
// one runs in the process that answered, and how its last run failed.
type ReindexProgress struct {
	Embedder   string `json:"embedder"`
	TextConfig string `json:"textConfig"`
	Chunks     int64  `json:"chunks"`
	Done       int64  `json:"done"`
	Running    bool   `json:"running"`
	Error      string `json:"error"`
}

// SearchAnswer is the answer of SearchDocuments: the chunks found, best
// first, how they were ranked, and why by their words alone if so.
type SearchAnswer struct {
	Results []SearchResult `json:"results"`
	// Mode is "hybrid" (words and meaning) or "text" (words alone).
	Mode string `json:"mode"`
	// Notice says why a search was ranked by its words alone.
	Notice string `json:"notice,omitempty"`
	// NextOffset, when not zero, asks for the next page.
	NextOffset int `json:"nextOffset,omitempty"`
}

// SearchResult is one chunk found by SearchDocuments, best first.
type SearchResult struct {
	DocumentID int64  `json:"documentId"`
	R2Key      string `json:"r2Key"`
	ChunkIndex int32  `json:"chunkIndex"`
	// Score ranks the results: the fusion of the ranks by meaning and by
	// words. Similarity is the cosine of the chunk's vector and the
	// query's (nil when the chunk has none of the embedder); TextMatch
	// says the chunk matched the query's words.
	Score      float32  `json:"score"`
	Similarity *float32 `json:"similarity,omitempty"`
	TextMatch  bool     `json:"textMatch"`
	Text       string   `json:"text"`
	Tags       []string `json:"tags"`
	// FirstPage and LastPage are the pages of a PDF the chunk is from;
	// absent for a document without pages.
	FirstPage int32 `json:"firstPage,omitempty"`
	LastPage  int32 `json:"lastPage,omitempty"`
}

// PauseTarget names what Pause and Resume act on: a batch, a phase, or
// (both empty) everything.
type PauseTarget struct {
	BatchID string `json:"batch_id,omitempty"`
	Phase   string `json:"phase,omitempty"`
}

// Pause is a pause of work in force (POST /admin/pause, GET
// /admin/pauses, and a Status's Paused).
type Pause struct {
	// Scope is global, phase or batch; Target the phase's name or the
	// batch's id ("" for global).
	Scope  string    `json:"scope"`
	Target string    `json:"target,omitempty"`
	Reason string    `json:"reason"`
	Since  time.Time `json:"since"`
}

// Resumed is the answer of Resume: the pause lifted, how long it lasted,
// and the work whose failing clocks moved later by that time, by table.
type Resumed struct {
	Pause
	PausedSeconds float64          `json:"paused_seconds"`
	Shifted       map[string]int64 `json:"shifted"`
	Woken         int64            `json:"woken"`
}

// Webhook is a webhook subscription (POST /admin/webhooks and the reads).
type Webhook struct {
	ID          string   `json:"id"`
	URL         string   `json:"url"`
	EventTypes  []string `json:"event_types"`
	BatchID     string   `json:"batch_id,omitempty"`
	Description string   `json:"description,omitempty"`
	Enabled     bool     `json:"enabled"`
	// DisabledReason says why it was disabled.
	DisabledReason string     `json:"disabled_reason,omitempty"`
	FailingSince   *time.Time `json:"failing_since,omitempty"`
	CreatedAt      time.Time  `json:"created_at"`
	// Secret is the signing secret (whsec_...), in CreateWebhook's answer
	// only.
	Secret string `json:"secret,omitempty"`
}

// NewWebhook is what CreateWebhook subscribes.
type NewWebhook struct {
	URL         string   `json:"url"`
	EventTypes  []string `json:"event_types"`
	BatchID     string   `json:"batch_id,omitempty"`
	Description string   `json:"description,omitempty"`
}

// WebhookDelivery is one event for one subscription; ID is its
// webhook-id.
type WebhookDelivery struct {
	ID             string     `json:"id"`
	SubscriptionID string     `json:"subscription_id"`
	EventType      string     `json:"event_type"`
	BatchID        string     `json:"batch_id,omitempty"`
	Status         string     `json:"status"` // pending, succeeded or failed
	Attempts       int        `json:"attempts"`
	LastError      string     `json:"last_error,omitempty"`
	NextAttemptAt  *time.Time `json:"next_attempt_at,omitempty"`
	CreatedAt      time.Time  `json:"created_at"`
	UpdatedAt      time.Time  `json:"updated_at"`
	// Payload and AttemptList are in WebhookDelivery's answer only.
	Payload     string           `json:"payload,omitempty"`
	AttemptList []WebhookAttempt `json:"attempt_list,omitempty"`
}

// WebhookAttempt is one request of a delivery.
type WebhookAttempt struct {
	Attempt     int       `json:"attempt"`
	StatusCode  int       `json:"status_code,omitempty"`
	Error       string    `json:"error,omitempty"`
	DurationMS  int       `json:"duration_ms"`
	Response    string    `json:"response,omitempty"`
	AttemptedAt time.Time `json:"attempted_at"`
}
