package webhook_test

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/stretchr/testify/require"

	"github.com/arke-institute/orchestrator/db"
	"github.com/arke-institute/orchestrator/internal/harness/dbtest"
	"github.com/arke-institute/orchestrator/internal/harness/eventually"
	"github.com/arke-institute/orchestrator/problem"
	"github.com/arke-institute/orchestrator/webhook"
)

// testKey is the tests' WEBHOOK_SECRET_KEY.
var testKey = []byte("test-webhook-key-32-bytes-long!!")

// loopback allows the tests' receivers.
var loopback = []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8"), netip.MustParsePrefix("::1/128")}

// request is what a receiver was sent.
type request struct {
	header http.Header
	body   []byte
	at     time.Time
}

// answer is how a receiver answers one request.
type answer struct {
	code       int
	retryAfter string
	location   string
}

// receiver is an HTTP receiver of deliveries that answers from a script,
// then 200.
type receiver struct {
	*httptest.Server
	mu       sync.Mutex
	requests []request
	script   []answer
}

func newReceiver(t *testing.T, script ...answer) *receiver {
	r := &receiver{script: script}
	r.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		body, _ := io.ReadAll(req.Body)
		r.mu.Lock()
		n := len(r.requests)
		r.requests = append(r.requests, request{header: req.Header.Clone(), body: body, at: time.Now()})
		a := answer{code: http.StatusOK}
		if n < len(r.script) {
			a = r.script[n]
		}
		r.mu.Unlock()
		if a.retryAfter != "" {
			w.Header().Set("Retry-After", a.retryAfter)
		}
		if a.location != "" {
			w.Header().Set("Location", a.location)
		}
		w.WriteHeader(a.code)
		_, _ = io.WriteString(w, "answer "+strconv.Itoa(a.code))
	}))
	t.Cleanup(r.Close)
	return r
}

func (r *receiver) got() []request {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]request(nil), r.requests...)
}

// env is a webhook service with its River client working.
type env struct {
	pool  *pgxpool.Pool
	svc   *webhook.Service
	river *river.Client[pgx.Tx]
}

// start runs the webhooks of cfg (its key, loopback allowed and short
// retries unless set) on a fresh database.
func start(t *testing.T, cfg webhook.Config) *env {
	t.Helper()
	pool := dbtest.New(t)
	if cfg.Key == nil {
		cfg.Key = testKey
	}
	if cfg.Allow == nil {
		cfg.Allow = loopback
	}
	if cfg.FirstRetry == 0 {
		cfg.FirstRetry = 50 * time.Millisecond
	}
	if cfg.DispatchInterval == 0 {
		cfg.DispatchInterval = 20 * time.Millisecond
	}
	logger := slog.New(slog.NewTextHandler(io.Discard, nil))
	svc, err := webhook.New(pool, cfg, logger, nil)
	require.NoError(t, err)
	workers := river.NewWorkers()
	queues, periodic := svc.Register(workers)
	rc, err := river.NewClient(riverpgxv5.New(pool), &river.Config{Queues: queues, Workers: workers, PeriodicJobs: periodic,
		FetchPollInterval: 100 * time.Millisecond, Logger: logger})
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	require.NoError(t, rc.Start(ctx))
	t.Cleanup(func() {
		stop, done := context.WithTimeout(context.Background(), 10*time.Second)
		defer done()
		_ = rc.Stop(stop)
		cancel()
	})
	return &env{pool: pool, svc: svc, river: rc}
}

func (e *env) subscribe(t *testing.T, url string, types ...string) webhook.Subscription {
	t.Helper()
	sub, err := e.svc.Create(context.Background(), webhook.NewSubscription{URL: url, EventTypes: types})
	require.NoError(t, err)
	return sub
}

func (e *env) event(t *testing.T, batchID, typ string) {
	t.Helper()
	require.NoError(t, db.New(e.pool).EventRecord(context.Background(), db.Event{BatchID: batchID, Type: typ, Phase: "OCR", Data: map[string]any{"files": 3}}))
}

// delivery waits for the subscription's one delivery to have status and
// returns it with its attempts.
func (e *env) delivery(t *testing.T, subID, status string) webhook.Delivery {
	t.Helper()
	var d webhook.Delivery
	eventually.True(t, 20*time.Second, "a delivery "+status, func() bool {
		ds, err := e.svc.Deliveries(context.Background(), subID, status, 0)
		require.NoError(t, err)
		if len(ds) == 0 {
			return false
		}
		d, err = e.svc.Delivery(context.Background(), ds[0].ID)
		require.NoError(t, err)
		return true
	})
	return d
}

