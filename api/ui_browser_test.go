package api_test

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"image"
	"image/color"
	"image/jpeg"
	"net/http"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/chromedp/cdproto/fetch"
	"github.com/chromedp/cdproto/network"
	"github.com/chromedp/cdproto/page"
	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/require"

	"github.com/arke-institute/orchestrator/db"
	"github.com/arke-institute/orchestrator/internal/fakes/fakeai"
	"github.com/arke-institute/orchestrator/internal/fakes/fakefly"
	"github.com/arke-institute/orchestrator/internal/harness/eventually"
	"github.com/arke-institute/orchestrator/internal/harness/testenv"
	"github.com/arke-institute/orchestrator/ratelimit"
	"github.com/arke-institute/orchestrator/status"
)

// chromiumPath is Debian's Chromium, which CI installs.
const chromiumPath = "/usr/bin/chromium"

// wire records the request headers Chromium sent, as they went over the
// wire (auth headers included), by URL.
type wire struct {
	mu      sync.Mutex
	urls    map[network.RequestID]string
	headers map[network.RequestID]network.Headers
}

// authorization is the Authorization header of the requests sent to URLs
// ending in suffix, one per request whose headers are known.
func (w *wire) authorization(suffix string) []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	var out []string
	for id, u := range w.urls {
		if h, ok := w.headers[id]; ok && strings.HasSuffix(u, suffix) {
			v, _ := h["Authorization"].(string)
			out = append(out, v)
		}
	}
	return out
}

// browser starts a headless Chromium for the test, answering the server's
// basic-auth challenges as the admin (the Fetch domain's auth handling, so
// the browser's own auth cache covers the page's requests) and accepting
// confirmation dialogs. It fails the test when Chromium is missing: CI
// installs it, so a missing browser is a broken setup, not a skip.
func browser(t *testing.T) (context.Context, *wire) {
	t.Helper()
	bin := chromiumPath
	if _, err := os.Stat(bin); err != nil {
		found, lerr := exec.LookPath("chromium")
		if lerr != nil {
			t.Fatalf("Chromium is needed for the dashboard's browser test and was not found at %s or on PATH: "+
				"install it (apt-get install -y chromium)", chromiumPath)
		}
		bin = found
	}
	// Not t.TempDir: Chromium's helper processes may still be writing to
	// it for a moment after the browser has gone.
	profile, err := os.MkdirTemp("", "dashboard-chromium-")
	require.NoError(t, err)
	t.Cleanup(func() {
		// Best effort: a profile left behind is only litter in the
		// temporary directory.
		eventually.Within(10*time.Second, func() bool { return os.RemoveAll(profile) == nil })
	})
	opts := []chromedp.ExecAllocatorOption{
		chromedp.ExecPath(bin),
		chromedp.UserDataDir(profile),
		chromedp.Headless,
		chromedp.NoSandbox, // Chromium refuses to run as root with its sandbox
		chromedp.DisableGPU,
		chromedp.NoFirstRun,
		chromedp.NoDefaultBrowserCheck,
		chromedp.WindowSize(1280, 900),
		// No internet here: keep Chromium from calling Google.
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true),
		chromedp.Flag("disable-default-apps", true),
		chromedp.Flag("disable-extensions", true),
		chromedp.Flag("metrics-recording-only", true),
		chromedp.Flag("no-pings", true),
		chromedp.Flag("safebrowsing-disable-auto-update", true),
	}
	allocCtx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	t.Cleanup(cancelAlloc)
	ctx, cancel := chromedp.NewContext(allocCtx, chromedp.WithErrorf(t.Logf))
	t.Cleanup(func() {
		_ = chromedp.Cancel(ctx) // closes the browser and waits for it
		cancel()
	})

	sent := &wire{urls: map[network.RequestID]string{}, headers: map[network.RequestID]network.Headers{}}
	chromedp.ListenTarget(ctx, func(ev any) {
		switch ev := ev.(type) {
		case *network.EventRequestWillBeSent:
			sent.mu.Lock()
			sent.urls[ev.RequestID] = ev.Request.URL
			sent.mu.Unlock()
		case *network.EventRequestWillBeSentExtraInfo:
			sent.mu.Lock()
			sent.headers[ev.RequestID] = ev.Headers
			sent.mu.Unlock()
		case *fetch.EventAuthRequired:
			go func() {
				_ = chromedp.Run(ctx, fetch.ContinueWithAuth(ev.RequestID, &fetch.AuthChallengeResponse{
					Response: fetch.AuthChallengeResponseResponseProvideCredentials, Username: "admin", Password: testenv.AdminToken,
				}))
			}()
		case *fetch.EventRequestPaused:
			go func() { _ = chromedp.Run(ctx, fetch.ContinueRequest(ev.RequestID)) }()
		case *page.EventJavascriptDialogOpening:
			go func() { _ = chromedp.Run(ctx, page.HandleJavaScriptDialog(true)) }()
		}
	})
	require.NoError(t, chromedp.Run(ctx, network.Enable(), fetch.Enable().WithHandleAuthRequests(true)), "starting Chromium (%s)", bin)
	return ctx, sent
}

