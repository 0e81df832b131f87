package chunked_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"path"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/arke-institute/orchestrator/cost"
	"github.com/arke-institute/orchestrator/db"
	"github.com/arke-institute/orchestrator/executor/chunked"
	"github.com/arke-institute/orchestrator/internal/fakes/fakeocr"
	"github.com/arke-institute/orchestrator/internal/harness/testenv"
	"github.com/arke-institute/orchestrator/jobs"
	"github.com/arke-institute/orchestrator/manifest"
	"github.com/arke-institute/orchestrator/ocr"
	"github.com/arke-institute/orchestrator/phases"
	"github.com/arke-institute/orchestrator/status"
)

// TestOCRPhaseEndToEnd runs images through IMAGE_PROCESSING into OCR
// against a fake provider that refuses one image for good (422), fails
// one once (503) and answers another 429 twice then 502: the refused ref passes through
// unchanged with its error recorded, every other ref is published with its
// text and tagged OCR, a 429 uses no retry, and the batch finishes.
func TestOCRPhaseEndToEnd(t *testing.T) {
	t.Parallel()
	var (
		mu     sync.Mutex
		seen   = map[string]int{}
		refuse = testenv.VariantText("staging/OCR-E2E/a/p001.jpg")
		flaky  = testenv.VariantText("staging/OCR-E2E/a/p002.jpg")
		busy   = testenv.VariantText("staging/OCR-E2E/b/p000.jpg")
	)
	fake := fakeocr.New(t, fakeocr.Options{Behave: func(r fakeocr.Request) fakeocr.Behavior {
		mu.Lock()
		defer mu.Unlock()
		seen[r.Text]++
		switch {
		case r.Text == refuse:
			return fakeocr.Behavior{Status: http.StatusUnprocessableEntity, Message: "image could not be decoded"}
		case r.Text == flaky && seen[r.Text] == 1:
			return fakeocr.Behavior{Status: http.StatusServiceUnavailable}
		case r.Text == busy && seen[r.Text] <= 2:
			return fakeocr.Behavior{Status: http.StatusTooManyRequests, RetryAfter: "0"}
		case r.Text == busy && seen[r.Text] == 3:
			return fakeocr.Behavior{Status: http.StatusBadGateway}
		}
		return fakeocr.Behavior{}
	}})
	// One group per chunk: /a and /b are chunks 0 and 1.
	env := testenv.New(t, testenv.Options{ImageRefs: true, Settings: testenv.OCRSettings(fake, map[string]string{"OCR_CHUNK_SIZE": "1", "MAX_RETRIES_PER_REF": "1"})})
	const id = "OCR-E2E"
	files := append(testenv.Images("/a", 3, testenv.OCROn), testenv.Images("/b", 2, testenv.OCROn)...)
	files = append(files, testenv.Images("/c", 1, manifest.ProcessingConfig{Pinax: true})...)
	const instructions = "Keep the long s (ſ) as written."
	env.SubmitWith(t, id, files, func(m *manifest.QueueMessage) {
		m.CustomPrompts = &manifest.CustomPrompts{General: instructions, Pinax: "not for OCR"}
	})

	st := env.AwaitStatus(t, id, testenv.IsDone)
	require.Equal(t, "DONE", st.Status, "error: %v", st.Error)
	require.Equal(t, &testenv.OCRCounts{ChunksTotal: 2, ChunksDone: 2, RefsTotal: 5, RefsDone: 4, RefsFailed: 1}, testenv.OCROf(st))

	// The status's cost: the four answers' usage (the fake reports 1,000
	// prompt and 20 completion tokens each), committed with their refs;
	// the refused, failed and rate-limited calls had no answer.
	var ocrUsage []cost.Line
	for _, p := range st.Cost.Phases {
		if p.Phase == string(phases.OCR) {
			ocrUsage = p.Lines
		}
	}
	require.Len(t, ocrUsage, 1)
	require.Equal(t, cost.Line{Kind: cost.KindProvider, Role: "ocr", Model: ocr.DefaultModel, Requests: 4, PromptTokens: 4000, CompletionTokens: 80},
		ocrUsage[0], "unpriced: no PRICE_TOKENS_PER_1K")
	require.Equal(t, []string{"model " + ocr.DefaultModel}, st.Cost.Unpriced)
	require.Equal(t, int64(4), st.Cost.ProviderRequests)
	for _, r := range fake.Requests() {
		require.Equal(t, ocr.Prompt(ocr.DefaultPrompt, instructions), r.Prompt, "the batch's general prompt follows the OCR prompt")
	}

	final := env.Delivered(t)
	require.Len(t, final, 6)
	for _, lp := range []string{"/a/p000.jpg", "/a/p002.jpg", "/b/p000.jpg", "/b/p001.jpg"} {
		f := final[lp+".ref.json"]
		require.Equal(t, "staging/"+id+lp+".ocr.ref.json", f.R2Key, lp)
		require.Contains(t, f.PreprocessorTags, phases.TagOCR, lp)
		ref := env.ReadRef(t, f.R2Key)
		require.NotNil(t, ref.OCR, lp)
		require.Equal(t, testenv.VariantText("staging/"+id+lp), ref.OCR.Text, lp)
		require.Equal(t, fake.Key != "", ref.OCR.Provider != "", lp)
		require.Contains(t, ref.Variants, "medium", "the ref keeps what it had")
	}
	for _, lp := range []string{"/a/p001.jpg.ref.json", "/c/p000.jpg.ref.json"} {
		f := final[lp]
		require.Equal(t, "staging/"+id+strings.TrimSuffix(lp, ".ref.json")+".ref.json", f.R2Key, "unchanged: %s", lp)
		require.NotContains(t, f.PreprocessorTags, phases.TagOCR, lp)
		require.Nil(t, env.ReadRef(t, f.R2Key).OCR, lp)
	}

	// Each image was answered 200 exactly once; the flaky one was sent
	// twice (one retry), the busy one four times (its 429s used no retry,
	// so MAX_RETRIES_PER_REF 1 still covered its 502), the refused one once.
	mu.Lock()
	require.Equal(t, 1, seen[refuse])
	require.Equal(t, 2, seen[flaky])
	require.Equal(t, 4, seen[busy])
	mu.Unlock()
	testenv.RequireEachAnsweredOnce(t, fake, 4)

	// The chunks' records: spec 004's counters and per-group results.
	q := db.New(env.Pool)
	chunks, err := q.ChunkListByBatchPhase(context.Background(), db.ChunkListByBatchPhaseParams{BatchID: id, Phase: string(phases.OCR)})
	require.NoError(t, err)
	require.Len(t, chunks, 2)
	require.Equal(t, []int32{3, 1, 0}, []int32{chunks[0].TotalRefs, chunks[0].Failed, chunks[0].Skipped})
	require.Equal(t, db.ChunkDone, chunks[0].State, "1 of 3 failed is under OCR_MAX_FAILED_FRACTION")
	var events []struct {
		Type string
		Data chunked.ChunkCallback
	}
	rows, err := env.Pool.Query(context.Background(), `SELECT type, data FROM batch_events WHERE batch_id = $1 AND type = 'chunk.completed' ORDER BY id`, id)
	require.NoError(t, err)
	for rows.Next() {
		var e struct {
			Type string
			Data chunked.ChunkCallback
		}
		require.NoError(t, rows.Scan(&e.Type, &e.Data))
		events = append(events, e)
	}
	require.NoError(t, rows.Err())
	require.Len(t, events, 2)
	slices.SortFunc(events, func(a, b struct {
		Type string
		Data chunked.ChunkCallback
	}) int {
		return strings.Compare(a.Data.ChunkID, b.Data.ChunkID)
	})
	a := events[0].Data
	require.Equal(t, "partial", a.Status)
	require.Equal(t, chunked.ChunkSummary{TotalRefs: 3, Completed: 2, Failed: 1, ProcessingTimeMS: a.Summary.ProcessingTimeMS}, a.Summary)
	require.Len(t, a.Results, 1)
	require.Equal(t, "/a", a.Results[0].PI)
	require.Len(t, a.Results[0].FailedRefs, 1)
	require.Equal(t, "p001.jpg.ref.json", a.Results[0].FailedRefs[0].Filename)
	require.Contains(t, a.Results[0].FailedRefs[0].Error, "image could not be decoded")
	require.Equal(t, "success", events[1].Data.Status)

	// Spec 004's chunk status, with the shared limiter it drew on.
	code, body := env.Do(t, http.MethodGet, "/status/"+id+"/0", nil)
	require.Equal(t, http.StatusOK, code, string(body))
	var cs chunked.ChunkStatus
	require.NoError(t, json.Unmarshal(body, &cs))
	require.Equal(t, "done", cs.Status)
	require.Equal(t, db.ChunkDone, cs.Phase)
	require.Equal(t, chunked.ChunkProgress{TotalRefs: 3, Completed: 2, Failed: 1}, cs.Progress)
	require.Equal(t, "ocr:"+strings.TrimPrefix(strings.TrimSuffix(fake.URL, "/v1"), "http://"), cs.RateLimiter.Key)
	require.Positive(t, cs.RateLimiter.RPS)
	code, body = env.Do(t, http.MethodGet, "/status/"+id+"/7", nil)
	require.Equal(t, http.StatusNotFound, code, string(body))
}

