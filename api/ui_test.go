package api_test

import (
	"context"
	"fmt"
	"log/slog"
	"math"
	"net/http"
	"net/http/httptest"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/arke-institute/orchestrator/api"
	"github.com/arke-institute/orchestrator/internal/fakes/fakefly"
	"github.com/arke-institute/orchestrator/internal/fakes/fakeocr"
	"github.com/arke-institute/orchestrator/internal/fakes/ocrfixture"
	"github.com/arke-institute/orchestrator/internal/harness/testenv"
	"github.com/arke-institute/orchestrator/phases"
	"github.com/arke-institute/orchestrator/ratelimit"
	"github.com/arke-institute/orchestrator/status"
)

// TestDashboardAccess: the dashboard admits the admin and read credentials
// (controls for the admin only), prompts browsers for them, refuses
// everyone when no token is set, and takes its POSTs from its own pages
// only (CSRF).
func TestDashboardAccess(t *testing.T) {
	t.Parallel()
	env := testenv.New(t, hanging)
	env.PutObject(t, exampleManifestKey, []byte(exampleManifest))
	code, _ := postBatch(t, env, exampleMessage)
	require.Equal(t, http.StatusAccepted, code)
	env.AwaitStatus(t, exampleBatchID, launched)

	do := func(t *testing.T, base, method, path string, set func(*http.Request)) (*http.Response, string) {
		t.Helper()
		return send(t, method, base+path, "", set)
	}
	admin := func(r *http.Request) { r.SetBasicAuth("admin", testenv.AdminToken) }
	base := env.Server.URL
	page := "/ui/batches/" + exampleBatchID

	t.Run("Pages", func(t *testing.T) {
		for _, p := range []struct{ path, want string }{
			{"/ui", `data-batch="` + exampleBatchID + `"`},
			{"/ui?status=PDF_PAGES", `data-batch="` + exampleBatchID + `"`},
			{"/ui?status=DONE", "No batches in DONE."},
			{"/ui", `>priority 0</span>`},
			{page, `data-phase="PDF_PAGES"`},
			{page, `>priority 0</span>`},
			{"/ui/static/app.js", "EventSource"},
			{"/ui/static/style.css", "@media"},
		} {
			resp, body := do(t, base, http.MethodGet, p.path, admin)
			require.Equal(t, http.StatusOK, resp.StatusCode, "%s: %s", p.path, body)
			require.Contains(t, body, p.want, p.path)
		}
		_, body := do(t, base, http.MethodGet, page, admin)
		require.NotContains(t, body, `id="ocr"`, "a batch without OCR chunks has no OCR section")
		resp, _ := do(t, base, http.MethodGet, "/ui/", admin)
		require.Equal(t, http.StatusMovedPermanently, resp.StatusCode)
		require.Equal(t, "/ui", resp.Header.Get("Location"))
		resp, body = do(t, base, http.MethodGet, "/ui?status=NOPE", admin)
		require.Equal(t, http.StatusBadRequest, resp.StatusCode, body)
		resp, _ = do(t, base, http.MethodGet, "/ui/batches/NO-SUCH-BATCH", admin)
		require.Equal(t, http.StatusNotFound, resp.StatusCode)
		resp, _ = do(t, base, http.MethodGet, page+"/files/1/thumbnail", admin)
		require.Equal(t, http.StatusNotFound, resp.StatusCode, "a file without an image variant has no thumbnail")
		resp, _ = do(t, base, http.MethodGet, page+"/files/x/thumbnail", admin)
		require.Equal(t, http.StatusBadRequest, resp.StatusCode)
	})

	t.Run("Refused", func(t *testing.T) {
		for _, path := range []string{"/ui", page, "/ui/static/app.js", page + "/files/1/thumbnail"} {
			for _, set := range []func(*http.Request){
				func(*http.Request) {},
				func(r *http.Request) { r.SetBasicAuth("admin", "wrong") },
				func(r *http.Request) { r.SetBasicAuth("root", testenv.AdminToken) },
			} {
				resp, body := do(t, base, http.MethodGet, path, set)
				require.Equal(t, http.StatusUnauthorized, resp.StatusCode, "%s: %s", path, body)
				require.Equal(t, `Basic realm="orchestrator", charset="UTF-8"`, resp.Header.Get("WWW-Authenticate"))
			}
		}
	})

	// A reader sees every page, with no controls, and cannot post them.
	t.Run("Reader", func(t *testing.T) {
		reader := func(r *http.Request) { r.SetBasicAuth("reader", testenv.ReadToken) }
		for _, path := range []string{"/ui", page, "/ui/static/app.js"} {
			resp, body := do(t, base, http.MethodGet, path, reader)
			require.Equal(t, http.StatusOK, resp.StatusCode, "%s: %s", path, body)
		}
		_, body := do(t, base, http.MethodGet, page, reader)
		require.Contains(t, body, `data-phase="PDF_PAGES"`)
		require.NotContains(t, body, `class="actions"`, "a reader is shown no controls")
		_, body = do(t, base, http.MethodGet, page, admin)
		require.Contains(t, body, `class="actions"`, "the admin is")
		for _, action := range []string{"reset", "retry"} {
			resp, body := do(t, base, http.MethodPost, page+"/"+action, func(r *http.Request) {
				reader(r)
				r.Header.Set("Origin", base)
			})
			require.Equal(t, http.StatusForbidden, resp.StatusCode, "%s: %s", action, body)
		}
		require.Equal(t, "PDF_PAGES", env.Status(t, exampleBatchID).Status, "refused posts changed nothing")
		resp, _ := do(t, base, http.MethodGet, "/ui", func(r *http.Request) { r.SetBasicAuth("admin", testenv.ReadToken) })
		require.Equal(t, http.StatusUnauthorized, resp.StatusCode, "the read token is the reader's password, not the admin's")
	})

	t.Run("NoToken", func(t *testing.T) {
		ctx, cancel := context.WithCancel(context.Background())
		t.Cleanup(cancel)
		srv := httptest.NewServer(api.New(api.Config{Pool: env.Pool, Logger: slog.New(slog.DiscardHandler), Context: ctx}))
		t.Cleanup(srv.Close)
		for _, set := range []func(*http.Request){func(*http.Request) {}, func(r *http.Request) { r.SetBasicAuth("admin", "") }} {
			resp, body := do(t, srv.URL, http.MethodGet, "/ui", set)
			require.Equal(t, http.StatusUnauthorized, resp.StatusCode)
			require.JSONEq(t, `{"error": "reads are disabled: neither READ_TOKEN nor ADMIN_TOKEN is set"}`, body)
		}
	})

	t.Run("CrossSitePostsRefused", func(t *testing.T) {
		host := strings.TrimPrefix(base, "http://")
		for name, set := range map[string]func(*http.Request){
			"NoOriginNorReferer": func(*http.Request) {},
			"OtherOrigin":        func(r *http.Request) { r.Header.Set("Origin", "https://evil.example") },
			"OtherReferer":       func(r *http.Request) { r.Header.Set("Referer", "https://evil.example/page") },
			"CrossSiteFetch": func(r *http.Request) {
				r.Header.Set("Origin", base)
				r.Header.Set("Sec-Fetch-Site", "cross-site")
			},
			"SameSiteFetch": func(r *http.Request) {
				r.Header.Set("Origin", base)
				r.Header.Set("Sec-Fetch-Site", "same-site")
			},
			"NullOrigin":    func(r *http.Request) { r.Header.Set("Origin", "null") },
			"HostAsSubpath": func(r *http.Request) { r.Header.Set("Origin", "https://evil.example/"+host) },
		} {
			for _, action := range []string{"reset", "retry"} {
				resp, body := do(t, base, http.MethodPost, page+"/"+action, func(r *http.Request) { admin(r); set(r) })
				require.Equal(t, http.StatusForbidden, resp.StatusCode, "%s %s: %s", name, action, body)
			}
		}
		st := env.Status(t, exampleBatchID)
		require.Equal(t, "PDF_PAGES", st.Status, "refused posts changed nothing")

		// Without the credential, a same-origin post is refused too.
		resp, _ := do(t, base, http.MethodPost, page+"/reset", func(r *http.Request) { r.Header.Set("Origin", base) })
		require.Equal(t, http.StatusUnauthorized, resp.StatusCode)
	})

	t.Run("PauseButtons", func(t *testing.T) {
		post := func(path, form string) *http.Response {
			resp, body := send(t, http.MethodPost, base+path, form, func(r *http.Request) {
				admin(r)
				r.Header.Set("Origin", base)
				r.Header.Set("Content-Type", "application/x-www-form-urlencoded")
			})
			require.Equal(t, http.StatusSeeOther, resp.StatusCode, "%s %s: %s", path, form, body)
			return resp
		}
		resp := post("/ui/pauses", "batch_id="+exampleBatchID+"&reason=checking+<b>files</b>")
		require.Equal(t, page+"?done=paused", resp.Header.Get("Location"))
		_, body := do(t, base, http.MethodGet, page+"?done=paused", admin)
		require.Contains(t, body, `<p class="notice" role="status">Batch paused.</p>`)
		require.Contains(t, body, `id="batch-paused"`)
		require.Contains(t, body, "checking &lt;b&gt;files&lt;/b&gt;", "the reason is shown as text")
		require.Contains(t, body, `id="resume"`)
		require.EqualValues(t, "batch", env.Status(t, exampleBatchID).Paused.Scope)
		post("/ui/pauses/resume", "batch_id="+exampleBatchID)
		require.Nil(t, env.Status(t, exampleBatchID).Paused)

		// A phase's pause, from the list page, is listed there with its
		// resume button.
		require.Equal(t, "/ui", post("/ui/pauses", "phase=OCR&reason=provider+bill").Header.Get("Location"))
		_, body = do(t, base, http.MethodGet, "/ui", admin)
		require.Contains(t, body, `<li class="pause" data-scope="phase">Phase <strong>OCR</strong>`)
		require.Contains(t, body, "provider bill")
		post("/ui/pauses/resume", "phase=OCR")
		_, body = do(t, base, http.MethodGet, "/ui", admin)
		require.NotContains(t, body, `id="pauses"`)

		// A reader sees no pause button and may not post one.
		_, body = do(t, base, http.MethodGet, "/ui", func(r *http.Request) { r.SetBasicAuth("reader", testenv.ReadToken) })
		require.NotContains(t, body, `id="pause-form"`)
		resp, _ = send(t, http.MethodPost, base+"/ui/pauses", "", func(r *http.Request) {
			r.SetBasicAuth("reader", testenv.ReadToken)
			r.Header.Set("Origin", base)
		})
		require.Equal(t, http.StatusForbidden, resp.StatusCode)
	})

	t.Run("SameOriginPosts", func(t *testing.T) {
		// Nothing failed: the retry's 409 comes back as the page's notice.
		resp, body := do(t, base, http.MethodPost, page+"/retry", func(r *http.Request) {
			admin(r)
			r.Header.Set("Origin", base)
			r.Header.Set("Sec-Fetch-Site", "same-origin")
		})
		require.Equal(t, http.StatusConflict, resp.StatusCode)
		require.Contains(t, body, `<p class="notice" role="status">conflict: batch `+exampleBatchID+` is running PDF_PAGES with no failed work`)
		resp, _ = do(t, base, http.MethodPost, page+"/reset", func(r *http.Request) { admin(r); r.Header.Set("Referer", base+page) })
		require.Equal(t, http.StatusSeeOther, resp.StatusCode)
		require.Equal(t, page+"?done=reset", resp.Header.Get("Location"))
		require.Equal(t, "ERROR", env.Status(t, exampleBatchID).Status)
		_, body = do(t, base, http.MethodGet, page+"?done=reset", admin)
		require.Contains(t, body, `<p class="notice" role="status">Batch reset.</p>`)
		_, body = do(t, base, http.MethodGet, page+"?done=<b>phish</b>", admin)
		require.NotContains(t, body, "phish", "a link cannot write on the page")
		require.Contains(t, body, `id="retry"`)
		require.NotContains(t, body, `id="reset"`)
	})
}

