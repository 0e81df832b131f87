package worker_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/arke-institute/orchestrator/blob"
	"github.com/arke-institute/orchestrator/internal/harness/s3test"
	"github.com/arke-institute/orchestrator/worker"
)

// urlService stands in for the orchestrator's POST .../urls: it checks the
// bearer token and presigns what it is asked for on the test S3 server, or
// answers a scripted status.
type urlService struct {
	*httptest.Server
	t     *testing.T
	store *blob.S3
	token string

	mu       sync.Mutex
	asked    [][]blob.Object
	refuse   int // when set, every request is answered with this status
	validFor time.Duration
}

func newURLService(t *testing.T, store *blob.S3) *urlService {
	s := &urlService{t: t, store: store, token: "tok", validFor: 15 * time.Minute}
	s.Server = httptest.NewServer(http.HandlerFunc(s.serve))
	t.Cleanup(s.Close)
	return s
}

func (s *urlService) serve(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost || r.URL.Path != "/callback/01BATCH/tiff_1/urls" {
		http.Error(w, "unexpected "+r.Method+" "+r.URL.Path, http.StatusNotFound)
		return
	}
	if r.Header.Get("Authorization") != "Bearer "+s.token {
		http.Error(w, `{"error":"bad token"}`, http.StatusUnauthorized)
		return
	}
	var req struct {
		Objects []blob.Object `json:"objects"`
	}
	if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	s.mu.Lock()
	s.asked = append(s.asked, req.Objects)
	refuse, validFor := s.refuse, s.validFor
	s.mu.Unlock()
	if refuse != 0 {
		w.WriteHeader(refuse)
		_, _ = fmt.Fprintf(w, `{"error": "scripted %s"}`, http.StatusText(refuse))
		return
	}
	urls := make([]blob.Presigned, len(req.Objects))
	for i, o := range req.Objects {
		var err error
		if urls[i], err = s.store.Presign(r.Context(), o, validFor); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
	}
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(map[string]any{"urls": urls})
}

func (s *urlService) requests() [][]blob.Object {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([][]blob.Object(nil), s.asked...)
}

func (s *urlService) callback() worker.Callback {
	return worker.Callback{
		TaskID: "tiff_1", BatchID: "01BATCH", URL: s.URL + "/callback/01BATCH/tiff_1", Token: s.token,
		Backoff: worker.Backoff{Initial: time.Millisecond, Max: 5 * time.Millisecond, Attempts: 3},
	}
}

// urlEnv is a bucket on the test S3 server, a store with credentials to
// set it up and look at it, and the URL service.
type urlEnv struct {
	admin  *blob.S3
	bucket string
	svc    *urlService
}

func newURLEnv(t *testing.T) *urlEnv {
	t.Helper()
	srv := s3test.Start(t)
	admin, err := blob.NewS3(srv.Config())
	require.NoError(t, err)
	return &urlEnv{admin: admin, bucket: srv.NewBucket(t), svc: newURLService(t, admin)}
}

func (e *urlEnv) presign(t *testing.T, m blob.Method, key string) blob.Presigned {
	t.Helper()
	p, err := e.admin.Presign(t.Context(), blob.Object{Method: m, Bucket: e.bucket, Key: key}, time.Hour)
	require.NoError(t, err)
	return p
}

func (e *urlEnv) get(t *testing.T, key string) string {
	t.Helper()
	b, err := e.admin.Get(t.Context(), e.bucket, key)
	require.NoError(t, err)
	return string(b)
}

