package webhook

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river"

	"github.com/arke-institute/orchestrator/db"
	"github.com/arke-institute/orchestrator/manifest"
	"github.com/arke-institute/orchestrator/problem"
)

// errConflict is problem.ErrConflict, which the API answers 409.
var errConflict = problem.ErrConflict

// Subscription is a receiver of events, as the admin API shows it.
type Subscription struct {
	ID         string   `json:"id"`
	URL        string   `json:"url"`
	EventTypes []string `json:"event_types"`
	// BatchID, when set, limits the subscription to that batch's events.
	BatchID     string `json:"batch_id,omitempty"`
	Description string `json:"description,omitempty"`
	Enabled     bool   `json:"enabled"`
	// DisabledReason says why it was disabled: by an admin, or after
	// failing for WEBHOOK_DISABLE_AFTER.
	DisabledReason string `json:"disabled_reason,omitempty"`
	// FailingSince is the first failed attempt since the last success.
	FailingSince *time.Time `json:"failing_since,omitempty"`
	CreatedAt    time.Time  `json:"created_at"`
	// Secret is the signing secret (whsec_...), in the answer to its
	// creation only: it is never shown again.
	Secret string `json:"secret,omitempty"`
}

// NewSubscription is what an admin asks for.
type NewSubscription struct {
	URL         string   `json:"url"`
	EventTypes  []string `json:"event_types"`
	BatchID     string   `json:"batch_id,omitempty"`
	Description string   `json:"description,omitempty"`
}

// maxDescription bounds a subscription's description.
const maxDescription = 500

// check refuses what no subscription may be.
func (n NewSubscription) check() error {
	if len(n.EventTypes) == 0 {
		return &problem.InputError{Msg: "event_types must name at least one event type, of: " + strings.Join(EventTypes(), ", ")}
	}
	for _, t := range n.EventTypes {
		if !knownEventType(t) {
			return &problem.InputError{Msg: fmt.Sprintf("unknown event type %q: the event types are %s", t, strings.Join(EventTypes(), ", "))}
		}
	}
	if len(n.BatchID) > manifest.MaxBatchIDLength {
		return &problem.InputError{Msg: fmt.Sprintf("batch_id is at most %d bytes", manifest.MaxBatchIDLength)}
	}
	if len(n.Description) > maxDescription {
		return &problem.InputError{Msg: fmt.Sprintf("description is at most %d bytes", maxDescription)}
	}
	return nil
}

// Create adds a subscription with a new signing secret, which the answer
// carries, once. The URL must be one the guard lets deliveries reach.
func (s *Service) Create(ctx context.Context, n NewSubscription) (Subscription, error) {
	if s.sealer == nil {
		return Subscription{}, errNoKey()
	}
	if err := n.check(); err != nil {
		return Subscription{}, err
	}
	u, err := s.guard.CheckURL(ctx, n.URL)
	if err != nil {
		return Subscription{}, err
	}
	id, err := newID("wh_")
	if err != nil {
		return Subscription{}, err
	}
	secret, err := NewSecret()
	if err != nil {
		return Subscription{}, err
	}
	sealed, err := s.sealer.Seal(id, secret)
	if err != nil {
		return Subscription{}, fmt.Errorf("sealing the signing secret: %w", err)
	}
	types := slices.Clone(n.EventTypes)
	slices.Sort(types)
	row, err := db.New(s.pool).WebhookSubscriptionInsert(ctx, db.WebhookSubscriptionInsertParams{
		ID: id, URL: u.String(), EventTypes: slices.Compact(types), BatchID: nonEmpty(n.BatchID),
		Description: n.Description, SecretSealed: sealed, KeyID: s.sealer.KeyID(),
	})
	if err != nil {
		return Subscription{}, fmt.Errorf("adding webhook subscription: %w", err)
	}
	s.wakeDispatcher(ctx)
	sub := subscriptionOf(row)
	sub.Secret = secret.String()
	// The host alone: a receiver's path or query may be its own secret.
	s.logger.Info("webhook subscription created", "subscription_id", id, "host", u.Host, "event_types", sub.EventTypes)
	return sub, nil
}

// List is every subscription, oldest first.
func (s *Service) List(ctx context.Context) ([]Subscription, error) {
	rows, err := db.New(s.pool).WebhookSubscriptionList(ctx)
	if err != nil {
		return nil, fmt.Errorf("listing webhook subscriptions: %w", err)
	}
	out := make([]Subscription, 0, len(rows))
	for _, r := range rows {
		out = append(out, subscriptionOf(r))
	}
	return out, nil
}