// verify checks a request's signature as a receiver would, with nothing
// of package webhook: Standard Webhooks' HMAC-SHA256 of id.timestamp.body
// under the base64 key after whsec_.
func verify(t *testing.T, secret string, r request) {
	t.Helper()
	require.True(t, strings.HasPrefix(secret, "whsec_"), secret)
	key, err := base64.StdEncoding.DecodeString(strings.TrimPrefix(secret, "whsec_"))
	require.NoError(t, err)
	id, ts := r.header.Get("webhook-id"), r.header.Get("webhook-timestamp")
	require.NotEmpty(t, id)
	sec, err := strconv.ParseInt(ts, 10, 64)
	require.NoError(t, err)
	require.InDelta(t, time.Now().Unix(), sec, 300, "the timestamp is now, in seconds")
	mac := hmac.New(sha256.New, key)
	mac.Write([]byte(id + "." + ts + "." + string(r.body)))
	want := "v1," + base64.StdEncoding.EncodeToString(mac.Sum(nil))
	require.Contains(t, strings.Fields(r.header.Get("webhook-signature")), want)
}

// TestDeliverySignedAsStandardWebhooks: an event a subscription wants
// reaches its receiver once, signed so that the Standard Webhooks
// algorithm, computed here independently, verifies it; its body is
// {type, timestamp, data} with the batch's id and phase; the attempt is
// recorded with its answer.
func TestDeliverySignedAsStandardWebhooks(t *testing.T) {
	t.Parallel()
	e := start(t, webhook.Config{})
	rcv := newReceiver(t)
	sub := e.subscribe(t, rcv.URL+"/hook", "batch.done")
	require.NotEmpty(t, sub.Secret, "the secret is shown at creation")
	e.event(t, "B1", db.EventBatchDone)

	d := e.delivery(t, sub.ID, webhook.StatusSucceeded)
	got := rcv.got()
	require.Len(t, got, 1)
	verify(t, sub.Secret, got[0])
	require.Equal(t, d.ID, got[0].header.Get("webhook-id"))
	require.Equal(t, "application/json", got[0].header.Get("Content-Type"))
	var body struct {
		Type      string         `json:"type"`
		Timestamp time.Time      `json:"timestamp"`
		Data      map[string]any `json:"data"`
	}
	require.NoError(t, json.Unmarshal(got[0].body, &body))
	require.Equal(t, "batch.done", body.Type)
	require.WithinDuration(t, time.Now(), body.Timestamp, time.Minute)
	require.Equal(t, "B1", body.Data["batch_id"])
	require.Equal(t, "OCR", body.Data["phase"])
	require.EqualValues(t, 3, body.Data["files"])
	require.Equal(t, string(got[0].body), d.Payload, "the body sent is the one stored")
	require.Len(t, d.AttemptList, 1)
	require.EqualValues(t, 200, d.AttemptList[0].StatusCode)
	require.Equal(t, "answer 200", d.AttemptList[0].Response)

	listed, err := e.svc.Get(context.Background(), sub.ID)
	require.NoError(t, err)
	require.Empty(t, listed.Secret, "the secret is never shown again")
}

