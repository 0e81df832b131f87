package jobs

import (
	"time"

	"github.com/arke-institute/orchestrator/manifest"
	"github.com/arke-institute/orchestrator/phases"
	"github.com/arke-institute/orchestrator/provider"
	"github.com/arke-institute/orchestrator/setting"
)

// Settings are the pipeline's settings, which the core and the executors
// read (config fills them in from the environment).
type Settings struct {
	// Buckets names the bucket of each role: R2_BUCKET (staging: the
	// manifests, uploads and refs), ARCHIVE_BUCKET and CDN_BUCKET.
	Buckets map[phases.Bucket]string
	// CDNPublicURL is where CDN_BUCKET's objects are served.
	CDNPublicURL string
	// CallbackURL is the base URL machines call back to
	// (ORCHESTRATOR_URL).
	CallbackURL string
	// WorkerURL is the ingest service's base URL, called when a batch is
	// done (WORKER_URL); empty writes the processed manifest to staging.
	WorkerURL string
	// Limits bound a manifest's files and sizes (MAX_FILE_SIZE,
	// MAX_BATCH_SIZE, MAX_FILES_PER_BATCH); ManifestMaxBytes the
	// manifest itself (MANIFEST_MAX_BYTES), checked before it is read.
	Limits           manifest.Limits
	ManifestMaxBytes int64
	// TaskMaxAttempts bounds the attempts of one task (TASK_MAX_ATTEMPTS);
	// TaskRetireLimit is how long a task to be retried waits for its last
	// machine to be destroyed (TASK_RETIRE_LIMIT).
	TaskMaxAttempts int
	TaskRetireLimit time.Duration
	// SweepInterval is how often the sweep runs (SWEEP_INTERVAL);
	// SweepRestartGrace how long after a restart it times out no task
	// (SWEEP_RESTART_GRACE).
	SweepInterval     time.Duration
	SweepRestartGrace time.Duration
	// Retention removes the processing state of batches finished long
	// ago (RETENTION_*).
	Retention Retention
	// TransientRetry is how OCR refs and document steps retry a provider's
	// transient failures and 429s (TRANSIENT_RETRY_WINDOW).
	TransientRetry provider.Retry
	// InfraFailureMax bounds a phase's work failed by infrastructure
	// (INFRA_FAILURE_MAX: a count, or a percentage of the phase's work):
	// past it the batch ends in ERROR rather than go on thinned.
	InfraFailureMax setting.Share
	// Priorities order the batches' work by their priorities
	// (PRIORITY_AGING, PRIORITY_SHARE).
	Priorities Priorities
}

// StagingBucket is R2_BUCKET: manifests, uploads and refs.
func (s Settings) StagingBucket() string { return s.Buckets[phases.StagingBucket] }

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