// TestURLStore: a store with no credentials reads and writes through the
// URLs it was given, asks for the others (several at once when planned),
// and keeps the blob.Store contract: ErrNotFound, ErrExists, PutUnique.
func TestURLStore(t *testing.T) {
	t.Parallel()
	e := newURLEnv(t)
	ctx := t.Context()
	input := "staging/01BATCH/in.tif"
	require.NoError(t, e.admin.Put(ctx, e.bucket, input, strings.NewReader("tiff bytes"), 10, "image/tiff"))
	planned := "staging/01BATCH/in.jpg"
	s := worker.NewURLStore(e.svc.callback(), []blob.Presigned{
		e.presign(t, blob.MethodGet, input),
		e.presign(t, blob.MethodPutIfAbsent, planned),
	}, nil, nil)

	t.Run("GivenURLs", func(t *testing.T) {
		got, err := s.Get(ctx, e.bucket, input)
		require.NoError(t, err)
		require.Equal(t, "tiff bytes", string(got))
		body, size, err := s.Open(ctx, e.bucket, input)
		require.NoError(t, err)
		require.EqualValues(t, 10, size)
		require.NoError(t, body.Close())
		require.NoError(t, s.PutIfAbsent(ctx, e.bucket, planned, strings.NewReader("jpeg"), 4, "image/jpeg"))
		require.Equal(t, "jpeg", e.get(t, planned))
		require.Zero(t, s.Asked(), "no request for URLs it was given")
		require.Empty(t, e.svc.requests())
	})

	t.Run("AsksForOthers", func(t *testing.T) {
		before := s.Asked()
		require.NoError(t, s.Put(ctx, e.bucket, "staging/01BATCH/in.tif.ref.json", bytes.NewReader([]byte("{}")), -1, "application/json"))
		require.Equal(t, "{}", e.get(t, "staging/01BATCH/in.tif.ref.json"))
		require.Equal(t, before+1, s.Asked())
		// Asked once: the URL is kept.
		require.NoError(t, s.Put(ctx, e.bucket, "staging/01BATCH/in.tif.ref.json", strings.NewReader("{ }"), 3, "application/json"))
		require.Equal(t, before+1, s.Asked())
		require.Equal(t, "{ }", e.get(t, "staging/01BATCH/in.tif.ref.json"))
	})

	t.Run("PlanAsksOnceForMany", func(t *testing.T) {
		before := s.Asked()
		var objs []blob.Object
		for page := 1; page <= 3; page++ {
			objs = append(objs, blob.Object{Method: blob.MethodPutIfAbsent, Bucket: e.bucket, Key: fmt.Sprintf("staging/01BATCH/in-p%d.jpg", page)})
		}
		objs = append(objs, objs[0]) // a repeat is asked for once
		require.NoError(t, worker.Plan(ctx, s, objs))
		require.Equal(t, before+1, s.Asked())
		reqs := e.svc.requests()
		require.Equal(t, objs[:3], reqs[len(reqs)-1])
		for _, o := range objs[:3] {
			require.NoError(t, s.PutIfAbsent(ctx, o.Bucket, o.Key, strings.NewReader(o.Key), int64(len(o.Key)), "image/jpeg"))
			require.Equal(t, o.Key, e.get(t, o.Key))
		}
		require.NoError(t, worker.Plan(ctx, s, objs), "all held: no request")
		require.Equal(t, before+1, s.Asked())
	})

	t.Run("Contract", func(t *testing.T) {
		err := s.PutIfAbsent(ctx, e.bucket, planned, strings.NewReader("other"), 5, "image/jpeg")
		require.ErrorIs(t, err, blob.ErrExists)
		require.Equal(t, "jpeg", e.get(t, planned), "not replaced")

		// A taken name gets the next free one; the same bytes are reused.
		key, err := worker.PutUnique(ctx, s, e.bucket, planned, []byte("other"), "image/jpeg")
		require.NoError(t, err)
		require.Equal(t, "staging/01BATCH/in-1.jpg", key)
		key, err = worker.PutUnique(ctx, s, e.bucket, planned, []byte("jpeg"), "image/jpeg")
		require.NoError(t, err)
		require.Equal(t, planned, key)

		_, err = s.Get(ctx, e.bucket, "staging/01BATCH/missing")
		require.ErrorIs(t, err, blob.ErrNotFound)
		require.ErrorContains(t, err, "getting s3://"+e.bucket+"/staging/01BATCH/missing: store answered 404 Not Found (NoSuchKey)")
		require.False(t, blob.IsTransient(err))
		require.NotContains(t, err.Error(), "X-Amz-Signature")

		ok, err := s.Exists(ctx, e.bucket, input)
		require.NoError(t, err)
		require.True(t, ok)
		ok, err = s.Exists(ctx, e.bucket, "staging/01BATCH/missing")
		require.NoError(t, err)
		require.False(t, ok)

		require.ErrorContains(t, s.Copy(ctx, e.bucket, input, e.bucket, "staging/01BATCH/copy"), "no storage credentials")
		require.ErrorContains(t, s.EnsureBucket(ctx, "new-bucket"), "no storage credentials")
	})

	t.Run("RenewsExpiringURLs", func(t *testing.T) {
		e.svc.mu.Lock()
		e.svc.validFor = 30 * time.Second // less than the store's margin
		e.svc.mu.Unlock()
		t.Cleanup(func() { e.svc.mu.Lock(); e.svc.validFor = 15 * time.Minute; e.svc.mu.Unlock() })
		before := s.Asked()
		key := "staging/01BATCH/short.txt"
		require.NoError(t, s.Put(ctx, e.bucket, key, strings.NewReader("a"), 1, "text/plain"))
		require.NoError(t, s.Put(ctx, e.bucket, key, strings.NewReader("b"), 1, "text/plain"))
		require.Equal(t, before+2, s.Asked(), "a URL about to expire is asked for again")
		require.Equal(t, "b", e.get(t, key))
	})
}