// TestOnlyWantedEventsReachTheOutbox: events no enabled subscription
// wants (another type, another batch, a disabled subscription, no
// subscription at all) are not copied to the outbox.
func TestOnlyWantedEventsReachTheOutbox(t *testing.T) {
	t.Parallel()
	e := start(t, webhook.Config{Key: testKey})
	outbox := func() int {
		var n int
		require.NoError(t, e.pool.QueryRow(context.Background(), `SELECT count(*) FROM webhook_outbox`).Scan(&n))
		return n
	}
	deliveries := func() int {
		var n int
		require.NoError(t, e.pool.QueryRow(context.Background(), `SELECT count(*) FROM webhook_deliveries`).Scan(&n))
		return n
	}
	e.event(t, "B1", db.EventBatchDone)
	require.Zero(t, outbox(), "no subscription: nothing copied")

	rcv := newReceiver(t)
	sub, err := e.svc.Create(context.Background(), webhook.NewSubscription{URL: rcv.URL, EventTypes: []string{"batch.done"}, BatchID: "B2"})
	require.NoError(t, err)
	off := e.subscribe(t, rcv.URL, "batch.error")
	_, err = e.svc.SetEnabled(context.Background(), off.ID, false, "")
	require.NoError(t, err)
	rows := make([]db.BatchEventInsertManyParams, 0, 100)
	for i := range 100 {
		rows = append(rows, db.Event{BatchID: "B2", Type: db.EventTaskCompleted, TaskID: strconv.Itoa(i)}.Row())
	}
	_, err = db.New(e.pool).BatchEventInsertMany(context.Background(), rows)
	require.NoError(t, err)
	e.event(t, "B1", db.EventBatchDone)
	e.event(t, "B2", db.EventBatchError)
	require.Zero(t, outbox(), "task events, another batch's and a disabled subscription's types are not copied")
	require.Zero(t, deliveries())

	e.event(t, "B2", db.EventBatchDone)
	d := e.delivery(t, sub.ID, webhook.StatusSucceeded)
	require.Equal(t, "B2", d.BatchID)
	require.Equal(t, 1, deliveries())
}

// TestRetriedOn500ThenSucceeds: 5xx answers are retried with the same
// webhook-id until the receiver takes the delivery.
func TestRetriedOn500ThenSucceeds(t *testing.T) {
	t.Parallel()
	e := start(t, webhook.Config{})
	rcv := newReceiver(t, answer{code: 500}, answer{code: 503})
	sub := e.subscribe(t, rcv.URL, "phase.completed")
	e.event(t, "B1", db.EventPhaseCompleted)

	d := e.delivery(t, sub.ID, webhook.StatusSucceeded)
	got := rcv.got()
	require.Len(t, got, 3)
	for _, r := range got {
		require.Equal(t, d.ID, r.header.Get("webhook-id"), "the same id on every attempt")
		verify(t, sub.Secret, r)
	}
	require.EqualValues(t, 3, d.Attempts)
	require.Len(t, d.AttemptList, 3)
	require.EqualValues(t, 500, d.AttemptList[0].StatusCode)
	require.Contains(t, d.AttemptList[0].Error, "500")
	require.EqualValues(t, 503, d.AttemptList[1].StatusCode)
	require.EqualValues(t, 200, d.AttemptList[2].StatusCode)
	s, err := e.svc.Get(context.Background(), sub.ID)
	require.NoError(t, err)
	require.Nil(t, s.FailingSince, "a success clears the failing clock")
}

// TestNotRetriedOn400: a 4xx other than 408 and 429 fails the delivery at
// once; so does a redirect, which is not followed.
func TestNotRetriedOn400(t *testing.T) {
	t.Parallel()
	e := start(t, webhook.Config{})
	target := newReceiver(t)
	for _, a := range []answer{{code: 400}, {code: 302, location: target.URL}} {
		rcv := newReceiver(t, a)
		sub := e.subscribe(t, rcv.URL, "batch.error")
		e.event(t, "B-"+strconv.Itoa(a.code), db.EventBatchError)
		d := e.delivery(t, sub.ID, webhook.StatusFailed)
		require.EqualValues(t, 1, d.Attempts)
		require.Len(t, rcv.got(), 1)
		require.Nil(t, d.NextAttemptAt)
		if a.code == 302 {
			require.Contains(t, d.LastError, "redirects are not followed")
		} else {
			require.Contains(t, d.LastError, "not retried")
		}
		eventually.True(t, 20*time.Second, "the delivery's job completed: nothing more will be sent", func() bool {
			var state string
			require.NoError(t, e.pool.QueryRow(context.Background(),
				`SELECT state FROM river_job WHERE kind = 'webhook_delivery' AND args->>'delivery_id' = $1`, d.ID).Scan(&state))
			return state == "completed"
		})
		require.Len(t, rcv.got(), 1)
	}
	require.Empty(t, target.got(), "the redirect's target is never called")
}