// awaitJS evaluates expr in the page until it yields want, for up to 30 s.
// Errors while a navigation replaces the page are retried.
func awaitJS(ctx context.Context, t *testing.T, what, expr, want string) {
	t.Helper()
	var got string
	var err error
	if eventually.Within(30*time.Second, func() bool {
		if ctx.Err() != nil {
			t.Fatalf("%s: %v", what, ctx.Err())
		}
		got = ""
		err = chromedp.Run(ctx, chromedp.Evaluate(`String(`+expr+`)`, &got))
		return err == nil && got == want
	}) {
		return
	}
	var html string
	_ = chromedp.Run(ctx, chromedp.Evaluate(`document.documentElement.outerHTML`, &html))
	t.Fatalf("%s: %s is %q, want %q (last error: %v); the page:\n%s", what, expr, got, want, err, html)
}

// screenshot saves the whole page as a PNG in the test's artifact
// directory (kept with go test -artifacts).
func screenshot(ctx context.Context, t *testing.T, name string) {
	t.Helper()
	awaitJS(ctx, t, "the page loaded", `document.readyState`, "complete")
	var png []byte
	require.NoError(t, chromedp.Run(ctx, chromedp.FullScreenshot(&png, 100)))
	p := filepath.Join(t.ArtifactDir(), name)
	require.NoError(t, os.WriteFile(p, png, 0o644))
	t.Logf("screenshot: %s", p)
}

// thumbnailJPEG is a small image of one colour, standing in for a variant.
func thumbnailJPEG(t *testing.T, c color.RGBA) []byte {
	t.Helper()
	img := image.NewRGBA(image.Rect(0, 0, 64, 64))
	for y := range 64 {
		for x := range 64 {
			img.Set(x, y, color.RGBA{R: c.R, G: c.G, B: uint8(int(c.B) + x), A: 255})
		}
	}
	var buf bytes.Buffer
	require.NoError(t, jpeg.Encode(&buf, img, nil))
	return buf.Bytes()
}

// imageCallback is the image worker's success callback for l, with a
// thumbnail variant on the CDN (CDN_PUBLIC_URL is https://cdn.test in
// tests), and the key it names in the CDN bucket.
func imageCallback(l fakefly.Launch) (body, thumbKey string) {
	key := l.Env["INPUT_R2_KEY"]
	thumbKey = "variants/" + strings.TrimPrefix(key, "staging/") + "/thumbnail.jpg"
	b, _ := json.Marshal(map[string]any{"task_id": l.TaskID, "batch_id": l.BatchID, "status": "success",
		"ref_json_r2_key": key + ".ref.json", "archive_r2_key": key, "ref_json_size": 300,
		"ref_data": map[string]any{"url": "https://cdn.test/" + thumbKey, "type": "image/jpeg", "size": 4242, "filename": path.Base(key),
			"variants": map[string]string{"thumbnail": "https://cdn.test/" + thumbKey}}})
	return string(b), thumbKey
}