// TestOCRChunkFailsWhenMostItemsFail: a chunk more than half of whose refs
// the provider refuses ends ERROR (spec 004's global error), its done
// item still published, and the batch still finishes.
func TestOCRChunkFailsWhenMostItemsFail(t *testing.T) {
	t.Parallel()
	good := testenv.VariantText("staging/OCR-MOSTFAIL/a/p000.jpg")
	fake := fakeocr.New(t, fakeocr.Options{Behave: func(r fakeocr.Request) fakeocr.Behavior {
		if r.Text == good {
			return fakeocr.Behavior{}
		}
		return fakeocr.Behavior{Status: http.StatusBadRequest, Message: "unsupported image"}
	}})
	env := testenv.New(t, testenv.Options{ImageRefs: true, Settings: testenv.OCRSettings(fake, nil)})
	const id = "OCR-MOSTFAIL"
	env.Submit(t, id, testenv.Images("/a", 3, testenv.OCROn))
	st := env.AwaitStatus(t, id, testenv.IsDone)
	require.Equal(t, "DONE", st.Status, "a failed chunk never loses the batch: %v", st.Error)
	require.Equal(t, &testenv.OCRCounts{ChunksTotal: 1, ChunksError: 1, RefsTotal: 3, RefsDone: 1, RefsFailed: 2}, testenv.OCROf(st))
	c, err := db.New(env.Pool).ChunkGet(context.Background(), db.ChunkGetParams{BatchID: id, Phase: string(phases.OCR), ChunkID: "0"})
	require.NoError(t, err)
	require.Equal(t, db.ChunkError, c.State)
	require.Contains(t, *c.Error, "2 of 3 refs failed")
	final := env.Delivered(t)
	require.Contains(t, final["/a/p000.jpg.ref.json"].PreprocessorTags, phases.TagOCR)
	require.NotContains(t, final["/a/p001.jpg.ref.json"].PreprocessorTags, phases.TagOCR)
}

