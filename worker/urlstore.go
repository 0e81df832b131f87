package worker

import (
	"bytes"
	"context"
	"encoding/xml"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/aws/smithy-go"

	"github.com/arke-institute/orchestrator/blob"
	"github.com/arke-institute/orchestrator/phases"
)

// URLStore is the blob.Store of a worker, which holds no storage
// credentials: it reaches each object through a presigned URL, either one
// of its environment (INPUT_URL, OUTPUT_URLS) or one it asks the
// orchestrator for, with the task's callback token, at URLsEndpoint. Only
// the batch's own objects are presigned there.
//
// Copy and EnsureBucket need credentials and always fail.
type URLStore struct {
	callback *Callback // the URLs endpoint, token and retry schedule
	client   *http.Client
	log      *slog.Logger

	mu   sync.Mutex
	urls map[blob.Object]blob.Presigned
	// asked counts requests for URLs, for logs and tests.
	asked atomic.Int64
}

var (
	_ blob.Store      = (*URLStore)(nil)
	_ smithy.APIError = (*HTTPError)(nil)
)

// URLsPath is appended to CALLBACK_URL to ask for more URLs.
const URLsPath = "/urls"

// renewBefore is how long before its expiry a URL is asked for again: a
// request that starts with less may be refused midway.
const renewBefore = time.Minute