// TestDashboardInBrowser drives the dashboard in headless Chromium against
// the whole orchestrator: the list shows a running batch; its page's
// progress bar follows the callbacks live (no reload); the page's reset
// button stops it and its retry button resumes it; once DONE, the page
// shows the final files with their thumbnails, read through the API.
func TestDashboardInBrowser(t *testing.T) {
	t.Parallel()
	ctx, sent := browser(t)
	opts, launches := heldLaunches()
	opts.Settings = map[string]string{"CDN_BUCKET": "dashboard-cdn"}
	env := testenv.New(t, opts)
	require.NoError(t, env.Store.EnsureBucket(context.Background(), env.Config.CDNBucket))

	const id = "01KDASHBOARD0BROWSER0TEST1"
	env.Submit(t, id, []testenv.File{
		{LogicalPath: "/photos/harbour.jpg", Size: 2 << 20, ContentType: "image/jpeg"},
		{LogicalPath: "/photos/lighthouse.jpg", Size: 3 << 20, ContentType: "image/jpeg"},
		{LogicalPath: "/photos/market.jpg", Size: 1 << 20, ContentType: "image/jpeg"},
	})
	byName := map[string]fakefly.Launch{}
	for range 3 {
		l := nextLaunch(t, launches)
		byName[path.Base(l.Env["INPUT_R2_KEY"])] = l
	}
	colours := map[string]color.RGBA{"harbour.jpg": {40, 90, 160, 0}, "lighthouse.jpg": {200, 80, 40, 0}, "market.jpg": {60, 150, 70, 0}}
	answer := func(l fakefly.Launch) {
		body, key := imageCallback(l)
		require.NoError(t, env.Store.Put(context.Background(), env.Config.CDNBucket, key,
			bytes.NewReader(thumbnailJPEG(t, colours[path.Base(key[:len(key)-len("/thumbnail.jpg")])])), -1, "image/jpeg"))
		postCallback(t, env, l, body)
	}
	start := time.Now()

	// The list shows the batch, with its phase's progress.
	bar := `document.querySelector('#live .phase[data-phase="IMAGE_PROCESSING"] .bar')`
	require.NoError(t, chromedp.Run(ctx,
		chromedp.Navigate(env.Server.URL+"/ui"),
		chromedp.WaitVisible(`li.batch[data-batch="`+id+`"] .phase[data-phase="IMAGE_PROCESSING"]`, chromedp.ByQuery),
	))
	screenshot(ctx, t, "list.png")

	// The batch page follows callbacks over its event stream.
	require.NoError(t, chromedp.Run(ctx,
		chromedp.Navigate(env.Server.URL+"/ui/batches/"+id),
		chromedp.WaitVisible(`#live[data-connected="true"]`, chromedp.ByQuery),
		chromedp.Evaluate(`window.notReloaded = true`, nil),
	))
	// The page's EventSource sent the credential the browser was given.
	wantAuth := "Basic " + base64.StdEncoding.EncodeToString([]byte("admin:"+testenv.AdminToken))
	stream := "/batches/" + id + "/stream"
	require.Eventually(t, func() bool { return len(sent.authorization(stream)) > 0 }, 10*time.Second, 20*time.Millisecond,
		"the stream's request headers were not seen")
	require.Equal(t, []string{wantAuth}, sent.authorization(stream))
	awaitJS(ctx, t, "progress before any callback", bar+`.getAttribute('aria-valuenow')`, "0")
	answer(byName["harbour.jpg"])
	awaitJS(ctx, t, "progress after one callback", bar+`.getAttribute('aria-valuenow')`, "1")
	answer(byName["lighthouse.jpg"])
	awaitJS(ctx, t, "progress after two callbacks", bar+`.getAttribute('aria-valuenow')`, "2")
	awaitJS(ctx, t, "the bar's text", `document.querySelector('#live .phase[data-phase="IMAGE_PROCESSING"] .phase-count').textContent`, "2 / 3 tasks done")
	awaitJS(ctx, t, "the page was updated in place", `window.notReloaded`, "true")

	// Reset from the page (the confirmation is accepted), then retry.
	require.NoError(t, chromedp.Run(ctx, chromedp.Click(`#reset`, chromedp.ByQuery)))
	awaitJS(ctx, t, "notice after reset", `document.querySelector('.notice')?.textContent`, "Batch reset.")
	awaitJS(ctx, t, "status after reset", `document.querySelector('#batch-status .badge').textContent`, "ERROR")
	require.Equal(t, "ERROR", env.Status(t, id).Status)
	screenshot(ctx, t, "batch-error.png")
	require.NoError(t, chromedp.Run(ctx, chromedp.WaitVisible(`#retry`, chromedp.ByQuery), chromedp.Click(`#retry`, chromedp.ByQuery)))
	awaitJS(ctx, t, "notice after retry", `document.querySelector('.notice')?.textContent`, "Batch retried.")
	awaitJS(ctx, t, "status after retry", `document.querySelector('#batch-status .badge').textContent`, "IMAGE_PROCESSING")

	// The task the reset ended runs again; its callback finishes the batch,
	// and the page's stream sees it to the end.
	again := nextLaunch(t, launches)
	require.Equal(t, byName["market.jpg"].TaskID, again.TaskID)
	require.NoError(t, chromedp.Run(ctx, chromedp.WaitVisible(`#live[data-connected="true"]`, chromedp.ByQuery)))
	answer(again)
	awaitJS(ctx, t, "progress after the retried task", bar+`.getAttribute('aria-valuenow')`, "3")
	awaitJS(ctx, t, "status at the end", `document.querySelector('#batch-status .badge').textContent`, "DONE")
	env.AwaitStatus(t, id, func(st status.Status) bool { return st.Ingest.Status == "delivered" })

	// Reloaded, the page shows the final files with their thumbnails.
	require.NoError(t, chromedp.Run(ctx, chromedp.Reload(), chromedp.WaitVisible(`#files img.thumb`, chromedp.ByQuery)))
	awaitJS(ctx, t, "thumbnails loaded", `[...document.querySelectorAll('#files img.thumb')].filter(i => i.complete && i.naturalWidth === 64).length`, "3")
	awaitJS(ctx, t, "ingest state", `document.querySelector('#ingest-status').textContent.trim()`, "delivered")
	screenshot(ctx, t, "batch.png")
	// The same page on a phone's screen.
	require.NoError(t, chromedp.Run(ctx, chromedp.EmulateViewport(390, 844, chromedp.EmulateScale(2), chromedp.EmulateMobile)))
	screenshot(ctx, t, "batch-phone.png")
	t.Logf("the browser part took %s", time.Since(start).Round(time.Millisecond))
}