// TestRetryAfterHonoured: a 429 is retried no sooner than its Retry-After.
func TestRetryAfterHonoured(t *testing.T) {
	t.Parallel()
	e := start(t, webhook.Config{})
	rcv := newReceiver(t, answer{code: 429, retryAfter: "1"})
	sub := e.subscribe(t, rcv.URL, "chunk.completed")
	e.event(t, "B1", db.EventChunkCompleted)
	d := e.delivery(t, sub.ID, webhook.StatusSucceeded)
	got := rcv.got()
	require.Len(t, got, 2)
	require.GreaterOrEqual(t, got[1].at.Sub(got[0].at), time.Second, "retried after Retry-After, not the 50 ms backoff")
	require.EqualValues(t, 429, d.AttemptList[0].StatusCode)
}

// TestDisabledAfterFailingWindow: a subscription whose attempts keep
// failing for WEBHOOK_DISABLE_AFTER is disabled with the reason, and its
// pending delivery is not sent any more; one whose delivery runs out of
// its retry window is disabled too.
func TestDisabledAfterFailingWindow(t *testing.T) {
	t.Parallel()
	t.Run("FailingFor", func(t *testing.T) {
		t.Parallel()
		e := start(t, webhook.Config{DisableAfter: 400 * time.Millisecond, MaxBackoff: 100 * time.Millisecond})
		rcv := newReceiver(t, answer{code: 503}, answer{code: 503}, answer{code: 503}, answer{code: 503}, answer{code: 503},
			answer{code: 503}, answer{code: 503}, answer{code: 503}, answer{code: 503}, answer{code: 503}, answer{code: 503})
		sub := e.subscribe(t, rcv.URL, "batch.done")
		e.event(t, "B1", db.EventBatchDone)
		d := e.delivery(t, sub.ID, webhook.StatusFailed)
		require.Contains(t, d.LastError, "the subscription is disabled")
		s, err := e.svc.Get(context.Background(), sub.ID)
		require.NoError(t, err)
		require.False(t, s.Enabled)
		require.Contains(t, s.DisabledReason, "every attempt failed for")
		require.Contains(t, s.DisabledReason, "503")
		sent := len(rcv.got())
		require.GreaterOrEqual(t, sent, 2)
		require.Less(t, sent, 11, "it stopped before the receiver would have taken it")

		_, err = e.svc.Replay(context.Background(), e.river, d.ID)
		require.ErrorIs(t, err, problem.ErrConflict, "a disabled subscription's delivery is not replayed")
		require.Contains(t, err.Error(), "enable it")
	})
	t.Run("RetriesExhausted", func(t *testing.T) {
		t.Parallel()
		e := start(t, webhook.Config{RetryWindow: 300 * time.Millisecond, MaxBackoff: 100 * time.Millisecond})
		rcv := newReceiver(t, answer{code: 500}, answer{code: 500}, answer{code: 500}, answer{code: 500}, answer{code: 500},
			answer{code: 500}, answer{code: 500}, answer{code: 500}, answer{code: 500}, answer{code: 500})
		sub := e.subscribe(t, rcv.URL, "batch.done")
		e.event(t, "B1", db.EventBatchDone)
		d := e.delivery(t, sub.ID, webhook.StatusFailed)
		require.Contains(t, d.LastError, "gave up after")
		s, err := e.svc.Get(context.Background(), sub.ID)
		require.NoError(t, err)
		require.False(t, s.Enabled)
		require.Contains(t, s.DisabledReason, "gave up")
	})
}

// TestReplaySendsTheSameID: a replayed delivery is sent again with its
// webhook-id and body, signed afresh; a pending one is not replayed.
func TestReplaySendsTheSameID(t *testing.T) {
	t.Parallel()
	e := start(t, webhook.Config{})
	rcv := newReceiver(t)
	sub := e.subscribe(t, rcv.URL, "batch.done")
	e.event(t, "B1", db.EventBatchDone)
	d := e.delivery(t, sub.ID, webhook.StatusSucceeded)

	replayed, err := e.svc.Replay(context.Background(), e.river, d.ID)
	require.NoError(t, err)
	require.Equal(t, webhook.StatusPending, replayed.Status)
	eventually.True(t, 20*time.Second, "the replay sent", func() bool { return len(rcv.got()) == 2 })
	got := rcv.got()
	require.Equal(t, d.ID, got[1].header.Get("webhook-id"))
	require.Equal(t, got[0].body, got[1].body)
	verify(t, sub.Secret, got[1])
	again := e.delivery(t, sub.ID, webhook.StatusSucceeded)
	eventually.True(t, 20*time.Second, "the replay recorded", func() bool {
		again, err = e.svc.Delivery(context.Background(), d.ID)
		require.NoError(t, err)
		return again.Status == webhook.StatusSucceeded && again.Attempts == 2
	})
	require.Len(t, again.AttemptList, 2)

	slow := newReceiver(t, answer{code: 500})
	sub2 := e.subscribe(t, slow.URL, "batch.error")
	e.event(t, "B1", db.EventBatchError)
	var pending webhook.Delivery
	eventually.True(t, 20*time.Second, "a delivery retrying", func() bool {
		ds, err := e.svc.Deliveries(context.Background(), sub2.ID, "", 0)
		require.NoError(t, err)
		if len(ds) == 1 && ds[0].Attempts >= 1 && ds[0].Status == webhook.StatusPending {
			pending = ds[0]
			return true
		}
		return false
	})
	_, err = e.svc.Replay(context.Background(), e.river, pending.ID)
	if err != nil { // it may have succeeded meanwhile, and then replays
		require.ErrorIs(t, err, problem.ErrConflict)
		require.Contains(t, err.Error(), "still being attempted")
	}
}

