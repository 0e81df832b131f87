package webhook

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river"

	"github.com/arke-institute/orchestrator/db"
	"github.com/arke-institute/orchestrator/metrics"
)

// DeliveryArgs is the job of one delivery: its attempts, until it
// succeeds, is refused, or its retry window ends. Each retry is the job
// snoozed (River counts no attempt), its delay chosen here; River's own
// retries are for the job's failures (the database away), not the
// receiver's.
type DeliveryArgs struct {
	DeliveryID string `json:"delivery_id"`
}

// Kind implements river.JobArgs.
func (DeliveryArgs) Kind() string { return "webhook_delivery" }

// InsertOpts implements river.JobArgsWithInsertOpts.
func (DeliveryArgs) InsertOpts() river.InsertOpts {
	return river.InsertOpts{Queue: Queue, MaxAttempts: 25}
}

// DeliveryWorker sends deliveries.
type DeliveryWorker struct {
	river.WorkerDefaults[DeliveryArgs]
	s *Service
}

// deliveryTimeout bounds one run: the request, then its record.
const deliveryTimeout = 45 * time.Second

// Timeout implements river.Worker.
func (w *DeliveryWorker) Timeout(*river.Job[DeliveryArgs]) time.Duration { return deliveryTimeout }

// maxAnswerBytes is how much of an answer is read; excerptBytes how much
// of it an attempt keeps.
const (
	maxAnswerBytes = 64 << 10
	excerptBytes   = 1 << 10
)

// outcome is what one request came to.
type outcome struct {
	code     int
	err      error // no answer, or an answer that is a failure
	excerpt  string
	took     time.Duration
	retry    bool          // a failure worth trying again
	notSoon  time.Duration // the answer's Retry-After
	accepted bool
}

// Work implements river.Worker.
func (w *DeliveryWorker) Work(ctx context.Context, job *river.Job[DeliveryArgs]) error {
	s := w.s
	q := db.New(s.pool)
	d, err := q.WebhookDeliveryGetByID(ctx, job.Args.DeliveryID)
	if errors.Is(err, pgx.ErrNoRows) {
		return river.JobCancel(fmt.Errorf("webhook delivery %s no longer exists (its subscription was deleted)", job.Args.DeliveryID))
	}
	if err != nil {
		return fmt.Errorf("loading webhook delivery %s: %w", job.Args.DeliveryID, err)
	}
	if d.Status != StatusPending {
		return nil // done by an earlier run of this job; a replay has a job of its own
	}
	sub, err := q.WebhookSubscriptionGetByID(ctx, d.SubscriptionID)
	if err != nil {
		return fmt.Errorf("loading webhook subscription %s: %w", d.SubscriptionID, err)
	}
	if !sub.Enabled {
		_, err := q.WebhookDeliveryRecord(ctx, db.WebhookDeliveryRecordParams{ID: d.ID, Attempts: d.Attempts, Status: StatusFailed,
			LastError: nonEmpty("not sent: the subscription is disabled (" + deref(sub.DisabledReason) + "); replay it once enabled")})
		return err
	}
	if s.sealer == nil {
		return errors.New("webhooks are off in this process: WEBHOOK_SECRET_KEY is not set")
	}
	secret, err := s.sealer.Open(sub.ID, sub.KeyID, sub.SecretSealed)
	if err != nil {
		return err
	}
	out := s.send(ctx, sub.URL, d, secret)
	delay, err := s.record(ctx, d, out)
	if err != nil {
		return err
	}
	if delay > 0 {
		return river.JobSnooze(delay)
	}
	return nil
}