// TestDashboardOCRInBrowser drives the OCR section in headless Chromium:
// the page of a batch in OCR shows its chunks (one done with its refused
// item named, one waiting on the provider) and the limiter's rate; the
// section's bar and totals follow the stream, without a reload, as the
// waiting chunk ends; reloaded, the page shows both chunks done.
func TestDashboardOCRInBrowser(t *testing.T) {
	t.Parallel()
	ctx, _ := browser(t)
	const id = "01KDASHBOARD0OCR0BROWSER01"
	run := startOCRBatch(t, id, true)
	env := run.env
	// Chunk 0 has ended; the provider holds chunk 1's requests, so the
	// limiter hears of no outcome until they are released.
	env.AwaitStatus(t, id, func(st status.Status) bool { return testenv.OCROf(st) != nil && testenv.OCROf(st).ChunksDone == 1 })
	b, found, err := ratelimit.New(env.Pool).State(context.Background(), run.limitKey)
	require.NoError(t, err)
	require.True(t, found)

	require.NoError(t, chromedp.Run(ctx,
		chromedp.Navigate(env.Server.URL+"/ui/batches/"+id),
		chromedp.WaitVisible(`#ocr tr[data-chunk="1"]`, chromedp.ByQuery),
		chromedp.WaitVisible(`#live[data-connected="true"]`, chromedp.ByQuery),
		chromedp.Evaluate(`window.notReloaded = true`, nil),
	))
	chunk := func(id, sel string) string {
		return `document.querySelector('#ocr tr[data-chunk="` + id + `"] ` + sel + `')`
	}
	bar := `document.querySelector('#ocr [data-live-phase="OCR"] .phase[data-phase="OCR"] .bar')`
	awaitJS(ctx, t, "chunk 0's state", chunk("0", ".badge")+`.textContent`, "DONE")
	awaitJS(ctx, t, "chunk 0's refs", chunk("0", ".chunk-count")+`.textContent`, "2 / 3 done, 1 failed")
	awaitJS(ctx, t, "chunk 0's failed item", chunk("0", ".chunk-failures .path")+`.textContent`, "/a/p001.jpg.ref.json")
	awaitJS(ctx, t, "the provider's words, as text", chunk("0", ".chunk-failures .error")+`.textContent.endsWith(`+
		strconv.Quote(ocrRefusal)+`) && !document.querySelector('#ocr .chunk-failures b')`, "true")
	awaitJS(ctx, t, "chunk 1's state", chunk("1", ".badge")+`.textContent`, "PROCESSING")
	awaitJS(ctx, t, "the limiter's key", `document.querySelector('#ocr .limiters tbody tr').dataset.key`, run.limitKey)
	awaitJS(ctx, t, "the limiter's rate", `document.querySelector('#ocr .limiter-rps').textContent`, limiterCell(b.RefillRate)+" req/s")
	awaitJS(ctx, t, "the limiter's max tokens", `document.querySelector('#ocr .limiter-max').textContent`, limiterCell(b.MaxTokens))
	awaitJS(ctx, t, "OCR progress while chunk 1 waits", bar+`.getAttribute('aria-valuenow')`, "2")
	screenshot(ctx, t, "batch-ocr-running.png")

	// Chunk 1 ends: the section's bar and totals follow the stream.
	run.release()
	awaitJS(ctx, t, "OCR progress at the end", bar+`.getAttribute('aria-valuenow')`, "4")
	awaitJS(ctx, t, "chunks done at the end", `document.querySelector('#ocr [data-count="chunks_done"]').textContent`, "2")
	awaitJS(ctx, t, "refs failed at the end", `document.querySelector('#ocr [data-count="tasks_failed"]').textContent`, "1")
	awaitJS(ctx, t, "status at the end", `document.querySelector('#batch-status .badge').textContent`, "DONE")
	awaitJS(ctx, t, "the page was updated in place", `window.notReloaded`, "true")

	require.NoError(t, chromedp.Run(ctx, chromedp.Reload(), chromedp.WaitVisible(`#ocr tr[data-chunk="1"]`, chromedp.ByQuery)))
	awaitJS(ctx, t, "chunk 1's state after a reload", chunk("1", ".badge")+`.textContent`, "DONE")
	awaitJS(ctx, t, "chunk 1's refs after a reload", chunk("1", ".chunk-count")+`.textContent`, "2 / 2 done")
	screenshot(ctx, t, "batch-ocr.png")
	require.NoError(t, chromedp.Run(ctx, chromedp.EmulateViewport(390, 844, chromedp.EmulateScale(2), chromedp.EmulateMobile)))
	screenshot(ctx, t, "batch-ocr-phone.png")
}