// TestSecretSealedAtRest: the signing secret is stored sealed, not in the
// clear; another key cannot open it and says so.
func TestSecretSealedAtRest(t *testing.T) {
	t.Parallel()
	e := start(t, webhook.Config{})
	sub := e.subscribe(t, "http://127.0.0.1:9/hook", "batch.done")
	secret, err := webhook.ParseSecret(sub.Secret)
	require.NoError(t, err)
	var sealed []byte
	var keyID string
	require.NoError(t, e.pool.QueryRow(context.Background(), `SELECT secret_sealed, key_id FROM webhook_subscriptions WHERE id = $1`, sub.ID).Scan(&sealed, &keyID))
	var row string
	require.NoError(t, e.pool.QueryRow(context.Background(), `SELECT to_jsonb(s)::text FROM webhook_subscriptions s WHERE id = $1`, sub.ID).Scan(&row))
	require.NotContains(t, string(sealed), string(secret))
	require.NotContains(t, row, sub.Secret)
	require.NotContains(t, row, strings.TrimPrefix(sub.Secret, "whsec_"))

	sealer, err := webhook.NewSealer(testKey)
	require.NoError(t, err)
	opened, err := sealer.Open(sub.ID, keyID, sealed)
	require.NoError(t, err)
	require.Equal(t, secret, opened)
	_, err = sealer.Open("wh_other", keyID, sealed)
	require.Error(t, err, "a sealed secret is bound to its subscription")
	other, err := webhook.NewSealer([]byte("another-key-of-exactly-32-bytes!"))
	require.NoError(t, err)
	_, err = other.Open(sub.ID, keyID, sealed)
	require.ErrorContains(t, err, "sealed with another WEBHOOK_SECRET_KEY")
}

// TestCreateRefusesBadSubscriptions: no key, a bad scheme, an unknown
// event type, a forbidden address: each is refused, saying why.
func TestCreateRefusesBadSubscriptions(t *testing.T) {
	t.Parallel()
	e := start(t, webhook.Config{Allow: []netip.Prefix{}})
	for _, c := range []struct {
		sub  webhook.NewSubscription
		want string
	}{
		{webhook.NewSubscription{URL: "ftp://example.com/x", EventTypes: []string{"batch.done"}}, "scheme must be http or https"},
		{webhook.NewSubscription{URL: "https://example.com/x", EventTypes: []string{"task.nope"}}, `unknown event type "task.nope"`},
		{webhook.NewSubscription{URL: "https://example.com/x"}, "at least one event type"},
		{webhook.NewSubscription{URL: "http://127.0.0.1:8080/x", EventTypes: []string{"batch.done"}}, "loopback"},
		{webhook.NewSubscription{URL: "http://10.1.2.3/x", EventTypes: []string{"batch.done"}}, "private"},
		{webhook.NewSubscription{URL: "http://169.254.169.254/latest", EventTypes: []string{"batch.done"}}, "link-local"},
		{webhook.NewSubscription{URL: "http://[::1]/x", EventTypes: []string{"batch.done"}}, "loopback"},
		{webhook.NewSubscription{URL: "https://u:p@example.com/x", EventTypes: []string{"batch.done"}}, "credentials"},
	} {
		_, err := e.svc.Create(context.Background(), c.sub)
		var ie *problem.InputError
		require.ErrorAs(t, err, &ie, c.sub.URL)
		require.ErrorContains(t, err, c.want)
	}

	off, err := webhook.New(e.pool, webhook.Config{}, slog.New(slog.DiscardHandler), nil)
	require.NoError(t, err)
	_, err = off.Create(context.Background(), webhook.NewSubscription{URL: "https://example.com/x", EventTypes: []string{"batch.done"}})
	require.ErrorIs(t, err, problem.ErrConflict)
	require.ErrorContains(t, err, "WEBHOOK_SECRET_KEY is not set")
}