// TestURLStorePlanInBatches: more objects than one request may name are
// asked for in several requests, each as large as allowed.
func TestURLStorePlanInBatches(t *testing.T) {
	t.Parallel()
	e := newURLEnv(t)
	s := worker.NewURLStore(e.svc.callback(), nil, nil, nil)
	objs := make([]blob.Object, blob.MaxPresignBatch+1)
	for i := range objs {
		objs[i] = blob.Object{Method: blob.MethodPutIfAbsent, Bucket: e.bucket, Key: fmt.Sprintf("staging/01BATCH/doc-p%d.jpg", i+1)}
	}
	require.NoError(t, s.Plan(t.Context(), objs))
	reqs := e.svc.requests()
	require.Len(t, reqs, 2)
	require.Len(t, reqs[0], blob.MaxPresignBatch)
	require.Equal(t, objs[blob.MaxPresignBatch:], reqs[1])
}

// TestURLStoreRefused: the orchestrator's refusals reach the worker as the
// callback's do (409: the result is no longer wanted), and a URL never
// appears in an error.
func TestURLStoreRefused(t *testing.T) {
	t.Parallel()
	e := newURLEnv(t)
	ctx := t.Context()
	for status, check := range map[int]func(t *testing.T, err error){
		http.StatusConflict: func(t *testing.T, err error) { require.ErrorIs(t, err, worker.ErrNotWanted) },
		http.StatusBadRequest: func(t *testing.T, err error) {
			var se *worker.StatusError
			require.ErrorAs(t, err, &se)
			require.Equal(t, http.StatusBadRequest, se.Code)
			require.ErrorContains(t, err, "scripted Bad Request")
			require.ErrorContains(t, err, "asking the orchestrator for 1 URLs (s3://"+e.bucket+"/staging/01BATCH/x first)")
		},
	} {
		t.Run(http.StatusText(status), func(t *testing.T) {
			svc := newURLService(t, e.admin)
			svc.refuse = status
			s := worker.NewURLStore(svc.callback(), nil, nil, nil)
			err := s.Put(ctx, e.bucket, "staging/01BATCH/x", strings.NewReader("x"), 1, "")
			require.Error(t, err)
			check(t, err)
			require.Len(t, svc.requests(), 1, "not retried")
		})
	}

	t.Run("StoreUnreachable", func(t *testing.T) {
		u := e.presign(t, blob.MethodGet, "staging/01BATCH/in.tif")
		u.URL = strings.Replace(u.URL, strings.TrimPrefix(s3test.Start(t).Endpoint(), "http://"), "127.0.0.1:1", 1)
		require.Contains(t, u.URL, "127.0.0.1:1/")
		// It is retried until the task's deadline, a second away here.
		cb := e.svc.callback()
		cb.Deadline = time.Now().Add(time.Second)
		s := worker.NewURLStore(cb, []blob.Presigned{u}, nil, nil)
		_, err := s.Get(ctx, e.bucket, "staging/01BATCH/in.tif")
		require.ErrorContains(t, err, "getting s3://"+e.bucket+"/staging/01BATCH/in.tif: gave up after ")
		require.ErrorContains(t, err, "at the task's deadline: Get request: dial tcp 127.0.0.1:1")
		require.NotContains(t, err.Error(), "X-Amz-")
		require.True(t, blob.IsTransient(err))
	})
}