// Get is one subscription.
func (s *Service) Get(ctx context.Context, id string) (Subscription, error) {
	row, err := db.New(s.pool).WebhookSubscriptionGetByID(ctx, id)
	if err != nil {
		return Subscription{}, db.NotFound(err, "webhook subscription "+id)
	}
	return subscriptionOf(row), nil
}

// SetEnabled enables a subscription (its failing clock starts afresh) or
// disables it with reason.
func (s *Service) SetEnabled(ctx context.Context, id string, enabled bool, reason string) (Subscription, error) {
	if !enabled && reason == "" {
		reason = "disabled by an admin"
	}
	row, err := db.New(s.pool).WebhookSubscriptionSetEnabled(ctx, db.WebhookSubscriptionSetEnabledParams{ID: id, Enabled: enabled, Reason: reason})
	if err != nil {
		return Subscription{}, db.NotFound(err, "webhook subscription "+id)
	}
	if enabled {
		s.wakeDispatcher(ctx)
	}
	s.logger.Info("webhook subscription changed", "subscription_id", id, "enabled", enabled)
	return subscriptionOf(row), nil
}

// Delete removes a subscription with its deliveries and their attempts.
func (s *Service) Delete(ctx context.Context, id string) error {
	n, err := db.New(s.pool).WebhookSubscriptionDelete(ctx, id)
	if err != nil {
		return fmt.Errorf("deleting webhook subscription %s: %w", id, err)
	}
	if n == 0 {
		return fmt.Errorf("webhook subscription %s: %w", id, db.ErrNotFound)
	}
	s.logger.Info("webhook subscription deleted", "subscription_id", id)
	return nil
}

// Delivery is one event for one subscription, as the admin API shows it.
type Delivery struct {
	// ID is the webhook-id header: the same on every attempt and replay.
	ID             string `json:"id"`
	SubscriptionID string `json:"subscription_id"`
	EventType      string `json:"event_type"`
	BatchID        string `json:"batch_id,omitempty"`
	// Status is pending (being attempted), succeeded or failed (given up,
	// or refused by the receiver).
	Status        string     `json:"status"`
	Attempts      int32      `json:"attempts"`
	LastError     string     `json:"last_error,omitempty"`
	NextAttemptAt *time.Time `json:"next_attempt_at,omitempty"`
	CreatedAt     time.Time  `json:"created_at"`
	UpdatedAt     time.Time  `json:"updated_at"`
	// Payload is the body sent (in the detail of one delivery only).
	Payload string `json:"payload,omitempty"`
	// AttemptList is every attempt, first first (in the detail only).
	AttemptList []Attempt `json:"attempt_list,omitempty"`
}

// Attempt is one request of a delivery.
type Attempt struct {
	Attempt int32 `json:"attempt"`
	// StatusCode is the receiver's answer; 0 when none came.
	StatusCode int32  `json:"status_code,omitempty"`
	Error      string `json:"error,omitempty"`
	DurationMS int32  `json:"duration_ms"`
	// Response is the start of the answer's body.
	Response    string    `json:"response,omitempty"`
	AttemptedAt time.Time `json:"attempted_at"`
}

// The delivery statuses.
const (
	StatusPending   = "pending"
	StatusSucceeded = "succeeded"
	StatusFailed    = "failed"
)

// MaxListed bounds a listing of deliveries.
const MaxListed = 200

// Deliveries are a subscription's last limit deliveries (at most
// MaxListed), newest first; status "" is any.
func (s *Service) Deliveries(ctx context.Context, subscriptionID, status string, limit int) ([]Delivery, error) {
	if _, err := s.Get(ctx, subscriptionID); err != nil {
		return nil, err
	}
	if status != "" && status != StatusPending && status != StatusSucceeded && status != StatusFailed {
		return nil, &problem.InputError{Msg: fmt.Sprintf("status must be pending, succeeded or failed, got %q", status)}
	}
	if limit <= 0 || limit > MaxListed {
		limit = MaxListed
	}
	rows, err := db.New(s.pool).WebhookDeliveryListBySubscription(ctx, db.WebhookDeliveryListBySubscriptionParams{
		SubscriptionID: subscriptionID, Status: status, MaxRows: int32(limit), //nolint:gosec // bounded above
	})
	if err != nil {
		return nil, fmt.Errorf("listing the deliveries of webhook subscription %s: %w", subscriptionID, err)
	}
	out := make([]Delivery, 0, len(rows))
	for _, r := range rows {
		out = append(out, deliveryOf(r))
	}
	return out, nil
}

