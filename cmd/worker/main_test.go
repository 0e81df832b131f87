package main

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/arke-institute/orchestrator/batchurls"
	"github.com/arke-institute/orchestrator/blob"
	"github.com/arke-institute/orchestrator/internal/harness/s3test"
	"github.com/arke-institute/orchestrator/phases"
	"github.com/arke-institute/orchestrator/worker/samples"
	"github.com/arke-institute/orchestrator/worker/vips"
)

// orchestrator stands in for the orchestrator: its callback endpoint
// answers with a script of statuses (the last one repeating), and its
// POST .../urls presigns what the worker asks for on the test S3 server.
type orchestrator struct {
	*httptest.Server
	mu     sync.Mutex
	script []int
	bodies []json.RawMessage
	auth   []string
	// signer presigns what the task of scope may reach, as the real
	// orchestrator does, with store's credentials; urlRequests are the objects of each request for
	// URLs.
	store       *blob.S3
	signer      *batchurls.Signer
	scope       batchurls.Scope
	urlRequests [][]blob.Object
}

func newOrchestrator(t *testing.T, script ...int) *orchestrator {
	o := &orchestrator{script: script}
	o.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if strings.HasSuffix(r.URL.Path, "/urls") {
			o.presign(t, w, r)
			return
		}
		body, _ := io.ReadAll(r.Body)
		o.mu.Lock()
		o.bodies = append(o.bodies, body)
		o.auth = append(o.auth, r.Header.Get("Authorization"))
		status := o.script[min(len(o.bodies), len(o.script))-1]
		o.mu.Unlock()
		w.WriteHeader(status)
	}))
	t.Cleanup(o.Close)
	return o
}