// TestDocumentEvents: a document's move to completed or failed is a
// delivery of document.completed or document.failed, with its batch.
func TestDocumentEvents(t *testing.T) {
	t.Parallel()
	e := start(t, webhook.Config{})
	rcv := newReceiver(t)
	sub := e.subscribe(t, rcv.URL, webhook.EventDocumentCompleted, webhook.EventDocumentFailed)
	exec := dbtest.Exec(t, e.pool)
	exec(`INSERT INTO documents (r2_key, version, batch_id, status) VALUES ('docs/a.txt', 1, 'B1', 'processing'), ('docs/b.txt', 1, NULL, 'processing')`)
	exec(`UPDATE documents SET status = 'completed', total_chunks = 4 WHERE r2_key = 'docs/a.txt'`)
	exec(`UPDATE documents SET status = 'failed', errors = '[{"step": "download", "error": "no such key"}]' WHERE r2_key = 'docs/b.txt'`)
	exec(`UPDATE documents SET total_chunks = 5 WHERE r2_key = 'docs/a.txt'`) // no move: no event
	eventually.True(t, 20*time.Second, "both documents' events sent", func() bool { return len(rcv.got()) == 2 })
	types := map[string]map[string]any{}
	for _, r := range rcv.got() {
		verify(t, sub.Secret, r)
		var body struct {
			Type string         `json:"type"`
			Data map[string]any `json:"data"`
		}
		require.NoError(t, json.Unmarshal(r.body, &body))
		types[body.Type] = body.Data
	}
	require.Equal(t, "B1", types[webhook.EventDocumentCompleted]["batch_id"])
	require.EqualValues(t, 4, types[webhook.EventDocumentCompleted]["total_chunks"])
	require.Equal(t, "docs/b.txt", types[webhook.EventDocumentFailed]["r2_key"])
	require.Equal(t, "no such key", types[webhook.EventDocumentFailed]["error"])
}

// TestDispatcherIdlesWithoutSubscriptions: with no subscription enabled
// the dispatcher sleeps for long, not every DispatchInterval; creating a
// subscription (or enabling one) makes it due at once, and its events are
// delivered.
func TestDispatcherIdlesWithoutSubscriptions(t *testing.T) {
	t.Parallel()
	e := start(t, webhook.Config{})
	// sleeping is how long the dispatcher sleeps from now, 0 if it is due
	// (or running).
	sleeping := func() time.Duration {
		var secs float64
		require.NoError(t, e.pool.QueryRow(context.Background(), `SELECT coalesce(max(extract(epoch FROM scheduled_at - now())), 0)
			FROM river_job WHERE kind = 'webhook_dispatch' AND state = 'scheduled' AND scheduled_at > now()`).Scan(&secs))
		return time.Duration(secs * float64(time.Second))
	}
	idling := func() bool { return sleeping() > 10*time.Second } // DispatchInterval is 20 ms here
	eventually.True(t, 20*time.Second, "the dispatcher idling", idling)

	rcv := newReceiver(t)
	sub := e.subscribe(t, rcv.URL+"/hook", "batch.done")
	require.Zero(t, sleeping(), "creating a subscription wakes the dispatcher")
	e.event(t, "B1", db.EventBatchDone)
	e.delivery(t, sub.ID, webhook.StatusSucceeded)

	// Disabled, the dispatcher idles again; enabled, it wakes.
	_, err := e.svc.SetEnabled(context.Background(), sub.ID, false, "")
	require.NoError(t, err)
	eventually.True(t, 20*time.Second, "the dispatcher idling again", idling)
	_, err = e.svc.SetEnabled(context.Background(), sub.ID, true, "")
	require.NoError(t, err)
	require.Zero(t, sleeping(), "enabling a subscription wakes the dispatcher")
}