// TestOCRQuotaExhaustedEndsTheRef: a provider that answers one image
// 429 for ever does not hold the phase open: the ref is retried (using no
// retry) for TRANSIENT_RETRY_WINDOW, then ends with the reason, and the
// batch finishes with the others done.
func TestOCRQuotaExhaustedEndsTheRef(t *testing.T) {
	t.Parallel()
	spent := testenv.VariantText("staging/OCR-QUOTA/a/p001.jpg")
	var asked atomic.Int64
	fake := fakeocr.New(t, fakeocr.Options{Behave: func(r fakeocr.Request) fakeocr.Behavior {
		if r.Text == spent {
			asked.Add(1)
			return fakeocr.Behavior{Status: http.StatusTooManyRequests, RetryAfter: "0"}
		}
		return fakeocr.Behavior{}
	}})
	env := testenv.New(t, testenv.Options{ImageRefs: true, Settings: testenv.OCRSettings(fake, map[string]string{"TRANSIENT_RETRY_WINDOW": "1500"})})
	const id = "OCR-QUOTA"
	env.Submit(t, id, testenv.Images("/a", 3, testenv.OCROn))
	st := env.AwaitStatus(t, id, testenv.IsDone)
	require.Equal(t, "DONE", st.Status, "error: %v", st.Error)
	require.Equal(t, &testenv.OCRCounts{ChunksTotal: 1, ChunksDone: 1, RefsTotal: 3, RefsDone: 2, RefsFailed: 1}, testenv.OCROf(st))
	require.Greater(t, asked.Load(), int64(1), "retried meanwhile")
	var msg string
	var retries int
	require.NoError(t, env.Pool.QueryRow(context.Background(), `SELECT error, retry_count FROM chunk_items WHERE batch_id = $1 AND status = 'error'`, id).Scan(&msg, &retries))
	require.Regexp(t, `^provider quota exhausted for \d+s: .*429`, msg)
	require.Zero(t, retries, "a 429 uses no retry")
}