// ocrRefusal is what the fake provider says about the image it refuses:
// markup, which the page must show as text.
const ocrRefusal = "image <b>could not</b> be decoded"

// ocrBatch is a batch of images taken through IMAGE_PROCESSING and OCR
// against a fake provider: /a's three images are chunk 0, /b's two chunk 1
// (OCR_CHUNK_SIZE 1). The provider refuses /a/p001.jpg for good (422,
// ocrRefusal). With hold, it answers nothing for /b until release.
type ocrBatch struct {
	env *testenv.Env
	// limitKey is the limiter bucket every chunk draws on.
	limitKey string
	release  func()
}

func startOCRBatch(t *testing.T, id string, hold bool) ocrBatch {
	t.Helper()
	text := func(lp string) string { return fakeocr.TextFor(ocrfixture.PageImage("staging/" + id + lp)) }
	refused := text("/a/p001.jpg")
	held := map[string]bool{text("/b/p000.jpg"): true, text("/b/p001.jpg"): true}
	gate := make(chan struct{})
	var once sync.Once
	release := func() { once.Do(func() { close(gate) }) }
	fake := fakeocr.New(t, fakeocr.Options{Behave: func(r fakeocr.Request) fakeocr.Behavior {
		switch {
		case r.Text == refused:
			return fakeocr.Behavior{Status: http.StatusUnprocessableEntity, Message: ocrRefusal}
		case hold && held[r.Text]:
			<-gate
		}
		return fakeocr.Behavior{}
	}})
	env := testenv.New(t, testenv.Options{ImageRefs: true, Settings: map[string]string{
		"OCR_API_URL": fake.URL, "OCR_API_KEY": fake.Key, "ALARM_INTERVAL_MS": "20", "OCR_CHUNK_SIZE": "1",
		"INITIAL_REFILL_RATE": "50", "INITIAL_MAX_TOKENS": "20", "MAX_MAX_TOKENS": "40", "MAX_REFILL_RATE": "200",
	}})
	t.Cleanup(release) // before the orchestrator stops and the fake closes
	var files []testenv.File
	for dir, n := range map[string]int{"/a": 3, "/b": 2} {
		for i := range n {
			files = append(files, testenv.File{LogicalPath: fmt.Sprintf("%s/p%03d.jpg", dir, i), Size: 100, ContentType: "image/jpeg", Config: testenv.OCROn})
		}
	}
	slices.SortFunc(files, func(a, b testenv.File) int { return strings.Compare(a.LogicalPath, b.LogicalPath) })
	env.Submit(t, id, files)
	u, err := url.Parse(fake.URL)
	require.NoError(t, err)
	return ocrBatch{env: env, limitKey: "ocr:" + u.Host, release: release}
}