// TestDashboardDocumentsInBrowser drives the document pages in headless
// Chromium: the header leads from the batch list to the documents, which
// show their finished progress, and the search box, typed into and sent,
// shows the answering document first.
func TestDashboardDocumentsInBrowser(t *testing.T) {
	t.Parallel()
	ctx, _ := browser(t)
	env := testenv.New(t, testenv.Options{})
	ids := map[string]int64{}
	for _, key := range []string{"documents/lighthouse.md", "documents/bread.md"} {
		env.PutObject(t, key, []byte(corpus[key]))
		_, doc := postDocument(t, env, key)
		require.Equal(t, db.DocumentCompleted, awaitDocument(t, env, doc.ID, ended).Status)
		ids[key] = doc.ID
	}
	lighthouse := strconv.FormatInt(ids["documents/lighthouse.md"], 10)

	require.NoError(t, chromedp.Run(ctx,
		chromedp.Navigate(env.Server.URL+"/ui"),
		chromedp.Click(`header a.nav-documents`, chromedp.ByQuery),
		chromedp.WaitVisible(`li.document[data-document="`+lighthouse+`"]`, chromedp.ByQuery),
	))
	awaitJS(ctx, t, "documents listed", `document.querySelectorAll('li.document').length`, "2")
	awaitJS(ctx, t, "the lighthouse's progress",
		`document.querySelector('li.document[data-document="`+lighthouse+`"] .bar').getAttribute('aria-valuenow')`, "100")
	screenshot(ctx, t, "documents.png")

	require.NoError(t, chromedp.Run(ctx,
		chromedp.SendKeys(`#q`, "who lights the lamp in the tower", chromedp.ByQuery),
		chromedp.Submit(`#q`, chromedp.ByQuery),
		chromedp.WaitVisible(`li.result`, chromedp.ByQuery),
	))
	awaitJS(ctx, t, "the first result", `document.querySelector('li.result').dataset.document`, lighthouse)
	awaitJS(ctx, t, "the box keeps the query", `document.querySelector('#q').value`, "who lights the lamp in the tower")
	require.NoError(t, chromedp.Run(ctx, chromedp.EmulateViewport(390, 844, chromedp.EmulateScale(2), chromedp.EmulateMobile)))
	screenshot(ctx, t, "search-phone.png")
}