// TestURLStoreRetriesTransient: an object request answered 503 is retried,
// a PUT with its body sent whole again.
func TestURLStoreRetriesTransient(t *testing.T) {
	t.Parallel()
	var hits atomic.Int64
	var bodies sync.Map
	flaky := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n := hits.Add(1)
		b, _ := io.ReadAll(r.Body)
		bodies.Store(n, string(b))
		if n == 1 {
			w.WriteHeader(http.StatusServiceUnavailable)
			_, _ = w.Write([]byte(`<Error><Code>SlowDown</Code><Message>busy</Message></Error>`))
			return
		}
	}))
	t.Cleanup(flaky.Close)
	put := blob.Presigned{Object: blob.Object{Method: blob.MethodPut, Bucket: "b", Key: "k"}, URL: flaky.URL + "/b/k?X-Amz-Signature=x"}
	s := worker.NewURLStore(worker.Callback{URL: "http://127.0.0.1:1/cb", Token: "t"}, []blob.Presigned{put}, nil, nil)
	require.NoError(t, s.Put(context.Background(), "b", "k", strings.NewReader("payload"), 7, "text/plain"))
	require.EqualValues(t, 2, hits.Load())
	second, _ := bodies.Load(int64(2))
	require.Equal(t, "payload", second)
}

// TestURLStoreRidesOutAnOutage: a store that answers 503 SlowDown with
// Retry-After for a while is retried, honouring Retry-After, for as long
// as the task's deadline allows, not a fixed number of times; once the
// deadline is near, the request gives up with the store's error.
func TestURLStoreRidesOutAnOutage(t *testing.T) {
	t.Parallel()
	var hits atomic.Int64
	var failFor atomic.Int64 // the requests to fail
	var times sync.Map       // request number -> when it came
	flaky := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n := hits.Add(1)
		times.Store(n, time.Now())
		if n <= failFor.Load() {
			w.Header().Set("Retry-After", "1")
			w.WriteHeader(http.StatusServiceUnavailable)
			_, _ = w.Write([]byte(`<Error><Code>SlowDown</Code><Message>busy</Message></Error>`))
			return
		}
		_, _ = w.Write([]byte("data"))
	}))
	t.Cleanup(flaky.Close)
	get := blob.Presigned{Object: blob.Object{Method: blob.MethodGet, Bucket: "b", Key: "k"}, URL: flaky.URL + "/b/k?X-Amz-Signature=x"}
	cb := worker.Callback{URL: "http://127.0.0.1:1/cb", Token: "t", Deadline: time.Now().Add(time.Minute)}

	failFor.Store(4)
	data, err := worker.NewURLStore(cb, []blob.Presigned{get}, nil, nil).Get(t.Context(), "b", "k")
	require.NoError(t, err)
	require.Equal(t, "data", string(data))
	require.EqualValues(t, 5, hits.Load(), "four failures, then the answer")
	for n := int64(2); n <= 5; n++ {
		prev, _ := times.Load(n - 1)
		at, _ := times.Load(n)
		require.GreaterOrEqual(t, at.(time.Time).Sub(prev.(time.Time)), 990*time.Millisecond, "Retry-After: 1 honoured before request %d", n)
	}

	// An outage that outlasts the deadline.
	hits.Store(0)
	failFor.Store(1000)
	cb.Deadline = time.Now().Add(2500 * time.Millisecond)
	_, err = worker.NewURLStore(cb, []blob.Presigned{get}, nil, nil).Get(t.Context(), "b", "k")
	require.ErrorContains(t, err, "gave up after 3 attempts") // at 0, 1 and 2 s
	require.ErrorContains(t, err, "SlowDown")
	require.True(t, blob.IsTransient(err))
}