// TestOCRBadKeyStopsTheChunk: a key the provider refuses (401) ends the
// chunk at once with the provider's message, instead of failing every
// item one by one; the batch finishes with its refs unchanged.
func TestOCRBadKeyStopsTheChunk(t *testing.T) {
	t.Parallel()
	fake := fakeocr.New(t, fakeocr.Options{})
	env := testenv.New(t, testenv.Options{ImageRefs: true, Settings: testenv.OCRSettings(fake, map[string]string{"OCR_API_KEY": "wrong-key", "MAX_CONCURRENT_PER_ALARM": "1"})})
	const id = "OCR-BADKEY"
	env.Submit(t, id, testenv.Images("/a", 4, testenv.OCROn))
	st := env.AwaitStatus(t, id, testenv.IsDone)
	require.Equal(t, "DONE", st.Status)
	c, err := db.New(env.Pool).ChunkGet(context.Background(), db.ChunkGetParams{BatchID: id, Phase: string(phases.OCR), ChunkID: "0"})
	require.NoError(t, err)
	require.Equal(t, db.ChunkError, c.State)
	require.Contains(t, *c.Error, "refused the request")
	require.Equal(t, int32(0), c.Failed, "no item is blamed for the key")
	require.Equal(t, 1, fake.Counts().Unauthorized, "the chunk stopped at the first 401")
	require.NotContains(t, *c.Error, "wrong-key", "the key is never repeated")
	for lp, f := range env.Delivered(t) {
		require.NotContains(t, f.PreprocessorTags, phases.TagOCR, lp)
	}
}

// TestOCRRefWithoutVariant: a ref whose variant is missing from the CDN
// bucket, one whose variant URL points outside CDN_PUBLIC_URL, and one
// that names another batch's variant fail with a clear error and are never
// sent.
func TestOCRRefWithoutVariant(t *testing.T) {
	t.Parallel()
	fake := fakeocr.New(t, fakeocr.Options{})
	const id = "OCR-NOVARIANT"
	edit := func(key string, variants map[string]string) bool {
		switch path.Base(key) {
		case "p000.jpg":
			return false
		case "p001.jpg":
			variants["medium"], variants["large"] = "https://evil.example/x.jpg", "http://169.254.169.254/latest/meta-data"
		case "p003.jpg":
			variants["medium"] = "https://cdn.test/variants/OTHER/a/p000.jpg/medium.jpg"
		}
		return true
	}
	env := testenv.New(t, testenv.Options{ImageRefs: true, EditRef: edit, Settings: testenv.OCRSettings(fake, map[string]string{"OCR_MAX_FAILED_FRACTION": "1"})})
	env.Submit(t, id, testenv.Images("/a", 4, testenv.OCROn))
	st := env.AwaitStatus(t, id, testenv.IsDone)
	require.Equal(t, "DONE", st.Status)
	require.Equal(t, 1, fake.Counts().Requests, "only the sound ref is sent")
	items, err := db.New(env.Pool).ChunkItemListByBatchPhase(context.Background(), db.ChunkItemListByBatchPhaseParams{
		BatchID: id, Phase: string(phases.OCR), AfterChunkID: "", AfterItemIndex: -1, MaxItems: 10})
	require.NoError(t, err)
	require.Len(t, items, 4)
	require.Equal(t, db.ItemError, items[0].Status)
	require.Contains(t, *items[0].Error, "the medium variant variants/"+id+"/a/p000.jpg/medium.jpg is missing")
	require.Equal(t, db.ItemError, items[1].Status)
	require.Contains(t, *items[1].Error, `the medium variant's URL "https://evil.example/x.jpg" is not under CDN_PUBLIC_URL`)
	require.Equal(t, db.ItemDone, items[2].Status)
	require.Equal(t, db.ItemError, items[3].Status)
	require.Contains(t, *items[3].Error, `is not one of the batch's variants: key "variants/OTHER/a/p000.jpg/medium.jpg" is not under the batch's prefix "variants/`+id+`/"`)
}