// limiterCell is how the page writes a limiter's number: one decimal
// place at most.
func limiterCell(x float64) string {
	return strconv.FormatFloat(math.Round(x*10)/10, 'f', -1, 64)
}

// TestDashboardOCRSection: the page of a batch that went through OCR shows
// the phase's totals, the limiter its chunks drew on (its rate and shape
// as the database has them) and each chunk with its progress and failed
// items, the provider's words escaped.
func TestDashboardOCRSection(t *testing.T) {
	t.Parallel()
	const id = "01KDASHBOARD0OCR0SECTION01"
	run := startOCRBatch(t, id, false)
	st := run.env.AwaitStatus(t, id, func(st status.Status) bool { return st.Status == "DONE" || st.Status == "ERROR" })
	require.Equal(t, "DONE", st.Status, "error: %v", st.Error)
	require.Equal(t, &testenv.OCRCounts{ChunksTotal: 2, ChunksDone: 2, RefsTotal: 5, RefsDone: 4, RefsFailed: 1}, testenv.OCROf(st))
	// Nothing takes from the limiter any more: its rate and shape hold still.
	b, found, err := ratelimit.New(run.env.Pool).State(context.Background(), run.limitKey)
	require.NoError(t, err)
	require.True(t, found)

	code, raw := run.env.DoAuth(t, http.MethodGet, "/ui/batches/"+id, testenv.AdminToken, nil)
	require.Equal(t, http.StatusOK, code, string(raw))
	body := string(raw)
	for _, want := range []string{
		`<a href="#ocr">OCR</a>`,
		`<section id="ocr"><h2>OCR</h2>`,
		`<div class="phase" data-phase="OCR">`,
		`aria-label="OCR" aria-valuemin="0" aria-valuemax="5" aria-valuenow="4"`,
		`<div data-live-phase="OCR">`,
		`<span data-count="chunks_done">2</span> done, <span data-count="chunks_error">0</span> error, of <span data-count="chunks_total">2</span>`,
		`<span data-count="tasks_completed">4</span> done (<span data-count="tasks_skipped">0</span> skipped), <span data-count="tasks_failed">1</span> failed, of <span data-count="tasks_total">5</span>`,
		`<tr data-key="` + run.limitKey + `"><td><code>` + run.limitKey + `</code></td>`,
		`class="limiter-rps">` + limiterCell(b.RefillRate) + ` req/s</td>`,
		`class="limiter-max">` + limiterCell(b.MaxTokens) + `</td>`,
		`<tr data-chunk="0"><td>0</td><td data-label="State"><span class="badge s-DONE">DONE</span></td>`,
		`<div class="chunk-count">2 / 3 done, 1 failed</div>`,
		`<tr data-chunk="1"><td>1</td><td data-label="State"><span class="badge s-DONE">DONE</span></td>`,
		`<div class="chunk-count">2 / 2 done</div>`,
		`<span class="path">/a/p001.jpg.ref.json</span>`,
		`image &lt;b&gt;could not&lt;/b&gt; be decoded`,
	} {
		require.Contains(t, body, want)
	}
	require.NotContains(t, body, ocrRefusal, "the provider's markup is text")
	require.Equal(t, 1, strings.Count(body, `<span class="path">`), "one failed item")
}

