package worker

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/arke-institute/orchestrator/worker/protocol"
)

// Callback is where and as whom a worker reports its result: a POST of a
// JSON body to URL with "Authorization: Bearer <Token>" (spec 000 §4.4).
type Callback struct {
	TaskID  string
	BatchID string
	URL     string
	Token   string
	// Client sends the requests; nil means a client with a 30 s timeout
	// per attempt.
	Client *http.Client
	// Backoff paces retries; the zero value means DefaultBackoff.
	Backoff Backoff
	// Logger receives a warning per failed attempt; nil discards them.
	Logger *slog.Logger
	// Deadline is the task's (TASK_DEADLINE): its storage and URL
	// requests retry transient failures until then (RetryUntil). Zero:
	// unknown.
	Deadline time.Time
	// Protocol is the protocol version sent with every request
	// (protocol.Header); 0 means protocol.Current. protocol.V1 sends no
	// header, as the workers of version 1 did.
	Protocol int
	// Attempt names the attempt the token is of (TASK_ATTEMPT): the
	// worker's writes that replace go to its staging area
	// (phases.AttemptKey), from which the orchestrator promotes them
	// when the attempt's success is applied. Empty: they go to their keys.
	Attempt string
	// Traceparent (TRACEPARENT), when set, is sent as the W3C
	// "traceparent" header of every request, so that the orchestrator
	// traces the callback in its task's trace.
	Traceparent string
}

// DefaultStorageRetryWindow is how long storage requests retry transient
// failures when the task's deadline is unknown.
const DefaultStorageRetryWindow = 2 * time.Minute

// RetryUntil is when a task's storage and URL requests stop retrying
// transient failures: its deadline, or DefaultStorageRetryWindow from now
// when that is unknown or already past.
func (c Callback) RetryUntil(now time.Time) time.Time {
	if c.Deadline.After(now) {
		return c.Deadline
	}
	return now.Add(DefaultStorageRetryWindow)
}

// Complete reports whether a callback can be attempted at all: without a
// URL, a token or the task's identity there is no one to report to.
func (c Callback) Complete() bool {
	return c.TaskID != "" && c.BatchID != "" && c.URL != "" && c.Token != ""
}

// Backoff is the retry schedule of a callback: the first retry waits
// Initial, each next one twice as long up to Max, with ±20% jitter so that
// the workers of a batch that failed together do not retry together. It
// gives up after Attempts attempts or once Window has passed since the
// first, whichever comes first (a zero one is no limit; not both).
type Backoff struct {
	Initial  time.Duration
	Max      time.Duration
	Attempts int           // total attempts, the first included
	Window   time.Duration // how long to keep retrying, from the first attempt
}

// DefaultCallbackRetryWindow is how long a callback is retried unless
// CALLBACK_RETRY_WINDOW says otherwise: long enough to outlast a Postgres
// failover or an orchestrator restart, during which callbacks answer 503.
const DefaultCallbackRetryWindow = 15 * time.Minute

// DefaultBackoff retries for DefaultCallbackRetryWindow: the orchestrator
// may be restarting, its database failing over, or briefly overloaded, and
// a task's result is worth the wait.
var DefaultBackoff = Backoff{Initial: 500 * time.Millisecond, Max: 30 * time.Second, Window: DefaultCallbackRetryWindow}

// storageBackoffMax caps the wait between a storage request's retries
// (and its Retry-After).
const storageBackoffMax = 30 * time.Second

// urlsBackoff paces a worker's requests for URLs in the middle of its work:
// until the task's deadline (Callback.RetryUntil), not for the callback's
// window, since the task's deadline runs meanwhile.
func (c *Callback) urlsBackoff(now time.Time) Backoff {
	return Backoff{Initial: 500 * time.Millisecond, Max: storageBackoffMax, Window: c.RetryUntil(now).Sub(now)}
}

// backoff is the callback's schedule, DefaultBackoff when unset.
func (c *Callback) backoff() Backoff {
	if c.Backoff.Attempts <= 0 && c.Backoff.Window <= 0 {
		return DefaultBackoff
	}
	return c.Backoff
}

// ErrNotWanted is matched by a callback answered 409 Conflict: the
// orchestrator no longer expects this task's result (it timed out, was
// reset, or a result was already recorded). Retrying cannot change that.
var ErrNotWanted = errors.New("orchestrator no longer wants this result (409 Conflict)")

// StatusError is a callback refused with a status that retrying will not
// change (4xx other than 409 and 429), or the last status when attempts ran
// out.
type StatusError struct {
	Code int
	// Message is the orchestrator's {"error": "..."} message, or the start
	// of the response body.
	Message string
}

func (e *StatusError) Error() string {
	if e.Message == "" {
		return fmt.Sprintf("callback answered %d %s", e.Code, http.StatusText(e.Code))
	}
	return fmt.Sprintf("callback answered %d %s: %s", e.Code, http.StatusText(e.Code), e.Message)
}

// PostCallback POSTs body as JSON to url with the bearer token, retrying
// network errors, 5xx and 429 with DefaultBackoff. See Callback.Post.
func PostCallback(ctx context.Context, url, token string, body any) error {
	return (&Callback{URL: url, Token: token}).Post(ctx, body)
}

