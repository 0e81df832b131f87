// Package client is a Go client of the orchestrator's HTTP API: its health,
// submitting a batch (POST /batches), reading its status, the admin reset
// and retry, and waiting for a batch to reach a state. The command line, the
// bench and the test harness all speak to the API through it.
//
// A refusal of the API (any status but the route's success) is an *Error
// with the status code and the server's {"error": ...} message; a failure
// to reach the server is the *url.Error of net/http, unchanged.
package client

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/arke-institute/orchestrator/intakesig"
	"github.com/arke-institute/orchestrator/manifest"
)

// DefaultTimeout bounds each request of a Client built without an
// HTTPClient.
const DefaultTimeout = 30 * time.Second

// maxAnswerBytes is the most of an answer's body that is read: status
// documents and error bodies are a few kilobytes.
const maxAnswerBytes = 1 << 20

// Config configures a Client.
type Config struct {
	// URL is the orchestrator's base URL, http:// or https://, such as
	// "http://127.0.0.1:8080"; a trailing slash is ignored, and a path is
	// kept as the prefix of every route.
	URL string
	// AdminToken is sent as "Authorization: Bearer <AdminToken>" to the
	// admin routes (Reset, Retry), and to the reads when ReadToken is
	// empty; empty sends none, and the server answers 401.
	AdminToken string
	// ReadToken is sent as the bearer token of the reads (Status, Await).
	ReadToken string
	// IngestToken is sent as the bearer token of Submit. Without it, Submit
	// signs its body with IngestSigningSecret (X-Signature) if that is set.
	IngestToken         string
	IngestSigningSecret string
	// HTTPClient sends the requests; nil means a client with DefaultTimeout.
	HTTPClient *http.Client
	// SubmitPatience bounds how long Submit waits out refusals that say
	// to try again (429: admission control's limits; 503: the database
	// away), each for its Retry-After; 0 means DefaultSubmitPatience, a
	// negative value waits out none.
	SubmitPatience time.Duration
	// OnSubmitWait, if set, hears of each refusal Submit waits out, and
	// for how long.
	OnSubmitWait func(refusal *Error, wait time.Duration)
}

// DefaultSubmitPatience is Config.SubmitPatience unless set.
const DefaultSubmitPatience = time.Hour

// Submit's waits without a Retry-After, and at most.
const (
	defaultRetryAfter = 5 * time.Second
	maxRetryAfter     = 5 * time.Minute
)

// Client calls the orchestrator's API. It is safe for concurrent use.
type Client struct {
	url  string
	cfg  Config
	http *http.Client
}

// New returns a Client for cfg. It fails only when cfg.URL is not an
// absolute http:// or https:// URL.
func New(cfg Config) (*Client, error) {
	base := strings.TrimRight(cfg.URL, "/")
	if u, err := url.Parse(base); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("orchestrator URL %q must be an http:// or https:// URL", cfg.URL)
	}
	hc := cfg.HTTPClient
	if hc == nil {
		hc = &http.Client{Timeout: DefaultTimeout}
	}
	return &Client{url: base, cfg: cfg, http: hc}, nil
}