// TestOCRTwoProcessesShareTheProvider: a few hundred refs in 30 chunks,
// worked by two orchestrator clients at once (the second with only the
// "ocr" queue, as `serve -queues ocr` runs), against a provider with a
// capacity that answers 429 above it: every ref is accounted for, each
// sent successfully exactly once, and both clients worked chunks.
func TestOCRTwoProcessesShareTheProvider(t *testing.T) {
	if testing.Short() {
		t.Skip("load test: skipped by -short")
	}
	t.Parallel()
	fake := fakeocr.New(t, fakeocr.Options{Rate: 25, Burst: 5})
	env := testenv.New(t, testenv.Options{ImageRefs: true, Settings: testenv.OCRSettings(fake, map[string]string{
		"OCR_CHUNK_SIZE": "1", "INITIAL_MAX_TOKENS": "5", "MIN_MAX_TOKENS": "2", "MAX_MAX_TOKENS": "5", "INITIAL_REFILL_RATE": "20", "MAX_REFILL_RATE": "40",
	})})
	second := env.StartClient(t, jobs.ClientConfig{Queues: []string{"ocr"}})
	const id, dirs, per = "OCR-TWO", 30, 10
	var files []testenv.File
	for d := range dirs {
		files = append(files, testenv.Images(fmt.Sprintf("/d%02d", d), per, testenv.OCROn)...)
	}
	env.Submit(t, id, files)
	st := env.AwaitStatus(t, id, testenv.IsDone)
	require.Equal(t, "DONE", st.Status, "error: %v", st.Error)
	require.Equal(t, &testenv.OCRCounts{ChunksTotal: dirs, ChunksDone: dirs, RefsTotal: dirs * per, RefsDone: dirs * per}, testenv.OCROf(st))

	testenv.RequireEachAnsweredOnce(t, fake, dirs*per)
	c := fake.Counts()
	t.Logf("%d requests, %d answered 429 (%.1f%%)", c.Requests, c.RateLimited, 100*float64(c.RateLimited)/float64(c.Requests))

	var bySecond int
	require.NoError(t, env.Pool.QueryRow(context.Background(),
		`SELECT count(*) FROM river_job WHERE kind = 'chunk' AND $1 = ANY(attempted_by)`, second.ID()).Scan(&bySecond))
	require.Positive(t, bySecond, "the second process worked chunks too")
}

// TestOCRAdminRetryRequeuesFailedItems: while a batch is still in OCR
// (one chunk is busy), an admin's retry puts the failed items of a chunk
// that ended back to pending, reopens the chunk, and they testenv.Succeed.
func TestOCRAdminRetryRequeuesFailedItems(t *testing.T) {
	t.Parallel()
	const id = "OCR-RETRY"
	var broken sync.Map // text -> true while the provider refuses it
	for i := range 2 {
		broken.Store(testenv.VariantText(fmt.Sprintf("staging/%s/a/p%03d.jpg", id, i)), true)
	}
	slow := testenv.VariantText("staging/" + id + "/b/p000.jpg")
	release := make(chan struct{})
	fake := fakeocr.New(t, fakeocr.Options{Behave: func(r fakeocr.Request) fakeocr.Behavior {
		if r.Text == slow {
			<-release
		}
		if _, ok := broken.Load(r.Text); ok {
			return fakeocr.Behavior{Status: http.StatusUnprocessableEntity, Message: "cannot read this scan"}
		}
		return fakeocr.Behavior{}
	}})
	t.Cleanup(func() {
		select {
		case <-release:
		default:
			close(release)
		}
	})
	env := testenv.New(t, testenv.Options{ImageRefs: true, Settings: testenv.OCRSettings(fake, map[string]string{"OCR_CHUNK_SIZE": "1"})})
	env.Submit(t, id, append(testenv.Images("/a", 2, testenv.OCROn), testenv.Images("/b", 1, testenv.OCROn)...))

	// Chunk 0 (/a) ends ERROR, every item refused; chunk 1 is busy.
	q := db.New(env.Pool)
	env.AwaitStatus(t, id, func(st status.Status) bool { return testenv.OCROf(st) != nil && testenv.OCROf(st).ChunksError == 1 })
	broken.Clear()
	code, body := env.DoAuth(t, http.MethodPost, "/admin/retry/"+id, testenv.AdminToken, nil)
	require.Equal(t, http.StatusOK, code, string(body))
	c, err := q.ChunkGet(context.Background(), db.ChunkGetParams{BatchID: id, Phase: string(phases.OCR), ChunkID: "0"})
	require.NoError(t, err)
	require.NotEqual(t, db.ChunkError, c.State, "the retry reopened the chunk")
	require.Equal(t, int32(0), c.Failed)
	close(release)

	st := env.AwaitStatus(t, id, testenv.IsDone)
	require.Equal(t, "DONE", st.Status)
	require.Equal(t, &testenv.OCRCounts{ChunksTotal: 2, ChunksDone: 2, RefsTotal: 3, RefsDone: 3}, testenv.OCROf(st))
	for lp, f := range env.Delivered(t) {
		require.Contains(t, f.PreprocessorTags, phases.TagOCR, lp)
	}
	var requeued int
	require.NoError(t, env.Pool.QueryRow(context.Background(),
		`SELECT (data->>'items')::int FROM batch_events WHERE batch_id = $1 AND type = 'chunk.items_requeued'`, id).Scan(&requeued))
	require.Equal(t, 2, requeued)
}