// TestDocumentPageFollowsARunningDocument: the page of a document still
// running updates by itself. The provider holds the document in its
// embeddings step (429s, which cost no retry) while the page is open; once
// it answers, the page shows the document completed without a reload by
// hand, and stops following it.
func TestDocumentPageFollowsARunningDocument(t *testing.T) {
	t.Parallel()
	ctx, _ := browser(t)
	var release atomic.Bool
	fake := fakeai.New(t, fakeai.Options{Behave: func(r fakeai.Request) fakeai.Behavior {
		if r.Route == fakeai.Embeddings && !release.Load() {
			return fakeai.Behavior{Status: http.StatusTooManyRequests, RetryAfter: "1"}
		}
		return fakeai.Behavior{}
	}})
	env := testenv.New(t, testenv.Options{Settings: map[string]string{
		"EMBEDDINGS_API_URL": fake.URL, "EMBEDDINGS_API_KEY": fakeai.DefaultKey,
		"TAGS_API_URL": fake.URL, "TAGS_API_KEY": fakeai.DefaultKey,
	}})
	env.PutObject(t, "documents/lighthouse.md", []byte(corpus["documents/lighthouse.md"]))
	_, doc := postDocument(t, env, "documents/lighthouse.md")
	id := strconv.FormatInt(doc.ID, 10)

	require.NoError(t, chromedp.Run(ctx,
		chromedp.Navigate(env.Server.URL+"/ui/documents/"+id),
		chromedp.WaitVisible(`#progress[data-poll]`, chromedp.ByQuery),
	))
	awaitJS(ctx, t, "held in its embeddings step", `document.querySelector('#document-status .badge').textContent`, "processing")
	release.Store(true)
	awaitJS(ctx, t, "completed, without a reload by hand", `document.querySelector('#document-status .badge').textContent`, "completed")
	awaitJS(ctx, t, "no longer followed", `document.querySelector('#progress[data-poll]') === null`, "true")
}

// TestDashboardRetriesInfrastructureFailures: a batch that
// INFRA_FAILURE_MAX put in ERROR shows a second retry button, for its
// infrastructure failures only; clicking it reruns the file whose machine
// hung, not the bad one, and the batch ends DONE.
func TestDashboardRetriesInfrastructureFailures(t *testing.T) {
	t.Parallel()
	ctx, _ := browser(t)
	env := testenv.New(t, testenv.Options{Behave: func(l fakefly.Launch) fakefly.Behavior {
		switch {
		case strings.HasSuffix(l.Env["INPUT_R2_KEY"], "/t000.tif"):
			return fakefly.Behavior{Body: errorBody(l)}
		case strings.HasSuffix(l.Env["INPUT_R2_KEY"], "/t001.tif") && l.Attempt == 1:
			return fakefly.Behavior{Hang: true}
		}
		return testenv.Succeed(l)
	}, Settings: map[string]string{"TASK_TIMEOUT_TIFF_CONVERSION": "500", "TASK_MAX_ATTEMPTS": "1", "INFRA_FAILURE_MAX": "0"}})
	const id = "01KDASHBOARD0INFRA0RETRY01"
	env.Submit(t, id, testenv.Tiffs(3))
	require.Equal(t, "ERROR", env.AwaitStatus(t, id, testenv.IsDone).Status)

	require.NoError(t, chromedp.Run(ctx,
		chromedp.Navigate(env.Server.URL+"/ui/batches/"+id),
		chromedp.WaitVisible(`#retry-infra`, chromedp.ByQuery),
	))
	awaitJS(ctx, t, "the button says how many", `document.querySelector('#retry-infra').textContent`, "Retry the 1 infrastructure failures")
	require.NoError(t, chromedp.Run(ctx, chromedp.Click(`#retry-infra`, chromedp.ByQuery)))
	awaitJS(ctx, t, "notice after retry", `document.querySelector('.notice')?.textContent`, "Batch retried.")
	st := env.AwaitStatus(t, id, func(s status.Status) bool { return s.Status == "DONE" })
	require.Equal(t, status.Failures{Permanent: 1}, st.Failures, "the bad file was not tried again")
}