// authorize sets the request's credential: the token of its kind, the
// admin token for reads without a read token, or for intake without an
// ingest token the signature of body.
func (c *Client) authorize(req *http.Request, body []byte, as credential) {
	token := ""
	switch as {
	case asReader:
		token = cmp.Or(c.cfg.ReadToken, c.cfg.AdminToken)
	case asAdmin:
		token = c.cfg.AdminToken
	case asIngest:
		token = c.cfg.IngestToken
		if token == "" && c.cfg.IngestSigningSecret != "" {
			req.Header.Set(intakesig.Header, intakesig.Sign(c.cfg.IngestSigningSecret,
				intakesig.Request{Method: req.Method, Path: req.URL.RequestURI(), Body: body}, time.Now()))
		}
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
}

// URL is the orchestrator's base URL, without a trailing slash.
func (c *Client) URL() string { return c.url }

// Health is GET /healthz: nil once the orchestrator answers 200, which it
// does when its database answers.
func (c *Client) Health(ctx context.Context) error {
	resp, data, err := c.do(ctx, http.MethodGet, "/healthz", nil, asNobody)
	if err != nil {
		return err
	}
	if resp.StatusCode != http.StatusOK {
		return newError(resp, data)
	}
	return nil
}

// Submit is POST /batches: it hands the batch msg announces to the
// orchestrator, whose manifest must be in the staging bucket already. A
// batch the orchestrator knew already is not an error (see
// Accepted.Created). Refusals that say to try again (429 at admission
// control's limits, 503) are waited out, each for its Retry-After, for up
// to Config.SubmitPatience; then the last is the error.
func (c *Client) Submit(ctx context.Context, msg manifest.QueueMessage) (Receipt, error) {
	patience := c.cfg.SubmitPatience
	if patience == 0 {
		patience = DefaultSubmitPatience
	}
	giveUp := time.Now().Add(patience)
	for {
		acc, err := c.submitOnce(ctx, msg)
		var refusal *Error
		if !errors.As(err, &refusal) || (refusal.StatusCode != http.StatusTooManyRequests && refusal.StatusCode != http.StatusServiceUnavailable) {
			return acc, err
		}
		wait := min(max(refusal.RetryAfter, time.Second), maxRetryAfter)
		if refusal.RetryAfter == 0 {
			wait = defaultRetryAfter
		}
		if time.Now().Add(wait).After(giveUp) {
			return acc, err
		}
		if c.cfg.OnSubmitWait != nil {
			c.cfg.OnSubmitWait(refusal, wait)
		}
		select {
		case <-ctx.Done():
			return Receipt{}, errors.Join(err, ctx.Err())
		case <-time.After(wait):
		}
	}
}

// submitOnce is one POST /batches.
func (c *Client) submitOnce(ctx context.Context, msg manifest.QueueMessage) (Receipt, error) {
	resp, data, err := c.do(ctx, http.MethodPost, "/batches", msg, asIngest)
	if err != nil {
		return Receipt{}, err
	}
	if resp.StatusCode != http.StatusAccepted && resp.StatusCode != http.StatusOK {
		return Receipt{}, newError(resp, data)
	}
	var acc Receipt
	if json.Unmarshal(data, &acc) != nil || acc.Status == "" {
		return Receipt{}, fmt.Errorf("the orchestrator answered %s without a status: %s", resp.Status, bytes.TrimSpace(data))
	}
	acc.Created = resp.StatusCode == http.StatusAccepted
	return acc, nil
}

// Status is GET /status/:batchId, the batch's status document. An unknown
// batch is an *Error with StatusCode 404.
func (c *Client) Status(ctx context.Context, batchID string) (Status, error) {
	return c.statusDoc(ctx, http.MethodGet, "/status/"+url.PathEscape(batchID), asReader)
}

// Reset is POST /admin/reset/:batchId (admin): the batch goes to ERROR, its
// open tasks end and their machines are destroyed. It returns the batch's
// status after. A batch that has ended is an *Error with StatusCode 409.
func (c *Client) Reset(ctx context.Context, batchID string) (Status, error) {
	return c.statusDoc(ctx, http.MethodPost, "/admin/reset/"+url.PathEscape(batchID), asAdmin)
}

// Retry is POST /admin/retry/:batchId (admin): the failed tasks of the
// batch's current phase run again, a batch in ERROR resumes where it
// failed, or a DONE batch reruns what failed; completed work is never
// redone. It returns the batch's status
// after. A batch with nothing to retry is an *Error with StatusCode 409.
func (c *Client) Retry(ctx context.Context, batchID string) (Status, error) {
	return c.statusDoc(ctx, http.MethodPost, "/admin/retry/"+url.PathEscape(batchID), asAdmin)
}

// RetryInfrastructure is Retry of only the work whose attempts or retries
// infrastructure spent (POST /admin/retry/:batchId?mode=infrastructure):
// the files that are bad are not tried again.
func (c *Client) RetryInfrastructure(ctx context.Context, batchID string) (Status, error) {
	return c.statusDoc(ctx, http.MethodPost, "/admin/retry/"+url.PathEscape(batchID)+"?mode=infrastructure", asAdmin)
}

// Reindex is POST /admin/reindex (admin token): start re-indexing the
// documents' chunks for search in the process that answers, unless one
// runs there; it answers the progress.
func (c *Client) Reindex(ctx context.Context) (ReindexProgress, error) {
	return c.reindex(ctx, http.MethodPost)
}

// ReindexProgress is GET /admin/reindex (admin token): how far the
// re-index is.
func (c *Client) ReindexProgress(ctx context.Context) (ReindexProgress, error) {
	return c.reindex(ctx, http.MethodGet)
}

func (c *Client) reindex(ctx context.Context, method string) (ReindexProgress, error) {
	var p ReindexProgress
	err := c.admin(ctx, method, "/admin/reindex", nil, &p)
	return p, err
}

// Pause is POST /admin/pause (admin token): no launches, leases, provider
// calls or document steps for t's work until Resume. Pausing what is
// paused keeps its start and takes the new reason.
func (c *Client) Pause(ctx context.Context, t PauseTarget, reason string) (Pause, error) {
	var p Pause
	err := c.admin(ctx, http.MethodPost, "/admin/pause", struct {
		PauseTarget
		Reason string `json:"reason,omitempty"`
	}{t, reason}, &p)
	return p, err
}

// Resume is POST /admin/resume (admin token): lifts t's pause. A target
// not paused is an *Error with StatusCode 404.
func (c *Client) Resume(ctx context.Context, t PauseTarget) (Resumed, error) {
	var r Resumed
	err := c.admin(ctx, http.MethodPost, "/admin/resume", t, &r)
	return r, err
}

// Pauses is GET /admin/pauses (admin token): the pauses in force, oldest
// first.
func (c *Client) Pauses(ctx context.Context) ([]Pause, error) {
	var list struct {
		Pauses []Pause `json:"pauses"`
	}
	err := c.admin(ctx, http.MethodGet, "/admin/pauses", nil, &list)
	return list.Pauses, err
}

// CreateWebhook is POST /admin/webhooks (admin token): subscribes a
// receiver; the answer's Secret is shown this once.
func (c *Client) CreateWebhook(ctx context.Context, w NewWebhook) (Webhook, error) {
	var out Webhook
	err := c.admin(ctx, http.MethodPost, "/admin/webhooks", w, &out)
	return out, err
}

// Webhooks is GET /admin/webhooks (admin token): every subscription,
// oldest first.
func (c *Client) Webhooks(ctx context.Context) ([]Webhook, error) {
	var list struct {
		Subscriptions []Webhook `json:"subscriptions"`
	}
	err := c.admin(ctx, http.MethodGet, "/admin/webhooks", nil, &list)
	return list.Subscriptions, err
}

// SetWebhookEnabled is POST /admin/webhooks/:id/enable, or .../disable
// with reason (admin token).
func (c *Client) SetWebhookEnabled(ctx context.Context, id string, enabled bool, reason string) (Webhook, error) {
	var out Webhook
	path := "/admin/webhooks/" + url.PathEscape(id)
	if enabled {
		return out, c.admin(ctx, http.MethodPost, path+"/enable", nil, &out)
	}
	return out, c.admin(ctx, http.MethodPost, path+"/disable", struct {
		Reason string `json:"reason,omitempty"`
	}{reason}, &out)
}

// DeleteWebhook is DELETE /admin/webhooks/:id (admin token).
func (c *Client) DeleteWebhook(ctx context.Context, id string) error {
	return c.admin(ctx, http.MethodDelete, "/admin/webhooks/"+url.PathEscape(id), nil, nil)
}

// WebhookDeliveries is GET /admin/webhooks/:id/deliveries (admin token):
// the subscription's last limit deliveries (0: 200), newest first.
func (c *Client) WebhookDeliveries(ctx context.Context, id string, limit int) ([]WebhookDelivery, error) {
	var list struct {
		Deliveries []WebhookDelivery `json:"deliveries"`
	}
	path := "/admin/webhooks/" + url.PathEscape(id) + "/deliveries"
	if limit > 0 {
		path += "?limit=" + strconv.Itoa(limit)
	}
	err := c.admin(ctx, http.MethodGet, path, nil, &list)
	return list.Deliveries, err
}

// WebhookDelivery is GET /admin/webhooks/deliveries/:id (admin token):
// the delivery with its payload and attempts.
func (c *Client) WebhookDelivery(ctx context.Context, id string) (WebhookDelivery, error) {
	var out WebhookDelivery
	err := c.admin(ctx, http.MethodGet, "/admin/webhooks/deliveries/"+url.PathEscape(id), nil, &out)
	return out, err
}

// ReplayWebhookDelivery is POST /admin/webhooks/deliveries/:id/replay
// (admin token): the delivery is sent again with its webhook-id.
func (c *Client) ReplayWebhookDelivery(ctx context.Context, id string) (WebhookDelivery, error) {
	var out WebhookDelivery
	err := c.admin(ctx, http.MethodPost, "/admin/webhooks/deliveries/"+url.PathEscape(id)+"/replay", nil, &out)
	return out, err
}

// admin sends an admin request with in as its JSON body (unless nil) and
// decodes a 2xx answer into out (unless nil).
func (c *Client) admin(ctx context.Context, method, path string, in, out any) error {
	resp, data, err := c.do(ctx, method, path, in, asAdmin)
	if err != nil {
		return err
	}
	if resp.StatusCode/100 != 2 {
		return newError(resp, data)
	}
	if out == nil {
		return nil
	}
	if err := json.Unmarshal(data, out); err != nil {
		return fmt.Errorf("the orchestrator answered %s %s with %s: %s", method, path, resp.Status, bytes.TrimSpace(data))
	}
	return nil
}

// IndexDocument is POST /documents (ingest credential, else the admin
// token): index the object at key, under DOCUMENTS_PREFIX in the staging
// bucket. created is true when a new version was queued (202), false when
// the key's current content is indexed or under way already (200).
func (c *Client) IndexDocument(ctx context.Context, key string) (doc Document, created bool, err error) {
	as := asIngest
	if c.cfg.IngestToken == "" && c.cfg.IngestSigningSecret == "" {
		as = asAdmin
	}
	resp, data, err := c.do(ctx, http.MethodPost, "/documents", map[string]string{"r2_key": key}, as)
	if err != nil {
		return Document{}, false, err
	}
	if resp.StatusCode != http.StatusAccepted && resp.StatusCode != http.StatusOK {
		return Document{}, false, newError(resp, data)
	}
	doc, err = decodeDocument(resp, data)
	return doc, resp.StatusCode == http.StatusAccepted, err
}

// Document is GET /documents/:id, a document's status. An unknown document
// is an *Error with StatusCode 404.
func (c *Client) Document(ctx context.Context, id int64) (Document, error) {
	resp, data, err := c.do(ctx, http.MethodGet, "/documents/"+strconv.FormatInt(id, 10), nil, asReader)
	if err != nil {
		return Document{}, err
	}
	if resp.StatusCode != http.StatusOK {
		return Document{}, newError(resp, data)
	}
	return decodeDocument(resp, data)
}

func decodeDocument(resp *http.Response, data []byte) (Document, error) {
	var doc Document
	if json.Unmarshal(data, &doc) != nil || doc.ID == 0 {
		return Document{}, fmt.Errorf("the orchestrator answered %s with no document: %s", resp.Status, bytes.TrimSpace(data))
	}
	return doc, nil
}

// SearchDocuments is GET /documents/search: the k chunks of indexed
// documents nearest to query, best first.
func (c *Client) SearchDocuments(ctx context.Context, query string, k int) (SearchAnswer, error) {
	path := "/documents/search?" + url.Values{"q": {query}, "k": {strconv.Itoa(k)}}.Encode()
	resp, data, err := c.do(ctx, http.MethodGet, path, nil, asReader)
	if err != nil {
		return SearchAnswer{}, err
	}
	if resp.StatusCode != http.StatusOK {
		return SearchAnswer{}, newError(resp, data)
	}
	var res SearchAnswer
	if json.Unmarshal(data, &res) != nil || res.Results == nil {
		return SearchAnswer{}, fmt.Errorf("the orchestrator answered %s with no search results: %s", resp.Status, bytes.TrimSpace(data))
	}
	return res, nil
}

// Await reads the batch's status at once, then again interval after each
// answer, until done accepts one, which it returns. It stops at the first
// error; when ctx ends first, it returns ctx's error with the last status
// read (the zero Status if none was).
func (c *Client) Await(ctx context.Context, batchID string, interval time.Duration, done func(Status) bool) (Status, error) {
	var last Status
	for {
		st, err := c.Status(ctx, batchID)
		if err != nil {
			if ctx.Err() != nil {
				return last, ctx.Err()
			}
			return last, err
		}
		if done(st) {
			return st, nil
		}
		last = st
		select {
		case <-ctx.Done():
			return last, ctx.Err()
		case <-time.After(interval):
		}
	}
}

// statusDoc calls a route that answers a status document.
func (c *Client) statusDoc(ctx context.Context, method, path string, as credential) (Status, error) {
	resp, data, err := c.do(ctx, method, path, nil, as)
	if err != nil {
		return Status{}, err
	}
	if resp.StatusCode != http.StatusOK {
		return Status{}, newError(resp, data)
	}
	var st Status
	if json.Unmarshal(data, &st) != nil || st.Status == "" {
		return Status{}, fmt.Errorf("the orchestrator answered %s with no status document: %s", resp.Status, bytes.TrimSpace(data))
	}
	st.Raw = data
	return st, nil
}

// credential is which credential a request carries.
type credential int

const (
	asNobody credential = iota
	asReader
	asAdmin
	asIngest
)

// do sends a request, with in as its JSON body unless nil and the
// credential as, and reads the answer.
func (c *Client) do(ctx context.Context, method, path string, in any, as credential) (*http.Response, []byte, error) {
	var body []byte
	if in != nil {
		b, err := json.Marshal(in)
		if err != nil {
			return nil, nil, fmt.Errorf("encoding the body of %s %s: %w", method, path, err)
		}
		body = b
	}
	req, err := http.NewRequestWithContext(ctx, method, c.url+path, bytes.NewReader(body))
	if err != nil {
		return nil, nil, err
	}
	if in != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	c.authorize(req, body, as)
	resp, err := c.http.Do(req)
	if err != nil {
		return nil, nil, err
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, maxAnswerBytes))
	if err != nil {
		return nil, nil, fmt.Errorf("reading the orchestrator's answer to %s %s: %w", method, req.URL.Path, err)
	}
	return resp, data, nil
}