// TestDashboardPoolSection: a batch whose TIFFs run on a pool shows the
// pool on its page: its machines by state, the tasks leased, leases per
// machine.
func TestDashboardPoolSection(t *testing.T) {
	t.Parallel()
	env := testenv.New(t, testenv.Options{
		Settings: testenv.PoolSettings(2, nil),
		Behave: func(l fakefly.Launch) fakefly.Behavior {
			if l.PoolMachine != "" {
				return fakefly.Behavior{Hang: true} // each machine holds its first task
			}
			return fakefly.Succeed(l)
		},
	})
	const id = "01KDASHBOARD0POOL0SECTION1"
	env.Submit(t, id, testenv.Tiffs(4))
	env.AwaitStatus(t, id, func(st status.Status) bool {
		p, ok := testenv.PhaseOf(st, phases.TIFFConversion)
		return ok && p.Detail["machines_busy"] == 2
	})
	code, raw := env.DoAuth(t, http.MethodGet, "/ui/batches/"+id, testenv.AdminToken, nil)
	require.Equal(t, http.StatusOK, code, string(raw))
	body := string(raw)
	require.Contains(t, body, `<table class="pools">`)
	require.Regexp(t, `<tr><td>\d+</td><td class="phase-name">TIFF_CONVERSION</td><td>0</td><td>2</td><td>0</td><td>2</td><td>2</td><td>[0-9.]+</td><td>1</td>`, body,
		"no machine starting, 2 busy, none idle; 2 launched, 2 leases, 1 task per machine")
}