func (o *orchestrator) presign(t *testing.T, w http.ResponseWriter, r *http.Request) {
	var req struct {
		Objects []blob.Object `json:"objects"`
	}
	if r.Header.Get("Authorization") != "Bearer tok" || json.NewDecoder(r.Body).Decode(&req) != nil {
		http.Error(w, "bad request for URLs", http.StatusBadRequest)
		return
	}
	o.mu.Lock()
	o.urlRequests = append(o.urlRequests, req.Objects)
	o.mu.Unlock()
	urls, err := o.signer.Sign(r.Context(), o.scope, req.Objects, time.Hour)
	if !assert.NoError(t, err, "the worker asked for an object its task may not reach") {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	_ = json.NewEncoder(w).Encode(map[string]any{"urls": urls})
}

func (o *orchestrator) requestsForURLs() [][]blob.Object {
	o.mu.Lock()
	defer o.mu.Unlock()
	return slices.Clone(o.urlRequests)
}

func (o *orchestrator) last(t *testing.T) map[string]any {
	t.Helper()
	o.mu.Lock()
	defer o.mu.Unlock()
	require.NotEmpty(t, o.bodies, "no callback received")
	var m map[string]any
	require.NoError(t, json.Unmarshal(o.bodies[len(o.bodies)-1], &m))
	return m
}

// setup uploads a file and returns the environment a launcher would give
// the worker of phase for it: presigned URLs for the input and the outputs
// the phase plans, and no storage credentials.
func setup(t *testing.T, o *orchestrator, phase phases.Name, key string, data []byte) map[string]string {
	t.Helper()
	srv := s3test.Start(t)
	store, err := blob.NewS3(srv.Config())
	require.NoError(t, err)
	bucket, archive, cdn := srv.NewBucket(t), srv.NewBucket(t), srv.NewBucket(t)
	require.NoError(t, store.Put(t.Context(), bucket, key, bytes.NewReader(data), int64(len(data)), ""))
	signer, err := batchurls.New(store, batchurls.Buckets{phases.StagingBucket: bucket, phases.ArchiveBucket: archive, phases.CDNBucket: cdn})
	require.NoError(t, err)
	p, _ := phases.Get(phase)
	urls := map[string]string{}
	attempt := ""
	if p.Spec().StagesOutputs {
		attempt = "a1"
	}
	o.store, o.signer, o.scope = store, signer, batchurls.Scope{BatchID: "01BATCH", Attempt: attempt, Phase: p, Input: key}
	require.NoError(t, signer.Env(t.Context(), urls, o.scope, time.Hour))
	return map[string]string{
		"TASK_ATTEMPT":   attempt,
		"TASK_ID":        "task_1",
		"BATCH_ID":       "01BATCH",
		"INPUT_R2_KEY":   key,
		"INPUT_URL":      urls["INPUT_URL"],
		"OUTPUT_URLS":    urls["OUTPUT_URLS"],
		"R2_BUCKET":      bucket,
		"CALLBACK_URL":   o.URL + "/callback/01BATCH/task_1",
		"CALLBACK_TOKEN": "tok",
		"ARCHIVE_BUCKET": archive,
		"CDN_BUCKET":     cdn,
		"CDN_PUBLIC_URL": srv.Endpoint() + "/" + cdn,
		"INPUT_CID":      "bafy",
	}
}

func runWorker(t *testing.T, vars map[string]string, args ...string) (int, string) {
	t.Helper()
	var stdout, stderr bytes.Buffer
	code := run(context.Background(), args, func(k string) string { return vars[k] }, &stdout, &stderr)
	return code, stdout.String() + stderr.String()
}

func tiffSample(t *testing.T, v samples.Variant) []byte {
	t.Helper()
	require.NoError(t, vips.Startup(vips.Config{}))
	data, err := samples.TIFF(v, 64, 48)
	require.NoError(t, err)
	return data
}

func TestTIFFCallbackRetriedAfter503(t *testing.T) {
	t.Parallel()
	o := newOrchestrator(t, http.StatusServiceUnavailable, http.StatusOK)
	vars := setup(t, o, phases.TIFFConversion, "staging/01BATCH/book.tif", tiffSample(t, samples.Multipage))

	code, logs := runWorker(t, vars, "tiff")
	require.Equal(t, 0, code, logs)
	require.Len(t, o.bodies, 2, "one retry after the 503")
	require.Equal(t, o.bodies[0], o.bodies[1], "the same body again")
	require.Equal(t, "Bearer tok", o.auth[1])

	body := o.last(t)
	require.Equal(t, "success", body["status"])
	require.Equal(t, "task_1", body["task_id"])
	require.Equal(t, "01BATCH", body["batch_id"])
	require.Equal(t, "staging/01BATCH/book-p1.jpg", body["output_r2_key"])
	require.Len(t, body["outputs"], 3)
	require.Contains(t, body, "performance")
	require.NoError(t, phases.ValidateResult(phases.TIFFConversion, o.bodies[1]))
	require.Contains(t, logs, `"msg":"callback failed, retrying"`)

	// The pages' URLs, not planned at launch, in one request.
	reqs := o.requestsForURLs()
	require.Len(t, reqs, 1)
	require.Equal(t, []string{"staging/01BATCH/book-p1.jpg", "staging/01BATCH/book-p2.jpg", "staging/01BATCH/book-p3.jpg"}, keysOf(reqs[0]))
	for _, obj := range reqs[0] {
		require.Equal(t, blob.MethodPutIfAbsent, obj.Method)
		require.Equal(t, vars["R2_BUCKET"], obj.Bucket)
	}
	requireNoSecrets(t, vars, logs)
}

func keysOf(objs []blob.Object) []string {
	var keys []string
	for _, o := range objs {
		keys = append(keys, o.Key)
	}
	return keys
}

// requireNoSecrets checks that the worker had no storage credentials and
// logged no URL's signature.
func requireNoSecrets(t *testing.T, vars map[string]string, logs string) {
	t.Helper()
	for k := range vars {
		require.NotContains(t, []string{"R2_ACCESS_KEY_ID", "R2_SECRET_ACCESS_KEY", "R2_ACCOUNT_ID", "R2_ENDPOINT"}, k)
	}
	require.NotContains(t, logs, "X-Amz-Signature")
}

func TestImageCommand(t *testing.T) {
	t.Parallel()
	o := newOrchestrator(t, http.StatusOK)
	require.NoError(t, vips.Startup(vips.Config{}))
	im, err := samples.Image(1000, 500, 1)
	require.NoError(t, err)
	jpg, err := im.JPEG(90)
	im.Close()
	require.NoError(t, err)
	vars := setup(t, o, phases.ImageProcessing, "staging/01BATCH/photo.jpg", jpg)
	vars["VARIANT_SIZES"] = "100,300,600"

	code, logs := runWorker(t, vars, "image")
	require.Equal(t, 0, code, logs)
	body := o.last(t)
	require.Equal(t, "success", body["status"], body)
	require.NoError(t, phases.ValidateResult(phases.ImageProcessing, o.bodies[0]))
	ref := body["ref_data"].(map[string]any)
	require.Equal(t, "bafy", ref["ipfs_cid"])
	require.Equal(t, vars["CDN_PUBLIC_URL"]+"/variants/01BATCH/photo.jpg/large.jpg", ref["url"])
	require.Equal(t, "staging/01BATCH/photo.jpg.ref.json", body["ref_json_r2_key"])
	require.Equal(t, "staging/01BATCH/photo.jpg", body["archive_r2_key"])
	require.Contains(t, body, "ref_json_size")

	// Everything it wrote was planned at launch, in its attempt's staging
	// area (the orchestrator promotes it): no request for URLs.
	require.Empty(t, o.requestsForURLs())
	archived, err := o.store.Get(t.Context(), vars["ARCHIVE_BUCKET"], "staging/01BATCH/.attempts/a1/photo.jpg")
	require.NoError(t, err)
	require.Equal(t, jpg, archived, "the original is archived byte for byte")
	_, err = o.store.Get(t.Context(), vars["R2_BUCKET"], "staging/01BATCH/.attempts/a1/photo.jpg.ref.json")
	require.NoError(t, err)
	for _, v := range []string{"thumbnail", "medium", "large"} {
		ok, err := o.store.Exists(t.Context(), vars["CDN_BUCKET"], "variants/01BATCH/.attempts/a1/photo.jpg/"+v+".jpg")
		require.NoError(t, err)
		require.True(t, ok, v)
	}
	requireNoSecrets(t, vars, logs)
}

func TestCorruptTIFFReported(t *testing.T) {
	t.Parallel()
	o := newOrchestrator(t, http.StatusOK)
	vars := setup(t, o, phases.TIFFConversion, "staging/01BATCH/x.tif", samples.TruncatedTIFF(64, 48))

	code, logs := runWorker(t, vars, "tiff")
	require.Equal(t, 0, code, "the error was reported: %s", logs)
	body := o.last(t)
	require.Equal(t, "error", body["status"])
	require.Equal(t, "task_1", body["task_id"])
	require.True(t, strings.HasPrefix(body["error"].(string), "decoding TIFF staging/01BATCH/x.tif: "), body["error"])
}

func TestEnvProblemReported(t *testing.T) {
	t.Parallel()
	o := newOrchestrator(t, http.StatusOK)
	vars := setup(t, o, phases.TIFFConversion, "staging/01BATCH/x.tif", []byte("x"))
	delete(vars, "R2_BUCKET")
	vars["JPEG_QUALITY"] = "high"

	code, logs := runWorker(t, vars, "tiff")
	require.Equal(t, 0, code, logs)
	body := o.last(t)
	require.Equal(t, "error", body["status"])
	require.Equal(t, `missing environment variables: R2_BUCKET; JPEG_QUALITY: "high" is not a whole number from 1 to 100`, body["error"])
}

func TestNothingToReportTo(t *testing.T) {
	t.Parallel()
	code, logs := runWorker(t, map[string]string{"TASK_ID": "t"}, "tiff")
	require.Equal(t, 2, code)
	require.Contains(t, logs, "CALLBACK_URL")
}

func TestCallbackUndelivered(t *testing.T) {
	t.Parallel()
	o := newOrchestrator(t, http.StatusUnauthorized)
	vars := setup(t, o, phases.TIFFConversion, "staging/01BATCH/x.tif", tiffSample(t, samples.LZW))
	code, logs := runWorker(t, vars, "tiff")
	require.Equal(t, 1, code, logs)
	require.Contains(t, logs, "no callback delivered")
}

func TestUsage(t *testing.T) {
	t.Parallel()
	code, out := runWorker(t, nil)
	require.Equal(t, 2, code)
	require.Contains(t, out, "usage: worker "+strings.Join(kinds(), "|"))
	code, _ = runWorker(t, nil, "nosuch")
	require.Equal(t, 2, code)
	code, out = runWorker(t, nil, "help")
	require.Equal(t, 0, code)
	require.Contains(t, out, "VARIANT_SIZES")
}

// kinds are the worker kinds of the registered machine phases, in order.
func kinds() []string {
	var out []string
	for _, p := range phases.All() {
		if s := p.Spec(); s.Worker != "" {
			out = append(out, s.Worker)
		}
	}
	return out
}

// TestEveryPhaseHasAProgram: each registered machine phase's worker kind
// runs a program, so no phase launches machines that cannot start.
func TestEveryPhaseHasAProgram(t *testing.T) {
	t.Parallel()
	for _, k := range kinds() {
		p, ok := lookup(k)
		require.True(t, ok, k)
		require.NotNil(t, p.run, k)
	}
	require.Len(t, programs, len(kinds()))
}

// TestFailuresClassified: a storage outage (S3 answering 503 to the
// input's GET, through every retry) is reported as retryable, so the task
// gets another machine; a corrupt input is reported as permanent.
func TestFailuresClassified(t *testing.T) {
	t.Parallel()
	t.Run("StorageOutageRetryable", func(t *testing.T) {
		t.Parallel()
		o := newOrchestrator(t, http.StatusOK)
		vars := setup(t, o, phases.TIFFConversion, "staging/01BATCH/x.tif", tiffSample(t, samples.LZW))
		down := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
			w.WriteHeader(http.StatusServiceUnavailable)
			_, _ = w.Write([]byte(`<Error><Code>ServiceUnavailable</Code><Message>down for a while</Message></Error>`))
		}))
		t.Cleanup(down.Close)
		u, err := url.Parse(vars["INPUT_URL"])
		require.NoError(t, err)
		d, err := url.Parse(down.URL)
		require.NoError(t, err)
		u.Host = d.Host
		vars["INPUT_URL"] = u.String()

		code, logs := runWorker(t, vars, "tiff")
		require.Equal(t, 0, code, logs)
		body := o.last(t)
		require.Equal(t, "error", body["status"])
		require.Equal(t, true, body["retryable"], body["error"])
	})
	t.Run("CorruptInputPermanent", func(t *testing.T) {
		t.Parallel()
		o := newOrchestrator(t, http.StatusOK)
		vars := setup(t, o, phases.TIFFConversion, "staging/01BATCH/x.tif", samples.TruncatedTIFF(64, 48))
		code, logs := runWorker(t, vars, "tiff")
		require.Equal(t, 0, code, logs)
		body := o.last(t)
		require.Equal(t, "error", body["status"])
		require.Equal(t, false, body["retryable"], body["error"])
	})
}