// Post sends body (marshalled to JSON unless it is a json.RawMessage or
// []byte) and returns nil once the orchestrator answers 2xx. Network
// errors, 5xx and 429 are retried with backoff (a 429's or 503's
// Retry-After is honoured up to Backoff.Max) for Backoff's window; a 409
// returns ErrNotWanted at once, any other status a *StatusError at once.
// It gives up when ctx ends.
func (c *Callback) Post(ctx context.Context, body any) error {
	return c.exchange(ctx, "callback", c.URL, c.backoff(), body, nil)
}

// exchange POSTs body to url as Post does, retrying on bo's schedule, and,
// when out is not nil, decodes the 2xx answer's JSON into out (a malformed
// answer is retried too). what names the request in errors and logs, which
// never show the token.
func (c *Callback) exchange(ctx context.Context, what, url string, bo Backoff, body, out any) error {
	var data []byte
	switch b := body.(type) {
	case json.RawMessage:
		data = b
	case []byte:
		data = b
	default:
		var err error
		if data, err = json.Marshal(body); err != nil {
			return fmt.Errorf("encoding %s body: %w", what, err)
		}
	}
	client := c.Client
	if client == nil {
		client = &http.Client{Timeout: 30 * time.Second}
	}
	log := c.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}

	delay := bo.Initial
	start := time.Now()
	var lastErr error
	for attempt := 1; ; attempt++ {
		retryAfter, err := c.attempt(ctx, client, what, url, data, out)
		if err == nil {
			return nil
		}
		lastErr = err
		var se *StatusError
		if errors.Is(err, ErrNotWanted) || (errors.As(err, &se) && !retryable(se.Code)) {
			return err
		}
		elapsed := time.Since(start)
		if (bo.Attempts > 0 && attempt >= bo.Attempts) || (bo.Window > 0 && elapsed >= bo.Window) {
			return fmt.Errorf("%s not delivered after %d attempts in %s: %w", what, attempt, elapsed.Round(time.Millisecond), lastErr)
		}
		wait := min(jitter(delay), bo.Max)
		if retryAfter > wait {
			wait = min(retryAfter, bo.Max)
		}
		if bo.Window > 0 {
			wait = min(wait, bo.Window-elapsed) // the last attempt at the window's end
		}
		log.Warn(what+" failed, retrying", "attempt", attempt, "elapsed", elapsed.Round(time.Millisecond).String(),
			"retry_in", wait.String(), "error", err.Error())
		select {
		case <-ctx.Done():
			return fmt.Errorf("%s not delivered after %d attempts (%w): %w", what, attempt, context.Cause(ctx), lastErr)
		case <-time.After(wait):
		}
		delay = min(2*delay, bo.Max)
	}
}

// attempt makes one request. It returns the server's Retry-After, if any.
func (c *Callback) attempt(ctx context.Context, client *http.Client, what, url string, data []byte, out any) (time.Duration, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(data))
	if err != nil {
		// A malformed URL: retrying cannot fix it.
		return 0, &StatusError{Message: "invalid CALLBACK_URL: " + err.Error()}
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+c.Token)
	if c.Traceparent != "" {
		req.Header.Set("traceparent", c.Traceparent)
	}
	if v := cmp.Or(c.Protocol, protocol.Current); v != protocol.V1 {
		req.Header.Set(protocol.Header, protocol.Value(v))
	}
	resp, err := client.Do(req)
	if err != nil {
		return 0, fmt.Errorf("posting %s: %w", what, err)
	}
	defer resp.Body.Close()
	switch {
	case resp.StatusCode >= 200 && resp.StatusCode < 300:
		if out == nil {
			_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 4096)) // lets the connection be reused
			return 0, nil
		}
		if err := json.NewDecoder(resp.Body).Decode(out); err != nil {
			return 0, fmt.Errorf("reading the answer to the %s: %w", what, err)
		}
		return 0, nil
	case resp.StatusCode == http.StatusConflict:
		if msg := readMessage(resp.Body); msg != "" {
			return 0, fmt.Errorf("%w: %s", ErrNotWanted, msg)
		}
		return 0, ErrNotWanted
	}
	return parseRetryAfter(resp.Header.Get("Retry-After")), &StatusError{Code: resp.StatusCode, Message: readMessage(resp.Body)}
}

// retryable reports whether a status may change on retry: the server was
// down, overloaded or rate limiting. Code 0 is a request that could not be
// built.
func retryable(code int) bool {
	return code == http.StatusTooManyRequests || (code >= 500 && code != http.StatusNotImplemented)
}

// readMessage extracts the {"error": "..."} message of an error response,
// or the start of the body if it is not that.
func readMessage(r io.Reader) string {
	body, _ := io.ReadAll(io.LimitReader(r, 4096))
	var e struct {
		Error string `json:"error"`
	}
	if json.Unmarshal(body, &e) == nil && e.Error != "" {
		return e.Error
	}
	return strings.TrimSpace(string(body))
}

func parseRetryAfter(v string) time.Duration {
	if v == "" {
		return 0
	}
	if secs, err := strconv.Atoi(v); err == nil && secs > 0 {
		return time.Duration(secs) * time.Second
	}
	if t, err := http.ParseTime(v); err == nil {
		return time.Until(t)
	}
	return 0
}

func jitter(d time.Duration) time.Duration {
	return time.Duration(float64(d) * (0.8 + 0.4*rand.Float64()))
}