// Error is an answer of the API other than the route's success: a batch
// not found (404), a wrong admin token (401), nothing to do (409), a body
// refused (400, 413), a server failure (5xx).
type Error struct {
	// Method and Path are the request's, such as "POST" and
	// "/admin/reset/01K8RNKN488RQCG3YGG72QBZS5".
	Method, Path string
	// StatusCode is the answer's status code, such as 404.
	StatusCode int
	// Status is the answer's status line, such as "404 Not Found".
	Status string
	// Message is the server's reason: the "error" of its {"error": "..."}
	// body, or else the body itself (a proxy's page, say).
	Message string
	// Body is the answer's body, without surrounding white space.
	Body []byte
	// RetryAfter is the answer's Retry-After, in seconds; 0 when it has
	// none.
	RetryAfter time.Duration
}

func newError(resp *http.Response, data []byte) *Error {
	e := &Error{
		Method: resp.Request.Method, Path: resp.Request.URL.Path,
		StatusCode: resp.StatusCode, Status: resp.Status, Body: bytes.TrimSpace(data),
	}
	if secs, err := strconv.Atoi(resp.Header.Get("Retry-After")); err == nil && secs > 0 {
		e.RetryAfter = time.Duration(secs) * time.Second
	}
	var answer struct {
		Error string `json:"error"`
	}
	if json.Unmarshal(data, &answer) == nil && answer.Error != "" {
		e.Message = answer.Error
	} else {
		e.Message = string(e.Body)
	}
	return e
}

// Error is "METHOD PATH answered STATUS: MESSAGE".
func (e *Error) Error() string {
	msg := fmt.Sprintf("%s %s answered %s", e.Method, e.Path, e.Status)
	if e.Message != "" {
		msg += ": " + e.Message
	}
	return msg
}

// StatusCode is the status code of the *Error in err's chain, or 0 when
// there is none (the server was not reached, say).
func StatusCode(err error) int {
	var e *Error
	if errors.As(err, &e) {
		return e.StatusCode
	}
	return 0
}