// TestOCRResetThenRetry: an admin reset in the middle of OCR stops the
// batch (its chunk jobs cancelled, its chunks left as they were); a retry
// resumes OCR where it stopped, without sending a done ref again.
func TestOCRResetThenRetry(t *testing.T) {
	t.Parallel()
	const id = "OCR-RESET"
	slow := testenv.VariantText("staging/" + id + "/a/p003.jpg")
	gate := make(chan struct{})
	var once sync.Once
	open := func() { once.Do(func() { close(gate) }) }
	t.Cleanup(open)
	fake := fakeocr.New(t, fakeocr.Options{Behave: func(r fakeocr.Request) fakeocr.Behavior {
		if r.Text == slow {
			<-gate
		}
		return fakeocr.Behavior{}
	}})
	env := testenv.New(t, testenv.Options{ImageRefs: true, Settings: testenv.OCRSettings(fake, map[string]string{"MAX_CONCURRENT_PER_ALARM": "1"})})
	env.Submit(t, id, testenv.Images("/a", 6, testenv.OCROn))
	env.AwaitStatus(t, id, func(st status.Status) bool { return testenv.OCROf(st) != nil && testenv.OCROf(st).RefsDone == 3 })

	// The refs whose text was committed before the reset.
	var committed []string
	rows, err := env.Pool.Query(context.Background(), `SELECT r2_key FROM chunk_items WHERE batch_id = $1 AND status = 'done'`, id)
	require.NoError(t, err)
	for rows.Next() {
		var key string
		require.NoError(t, rows.Scan(&key))
		committed = append(committed, testenv.VariantText(strings.TrimSuffix(key, ".ref.json")))
	}
	require.NoError(t, rows.Err())
	require.GreaterOrEqual(t, len(committed), 3)

	code, body := env.DoAuth(t, http.MethodPost, "/admin/reset/"+id, testenv.AdminToken, nil)
	require.Equal(t, http.StatusOK, code, string(body))
	open() // the ref in flight during the reset is answered
	st := env.AwaitStatus(t, id, func(st status.Status) bool { return st.Status == "ERROR" })
	require.Equal(t, "Manually reset by admin", *st.Error)

	code, body = env.DoAuth(t, http.MethodPost, "/admin/retry/"+id, testenv.AdminToken, nil)
	for code == http.StatusConflict && strings.Contains(string(body), "still stopping") {
		code, body = env.DoAuth(t, http.MethodPost, "/admin/retry/"+id, testenv.AdminToken, nil)
	}
	require.Equal(t, http.StatusOK, code, string(body))
	st = env.AwaitStatus(t, id, testenv.IsDone)
	require.Equal(t, "DONE", st.Status, "error: %v", st.Error)
	require.Equal(t, &testenv.OCRCounts{ChunksTotal: 1, ChunksDone: 1, RefsTotal: 6, RefsDone: 6}, testenv.OCROf(st))
	// A ref committed before the reset was never sent again. (The one in
	// flight when the reset cancelled its run may be: the provider answered
	// a request whose caller had gone, and nothing was committed.)
	sent := map[string]int{}
	for _, r := range fake.Requests() {
		sent[r.Text]++
	}
	for _, text := range committed {
		require.Equal(t, 1, sent[text], "sent again after its result was committed: %q", text)
	}
}
