package status

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/arke-institute/orchestrator/db"
	"github.com/arke-institute/orchestrator/problem"
)

// Limits of one page of events.
const (
	DefaultEventLimit = 100
	MaxEventLimit     = 1000
)

// Event is one row of a batch's event log, as the API shows it.
type Event struct {
	ID      int64   `json:"id"`
	BatchID string  `json:"batch_id"`
	Type    string  `json:"type"`
	Phase   *string `json:"phase"`
	TaskID  *string `json:"task_id"`
	// Data is the event's details, a JSON object whose keys depend on Type.
	Data      json.RawMessage `json:"data"`
	CreatedAt time.Time       `json:"created_at"`
}

// EventPage is one page of a batch's events, oldest first.
type EventPage struct {
	Events []Event `json:"events"`
	// NextAfter is the cursor for the next page: the id of the last event
	// returned, or the cursor given when there was none. Passing it back as
	// `after` also serves to poll for newer events.
	NextAfter int64 `json:"next_after"`
	// HasMore is true when the page is full, so more events may follow now.
	HasMore bool `json:"has_more"`
}

// Events lists a batch's events with an id greater than after, oldest first,
// at most limit of them (DefaultEventLimit when 0). ErrNotFound for an
// unknown batch; an InputError for a limit out of range.
func (r *Reader) Events(ctx context.Context, batchID string, after int64, limit int) (EventPage, error) {
	if limit == 0 {
		limit = DefaultEventLimit
	}
	if limit < 1 || limit > MaxEventLimit {
		return EventPage{}, &problem.InputError{Msg: fmt.Sprintf("limit must be between 1 and %d, got %d", MaxEventLimit, limit)}
	}
	if after < 0 {
		return EventPage{}, &problem.InputError{Msg: fmt.Sprintf("after must be a non-negative event id, got %d", after)}
	}
	q := db.New(r.pool)
	events, err := r.EventsAfter(ctx, batchID, after, limit)
	if err != nil {
		return EventPage{}, err
	}
	if len(events) == 0 {
		// An empty page is ambiguous: no new events, or no such batch.
		if _, err := q.BatchGetByID(ctx, batchID); err != nil {
			return EventPage{}, db.NotFound(err, "batch "+batchID)
		}
	}
	page := EventPage{Events: events, NextAfter: after, HasMore: len(events) == limit}
	if len(events) > 0 {
		page.NextAfter = events[len(events)-1].ID
	}
	return page, nil
}

// EventsAfter reads up to limit events of the batch after the cursor.
func (r *Reader) EventsAfter(ctx context.Context, batchID string, after int64, limit int) ([]Event, error) {
	rows, err := db.New(r.pool).BatchEventListByBatch(ctx, db.BatchEventListByBatchParams{
		BatchID: batchID, AfterID: after, Max: int32(limit),
	})
	if err != nil {
		return nil, fmt.Errorf("listing events of batch %s: %w", batchID, err)
	}
	out := make([]Event, len(rows))
	for i, r := range rows {
		out[i] = Event{ID: r.ID, BatchID: r.BatchID, Type: r.Type, Phase: r.Phase, TaskID: r.TaskID, Data: r.Data, CreatedAt: r.CreatedAt}
	}
	return out, nil
}