// NewURLStore returns a store that uses urls and asks for any other URL
// at cb.URL + URLsPath (cb's token, client and backoff; nil client: no
// timeout for object transfers, which may be large, only for connecting).
func NewURLStore(cb Callback, urls []blob.Presigned, client *http.Client, log *slog.Logger) *URLStore {
	if client == nil {
		client = &http.Client{Transport: http.DefaultTransport}
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	cb.URL = strings.TrimRight(cb.URL, "/") + URLsPath
	s := &URLStore{callback: &cb, client: client, log: log, urls: make(map[blob.Object]blob.Presigned, len(urls))}
	for _, u := range urls {
		s.urls[u.Object] = u
	}
	return s
}

// Asked is how many requests for URLs the store has made.
func (s *URLStore) Asked() int64 { return s.asked.Load() }

// Plan makes sure the store holds URLs for objs, asking for those it lacks
// in as few requests as the orchestrator takes (blob.MaxPresignBatch
// objects each). A worker that learns what it will write (the pages of a
// document) plans them at once rather than letting each write ask alone.
func (s *URLStore) Plan(ctx context.Context, objs []blob.Object) error {
	renew := time.Now().Add(renewBefore)
	var missing []blob.Object
	s.mu.Lock()
	seen := make(map[blob.Object]bool, len(objs))
	for _, o := range objs {
		u, ok := s.urls[o]
		expiring := !u.Expires.IsZero() && u.Expires.Before(renew) // zero: unknown
		if (!ok || expiring) && !seen[o] {
			missing = append(missing, o)
			seen[o] = true
		}
	}
	s.mu.Unlock()
	for len(missing) > 0 {
		n := min(len(missing), blob.MaxPresignBatch)
		if err := s.ask(ctx, missing[:n]); err != nil {
			return err
		}
		missing = missing[n:]
	}
	return nil
}

// ask gets URLs for objs (at most blob.MaxPresignBatch) from the
// orchestrator.
func (s *URLStore) ask(ctx context.Context, objs []blob.Object) error {
	s.asked.Add(1)
	var answer struct {
		URLs []blob.Presigned `json:"urls"`
	}
	t := time.Now()
	bo := s.callback.urlsBackoff(t)
	if s.callback.Backoff.Attempts > 0 {
		bo = s.callback.Backoff // a test's schedule
	}
	err := s.callback.exchange(ctx, "request for URLs", s.callback.URL, bo, map[string]any{"objects": objs}, &answer)
	if err != nil {
		return fmt.Errorf("asking the orchestrator for %d URLs (%s first): %w", len(objs), addr(objs[0].Bucket, objs[0].Key), err)
	}
	got := make(map[blob.Object]blob.Presigned, len(answer.URLs))
	for _, u := range answer.URLs {
		got[u.Object] = u
	}
	for _, o := range objs {
		if _, ok := got[o]; !ok {
			return fmt.Errorf("the orchestrator's answer lacks the URL for %s %s", o.Method, addr(o.Bucket, o.Key))
		}
	}
	s.mu.Lock()
	for o, u := range got {
		s.urls[o] = u
	}
	s.mu.Unlock()
	s.log.Debug("got URLs", "count", len(objs), "ms", time.Since(t).Milliseconds())
	return nil
}

// url returns the URL for one object, asking for it if need be.
func (s *URLStore) url(ctx context.Context, o blob.Object) (blob.Presigned, error) {
	if err := s.Plan(ctx, []blob.Object{o}); err != nil {
		return blob.Presigned{}, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.urls[o], nil
}

// Get implements blob.Store.
func (s *URLStore) Get(ctx context.Context, bucket, key string) ([]byte, error) {
	body, size, err := s.open(ctx, "getting", bucket, key)
	if err != nil {
		return nil, err
	}
	defer body.Close()
	var buf bytes.Buffer
	if size > 0 && size <= 1<<30 {
		buf.Grow(int(size))
	}
	if _, err := buf.ReadFrom(body); err != nil {
		return nil, opErr("reading", bucket, key, err)
	}
	return buf.Bytes(), nil
}

// Open implements blob.Store.
func (s *URLStore) Open(ctx context.Context, bucket, key string) (io.ReadCloser, int64, error) {
	return s.open(ctx, "opening", bucket, key)
}

func (s *URLStore) open(ctx context.Context, op, bucket, key string) (io.ReadCloser, int64, error) {
	resp, err := s.do(ctx, blob.Object{Method: blob.MethodGet, Bucket: bucket, Key: key}, nil, 0, "")
	if err != nil {
		return nil, 0, opErr(op, bucket, key, err)
	}
	return resp.Body, resp.ContentLength, nil
}

// Exists implements blob.Store with a GET (a HEAD would need a URL of its
// own), closed before the body is read.
func (s *URLStore) Exists(ctx context.Context, bucket, key string) (bool, error) {
	resp, err := s.do(ctx, blob.Object{Method: blob.MethodGet, Bucket: bucket, Key: key}, nil, 0, "")
	if errors.Is(err, blob.ErrNotFound) {
		return false, nil
	}
	if err != nil {
		return false, opErr("checking", bucket, key, err)
	}
	resp.Body.Close()
	return true, nil
}

// Put implements blob.Store. With an attempt (Callback.Attempt), the
// object goes to the attempt's staging area (phases.AttemptKey), from
// which the orchestrator promotes it to key.
func (s *URLStore) Put(ctx context.Context, bucket, key string, body io.ReadSeeker, size int64, contentType string) error {
	if s.callback.Attempt != "" {
		key = phases.AttemptKey(key, s.callback.Attempt)
	}
	return s.put(ctx, "putting", blob.Object{Method: blob.MethodPut, Bucket: bucket, Key: key}, body, size, contentType)
}

// PutIfAbsent implements blob.Store with the URL's signed condition
// (If-None-Match: *). Unlike blob.S3 it has no fallback for a server
// without conditional writes: such a server's 501 is an error.
func (s *URLStore) PutIfAbsent(ctx context.Context, bucket, key string, body io.ReadSeeker, size int64, contentType string) error {
	return s.put(ctx, "putting (if absent)", blob.Object{Method: blob.MethodPutIfAbsent, Bucket: bucket, Key: key}, body, size, contentType)
}

func (s *URLStore) put(ctx context.Context, op string, o blob.Object, body io.ReadSeeker, size int64, contentType string) error {
	if size < 0 {
		cur, err := body.Seek(0, io.SeekCurrent)
		if err == nil {
			var end int64
			if end, err = body.Seek(0, io.SeekEnd); err == nil {
				_, err = body.Seek(cur, io.SeekStart)
				size = end - cur
			}
		}
		if err != nil {
			return opErr(op, o.Bucket, o.Key, fmt.Errorf("measuring body: %w", err))
		}
	}
	resp, err := s.do(ctx, o, body, size, contentType)
	if err != nil {
		return opErr(op, o.Bucket, o.Key, err)
	}
	resp.Body.Close()
	return nil
}

// Copy implements blob.Store: it always fails, as a server-side copy
// cannot be presigned simply. Download and Put instead.
func (s *URLStore) Copy(_ context.Context, srcBucket, srcKey, dstBucket, dstKey string) error {
	return fmt.Errorf("copying %s to %s: a worker has no storage credentials (no server-side copy through URLs)",
		addr(srcBucket, srcKey), addr(dstBucket, dstKey))
}

// EnsureBucket implements blob.Store: it always fails, as only the
// orchestrator creates buckets.
func (s *URLStore) EnsureBucket(_ context.Context, bucket string) error {
	return fmt.Errorf("creating bucket s3://%s: a worker has no storage credentials", bucket)
}

// do makes o's request and returns a 2xx response, whose body the caller
// closes. A transient failure (network, 429, 5xx but 501) is retried with
// capped exponential backoff and jitter, honouring the store's
// Retry-After (up to storageBackoffMax), until the task's deadline
// (Callback.RetryUntil): a storage outage of a few minutes costs the task
// nothing. A PUT's body is rewound for each attempt, and the URL asked
// for again if it expires meanwhile.
func (s *URLStore) do(ctx context.Context, o blob.Object, body io.ReadSeeker, size int64, contentType string) (*http.Response, error) {
	var start int64
	if body != nil {
		var err error
		if start, err = body.Seek(0, io.SeekCurrent); err != nil {
			return nil, fmt.Errorf("seeking body: %w", err)
		}
	}
	first := time.Now()
	until := s.callback.RetryUntil(first)
	delay := 200 * time.Millisecond
	for attempt := 1; ; attempt++ {
		u, err := s.url(ctx, o)
		if err != nil {
			return nil, err
		}
		resp, err := s.attempt(ctx, u, body, size, contentType)
		if err == nil || !blob.IsTransient(err) || ctx.Err() != nil {
			return resp, err
		}
		wait := jitter(delay)
		var he *HTTPError
		if errors.As(err, &he) && he.RetryAfter > wait {
			wait = min(he.RetryAfter, storageBackoffMax)
		}
		if time.Now().Add(wait).After(until) {
			return nil, fmt.Errorf("gave up after %d attempts in %s, at the task's deadline: %w", attempt, time.Since(first).Round(time.Millisecond), err)
		}
		s.log.Warn("object request failed, retrying", "method", string(o.Method), "bucket", o.Bucket, "key", o.Key,
			"attempt", attempt, "retry_in", wait.String(), "error", err.Error())
		select {
		case <-ctx.Done():
			return nil, err
		case <-time.After(wait):
		}
		delay = min(2*delay, storageBackoffMax)
		if body != nil {
			if _, err := body.Seek(start, io.SeekStart); err != nil {
				return nil, fmt.Errorf("rewinding body: %w", err)
			}
		}
	}
}

// attempt makes one request with a presigned URL.
func (s *URLStore) attempt(ctx context.Context, u blob.Presigned, body io.Reader, size int64, contentType string) (*http.Response, error) {
	var reqBody io.Reader = http.NoBody
	if body != nil && size > 0 {
		// Only Read: net/http would otherwise see through a *bytes.Reader
		// and rewind it on its own.
		reqBody = io.LimitReader(body, size)
	}
	req, err := http.NewRequestWithContext(ctx, u.Method.HTTPMethod(), u.URL, reqBody)
	if err != nil {
		return nil, fmt.Errorf("malformed presigned URL for %s: %w", addr(u.Bucket, u.Key), redact(err))
	}
	if u.Method != blob.MethodGet {
		req.ContentLength = max(size, 0)
		if contentType != "" {
			req.Header.Set("Content-Type", contentType)
		}
	}
	for k, v := range u.Header {
		req.Header.Set(k, v)
	}
	resp, err := s.client.Do(req)
	if err != nil {
		return nil, redact(err)
	}
	if resp.StatusCode/100 == 2 {
		return resp, nil
	}
	defer resp.Body.Close()
	return nil, readS3Error(resp)
}

// HTTPError is an object request the store refused. It has the
// HTTPStatusCode that blob.IsTransient classifies, and matches
// blob.ErrNotFound or blob.ErrExists where S3 means them.
type HTTPError struct {
	StatusCode int
	// Code and Message are S3's error code and message, if it sent any.
	Code    string
	Message string
	// RetryAfter is the store's Retry-After, 0 if none.
	RetryAfter time.Duration
}

// HTTPStatusCode is the status the store answered.
func (e *HTTPError) HTTPStatusCode() int { return e.StatusCode }

// ErrorCode is S3's error code. With ErrorMessage and ErrorFault it makes
// e a smithy.APIError, as the SDK's errors are, for blob.IsTransient's
// error codes.
func (e *HTTPError) ErrorCode() string { return e.Code }

// ErrorMessage is S3's error message.
func (e *HTTPError) ErrorMessage() string { return e.Message }

// ErrorFault does not say whose fault the error is.
func (e *HTTPError) ErrorFault() smithy.ErrorFault { return smithy.FaultUnknown }

func (e *HTTPError) Error() string {
	msg := fmt.Sprintf("store answered %d %s", e.StatusCode, http.StatusText(e.StatusCode))
	if e.Code != "" {
		msg += " (" + e.Code + ")"
	}
	if e.Message != "" {
		msg += ": " + e.Message
	}
	if e.StatusCode == http.StatusForbidden {
		msg += " (an expired URL, or one for another request)"
	}
	return msg
}

// Is makes 404s match blob.ErrNotFound (unless S3 named another cause) and
// 412s blob.ErrExists.
func (e *HTTPError) Is(target error) bool {
	switch target {
	case blob.ErrNotFound:
		return e.StatusCode == http.StatusNotFound && (e.Code == "" || e.Code == "NoSuchKey" || e.Code == "NoSuchBucket" || e.Code == "NotFound")
	case blob.ErrExists:
		return e.StatusCode == http.StatusPreconditionFailed
	}
	return false
}

// readS3Error reads S3's XML error document, if any.
func readS3Error(resp *http.Response) error {
	e := &HTTPError{StatusCode: resp.StatusCode, RetryAfter: parseRetryAfter(resp.Header.Get("Retry-After"))}
	data, _ := io.ReadAll(io.LimitReader(resp.Body, 16<<10))
	var doc struct {
		Code    string `xml:"Code"`
		Message string `xml:"Message"`
	}
	if xml.Unmarshal(data, &doc) == nil {
		e.Code, e.Message = doc.Code, doc.Message
	}
	return e
}

// redact drops the URL from a net/http client error: a presigned URL
// carries its signature and is never logged or reported whole. The cause
// (a timeout, a refused connection) stays in the chain.
func redact(err error) error {
	var ue *url.Error
	if errors.As(err, &ue) {
		return fmt.Errorf("%s request: %w", ue.Op, ue.Err)
	}
	return err
}

// opErr says what failed on which object ("getting s3://b/k: ...").
func opErr(op, bucket, key string, err error) error {
	return fmt.Errorf("%s %s: %w", op, addr(bucket, key), err)
}

func addr(bucket, key string) string { return "s3://" + bucket + "/" + key }

// Plan asks store for the URLs of objs at once if it is a URLStore (see
// URLStore.Plan); other stores need no plan.
func Plan(ctx context.Context, store blob.Store, objs []blob.Object) error {
	if s, ok := store.(*URLStore); ok {
		return s.Plan(ctx, objs)
	}
	return nil
}