// send makes one attempt of d to url.
func (s *Service) send(ctx context.Context, url string, d db.WebhookDelivery, secret Secret) outcome {
	start := time.Now()
	body := []byte(d.Body)
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(body))
	if err != nil {
		return outcome{err: fmt.Errorf("building the request: %w", err)}
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("User-Agent", "arke-orchestrator-webhooks/1")
	secret.Sign(req.Header, d.ID, time.Now(), body)
	resp, err := s.client.Do(req)
	if err != nil {
		return outcome{err: requestError(err), took: time.Since(start), retry: !errors.Is(err, ErrForbiddenAddress)}
	}
	defer resp.Body.Close()
	answer, readErr := io.ReadAll(io.LimitReader(resp.Body, maxAnswerBytes))
	out := outcome{code: resp.StatusCode, excerpt: excerpt(answer), took: time.Since(start)}
	switch c := resp.StatusCode; {
	case c >= 200 && c < 300:
		out.accepted = true
		if readErr != nil {
			s.logger.Debug("webhook answer not read whole", "delivery_id", d.ID, "error", readErr)
		}
	case c >= 300 && c < 400:
		out.err = fmt.Errorf("answered %s: redirects are not followed (subscribe the final URL)", resp.Status)
	case c == http.StatusRequestTimeout, c == http.StatusTooManyRequests, c >= 500:
		out.err = fmt.Errorf("answered %s", resp.Status)
		out.retry = true
		out.notSoon = retryAfter(resp.Header.Get("Retry-After"), time.Now())
	default:
		out.err = fmt.Errorf("answered %s: refused, not retried", resp.Status)
	}
	return out
}

// requestError is err without the URL that net/http wraps it in (the
// attempt names its subscription already).
func requestError(err error) error {
	var ue interface{ Unwrap() error }
	if errors.As(err, &ue) && strings.HasPrefix(err.Error(), "Post ") {
		if inner := ue.Unwrap(); inner != nil {
			return inner
		}
	}
	return err
}

// retryAfter is a Retry-After header's delay (seconds or an HTTP date),
// 0 when absent or unreadable.
func retryAfter(h string, now time.Time) time.Duration {
	if h == "" {
		return 0
	}
	if n, err := strconv.Atoi(strings.TrimSpace(h)); err == nil && n > 0 {
		return time.Duration(n) * time.Second
	}
	if t, err := http.ParseTime(h); err == nil && t.After(now) {
		return t.Sub(now)
	}
	return 0
}

// excerpt is the start of an answer, cut at a character boundary.
func excerpt(b []byte) string {
	if len(b) > excerptBytes {
		b = b[:excerptBytes]
		for len(b) > 0 && !utf8.Valid(b) {
			b = b[:len(b)-1]
		}
	}
	return strings.ToValidUTF8(string(b), "\uFFFD")
}

// backoff is the delay before retry n (1 for the first): FirstRetry
// doubled n-1 times, at most MaxBackoff, plus up to 10% jitter.
func (c Config) backoff(n int32) time.Duration {
	d := c.MaxBackoff
	if n < 30 {
		d = min(c.FirstRetry<<(n-1), c.MaxBackoff)
	}
	return d + time.Duration(rand.Int64N(int64(d)/10+1))
}

// record writes an attempt's outcome in one transaction: the attempt, the
// delivery's state and its subscription's failing clock (disabling it
// when it has failed for DisableAfter without a success). It returns the
// delay before the next attempt, 0 when there is none.
func (s *Service) record(ctx context.Context, d db.WebhookDelivery, out outcome) (time.Duration, error) {
	now := s.cfg.Now()
	attempt := d.Attempts + 1
	var delay time.Duration
	status, lastErr := StatusSucceeded, ""
	if !out.accepted {
		status, lastErr = StatusFailed, out.err.Error()
		if out.retry {
			delay = max(s.cfg.backoff(attempt), out.notSoon)
			if now.Add(delay).Sub(d.WindowStart) > s.cfg.RetryWindow {
				delay = 0
				lastErr = fmt.Sprintf("gave up after %d attempts over %s: %s", attempt, humanDuration(now.Sub(d.WindowStart)), lastErr)
			} else {
				status = StatusPending
			}
		}
	}
	var next *time.Time
	if delay > 0 {
		t := now.Add(delay)
		next = &t
	}
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		q := db.New(tx)
		sub, err := q.WebhookSubscriptionGetForUpdate(ctx, d.SubscriptionID)
		if err != nil {
			return fmt.Errorf("locking webhook subscription %s: %w", d.SubscriptionID, err)
		}
		var code *int32
		if out.code != 0 {
			c := int32(out.code) //nolint:gosec // an HTTP status code
			code = &c
		}
		if err := q.WebhookAttemptInsert(ctx, db.WebhookAttemptInsertParams{DeliveryID: d.ID, Attempt: attempt, StatusCode: code,
			Error: errText(out.err), DurationMs: int32(out.took.Milliseconds()), ResponseExcerpt: out.excerpt}); err != nil { //nolint:gosec // bounded by the timeout
			return fmt.Errorf("recording attempt %d of webhook delivery %s: %w", attempt, d.ID, err)
		}
		if _, err := q.WebhookDeliveryRecord(ctx, db.WebhookDeliveryRecordParams{ID: d.ID, Attempts: attempt, Status: status,
			LastError: nonEmpty(lastErr), NextAttemptAt: next}); err != nil {
			return fmt.Errorf("recording webhook delivery %s: %w", d.ID, err)
		}
		return s.judge(ctx, q, sub, d, out, status, now)
	})
	if err != nil {
		return 0, err
	}
	s.metrics.WebhookAttempt(attemptResult(out, status))
	return delay, nil
}

