package batches

import (
	"context"
	"fmt"
	"time"

	"github.com/arke-institute/orchestrator/db"
	"github.com/arke-institute/orchestrator/manifest"
	"github.com/arke-institute/orchestrator/problem"
)

// Limits are admission control's: how much may be in flight (accepted and
// not yet DONE or ERROR), across the fleet and per uploader. Zero is no
// limit.
type Limits struct {
	// Batches and Files bound the fleet's batches in flight and their files
	// (MAX_BATCHES_IN_FLIGHT, MAX_FILES_IN_FLIGHT).
	Batches, Files int64
	// BatchesPerUploader and FilesPerUploader bound one uploader's
	// (MAX_BATCHES_IN_FLIGHT_PER_UPLOADER, MAX_FILES_IN_FLIGHT_PER_UPLOADER).
	BatchesPerUploader, FilesPerUploader int64
	// RetryAfter is what a refusal tells the client to wait (INTAKE_RETRY_AFTER).
	RetryAfter time.Duration
}

// Bounded reports whether any limit is set.
func (l Limits) Bounded() bool {
	return l.Batches > 0 || l.Files > 0 || l.BatchesPerUploader > 0 || l.FilesPerUploader > 0
}

// DefaultRetryAfter is Limits.RetryAfter unless set.
const DefaultRetryAfter = 30 * time.Second

// admit refuses msg's batch when accepting it would take what is in flight
// past a limit (problem.LimitError, answered 429 with Retry-After), in tx,
// which holds the intake lock. A batch is admitted whatever its size
// when nothing is in flight in a limit's scope, so that a batch larger
// than a files limit runs alone rather than never.
func (l Limits) admit(ctx context.Context, q *db.Queries, msg manifest.QueueMessage) error {
	if err := q.BatchAdmissionLock(ctx); err != nil {
		return err
	}
	n, err := q.BatchInFlight(ctx, msg.Uploader)
	if err != nil {
		return fmt.Errorf("counting the batches in flight: %w", err)
	}
	for _, c := range []struct {
		setting        string
		limit, in, add int64
		unit, scope    string
		batches        int64
	}{
		{"MAX_BATCHES_IN_FLIGHT", l.Batches, n.Batches, 1, "batches", "", n.Batches},
		{"MAX_FILES_IN_FLIGHT", l.Files, n.Files, msg.TotalFiles, "files", "", n.Batches},
		{"MAX_BATCHES_IN_FLIGHT_PER_UPLOADER", l.BatchesPerUploader, n.UploaderBatches, 1, "batches", msg.Uploader, n.UploaderBatches},
		{"MAX_FILES_IN_FLIGHT_PER_UPLOADER", l.FilesPerUploader, n.UploaderFiles, msg.TotalFiles, "files", msg.Uploader, n.UploaderBatches},
	} {
		if c.limit <= 0 || c.batches == 0 || c.in+c.add <= c.limit {
			continue
		}
		whose := "in flight"
		if c.scope != "" {
			whose = fmt.Sprintf("in flight for uploader %q", c.scope)
		}
		retry := l.RetryAfter
		if retry <= 0 {
			retry = DefaultRetryAfter
		}
		msg := fmt.Sprintf("intake is at %s (%d): %d %s %s", c.setting, c.limit, c.in, c.unit, whose)
		if c.unit == "files" {
			msg += fmt.Sprintf(", and this batch has %d", c.add)
		}
		return &problem.LimitError{Limit: c.setting, RetryAfter: retry, Msg: msg + "; try again later"}
	}
	return nil
}