// Delivery is one delivery with its payload and attempts.
func (s *Service) Delivery(ctx context.Context, id string) (Delivery, error) {
	q := db.New(s.pool)
	row, err := q.WebhookDeliveryGetByID(ctx, id)
	if err != nil {
		return Delivery{}, db.NotFound(err, "webhook delivery "+id)
	}
	attempts, err := q.WebhookAttemptListByDelivery(ctx, id)
	if err != nil {
		return Delivery{}, fmt.Errorf("listing the attempts of webhook delivery %s: %w", id, err)
	}
	d := deliveryOf(row)
	d.Payload = row.Body
	d.AttemptList = make([]Attempt, 0, len(attempts))
	for _, a := range attempts {
		d.AttemptList = append(d.AttemptList, Attempt{Attempt: a.Attempt, StatusCode: deref(a.StatusCode), Error: deref(a.Error),
			DurationMS: a.DurationMs, Response: a.ResponseExcerpt, AttemptedAt: a.AttemptedAt})
	}
	return d, nil
}

// Replay sends a finished delivery again, with the same webhook-id and
// body, retried as a new one is; rc enqueues its job. A delivery still
// being attempted, or of a disabled subscription, is a conflict.
func (s *Service) Replay(ctx context.Context, rc *river.Client[pgx.Tx], id string) (Delivery, error) {
	if s.sealer == nil {
		return Delivery{}, errNoKey()
	}
	if rc == nil {
		return Delivery{}, errors.New("replaying a webhook delivery needs the job client, which this server lacks")
	}
	tx, err := s.pool.Begin(ctx)
	if err != nil {
		return Delivery{}, err
	}
	defer func() { _ = tx.Rollback(ctx) }()
	q := db.New(tx)
	current, err := q.WebhookDeliveryGetByID(ctx, id)
	if err != nil {
		return Delivery{}, db.NotFound(err, "webhook delivery "+id)
	}
	sub, err := q.WebhookSubscriptionGetByID(ctx, current.SubscriptionID)
	if err != nil {
		return Delivery{}, fmt.Errorf("loading webhook subscription %s: %w", current.SubscriptionID, err)
	}
	if !sub.Enabled {
		return Delivery{}, fmt.Errorf("%w: webhook subscription %s is disabled (%s): enable it before replaying its deliveries",
			errConflict, sub.ID, deref(sub.DisabledReason))
	}
	row, err := q.WebhookDeliveryReplay(ctx, id)
	if errors.Is(err, pgx.ErrNoRows) {
		return Delivery{}, fmt.Errorf("%w: webhook delivery %s is still being attempted", errConflict, id)
	}
	if err != nil {
		return Delivery{}, fmt.Errorf("replaying webhook delivery %s: %w", id, err)
	}
	if _, err := rc.InsertTx(ctx, tx, DeliveryArgs{DeliveryID: id}, nil); err != nil {
		return Delivery{}, fmt.Errorf("enqueueing the replay of webhook delivery %s: %w", id, err)
	}
	if err := tx.Commit(ctx); err != nil {
		return Delivery{}, err
	}
	s.logger.Info("webhook delivery replayed", "delivery_id", id, "subscription_id", row.SubscriptionID)
	return deliveryOf(row), nil
}

// subscriptionOf is a row as the API shows it (no secret).
func subscriptionOf(r db.WebhookSubscription) Subscription {
	return Subscription{ID: r.ID, URL: r.URL, EventTypes: r.EventTypes, BatchID: deref(r.BatchID), Description: r.Description,
		Enabled: r.Enabled, DisabledReason: deref(r.DisabledReason), FailingSince: r.FailingSince, CreatedAt: r.CreatedAt}
}

// deliveryOf is a row as the API lists it.
func deliveryOf(r db.WebhookDelivery) Delivery {
	return Delivery{ID: r.ID, SubscriptionID: r.SubscriptionID, EventType: r.EventType, BatchID: deref(r.BatchID), Status: r.Status,
		Attempts: r.Attempts, LastError: deref(r.LastError), NextAttemptAt: r.NextAttemptAt, CreatedAt: r.CreatedAt, UpdatedAt: r.UpdatedAt}
}

// newID is prefix and 24 random hex digits.
func newID(prefix string) (string, error) {
	b := make([]byte, 12)
	if _, err := rand.Read(b); err != nil {
		return "", err
	}
	return prefix + hex.EncodeToString(b), nil
}

func nonEmpty(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}

func deref[T any](p *T) T {
	var zero T
	if p == nil {
		return zero
	}
	return *p
}