// attemptResult is the result label of an attempt's metric.
func attemptResult(out outcome, status string) string {
	switch {
	case out.accepted:
		return metrics.WebhookSucceeded
	case status == StatusPending:
		return metrics.WebhookRetrying
	}
	return metrics.WebhookFailed
}

// judge moves a subscription's failing clock after an attempt: a success
// clears it, a failure starts it or, when it has run for DisableAfter (or
// a delivery gave up and the receiver took nothing since it began),
// disables the subscription with the reason.
func (s *Service) judge(ctx context.Context, q *db.Queries, sub db.WebhookSubscription, d db.WebhookDelivery, out outcome, status string, now time.Time) error {
	if out.accepted {
		if sub.FailingSince == nil {
			return nil
		}
		return q.WebhookSubscriptionSetFailing(ctx, db.WebhookSubscriptionSetFailingParams{ID: sub.ID})
	}
	since := now
	if sub.FailingSince != nil {
		since = *sub.FailingSince
	} else if err := q.WebhookSubscriptionSetFailing(ctx, db.WebhookSubscriptionSetFailingParams{ID: sub.ID, FailingSince: &now}); err != nil {
		return err
	}
	if !sub.Enabled {
		return nil
	}
	reason := ""
	switch {
	case now.Sub(since) >= s.cfg.DisableAfter:
		reason = fmt.Sprintf("every attempt failed for %s (since %s); the last: %v", humanDuration(now.Sub(since)), since.UTC().Format(time.RFC3339), out.err)
	case status == StatusFailed && out.retry:
		// The delivery gave up: the subscription goes too unless its
		// receiver took something meanwhile.
		took, err := q.WebhookAttemptSucceededSince(ctx, db.WebhookAttemptSucceededSinceParams{SubscriptionID: sub.ID, Since: d.WindowStart})
		if err != nil || took {
			return err
		}
		reason = fmt.Sprintf("delivery %s gave up after %s of failures, with no delivery taken meanwhile; the last: %v", d.ID, humanDuration(now.Sub(d.WindowStart)), out.err)
	default:
		return nil
	}
	if _, err := q.WebhookSubscriptionSetEnabled(ctx, db.WebhookSubscriptionSetEnabledParams{ID: sub.ID, Enabled: false, Reason: reason}); err != nil {
		return fmt.Errorf("disabling webhook subscription %s: %w", sub.ID, err)
	}
	s.logger.Warn("webhook subscription disabled", "subscription_id", sub.ID, "reason", reason)
	s.metrics.WebhookDisabled()
	return nil
}

// errText is err's text; nil for no error.
func errText(err error) *string {
	if err == nil {
		return nil
	}
	t := err.Error()
	return &t
}

// humanDuration is d rounded for a reason's text.
func humanDuration(d time.Duration) string {
	switch {
	case d < time.Minute:
		return d.Round(time.Second).String()
	case d < 48*time.Hour:
		return d.Round(time.Minute).String()
	}
	return fmt.Sprintf("%d days", int(d.Hours())/24)
}
