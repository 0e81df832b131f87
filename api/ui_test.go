package api_test

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/arke-institute/orchestrator/api"
	"github.com/arke-institute/orchestrator/internal/testenv"
)

// TestDashboardAccess: the dashboard admits the admin credential only,
// prompts browsers for it, refuses everyone when no ADMIN_TOKEN is set,
// and takes its POSTs from its own pages only (CSRF).
func TestDashboardAccess(t *testing.T) {
	t.Parallel()
	env := testenv.New(t, hanging)
	env.PutObject(t, exampleManifestKey, []byte(exampleManifest))
	code, _ := postBatch(t, env, exampleMessage)
	require.Equal(t, http.StatusAccepted, code)
	env.AwaitStatus(t, exampleBatchID, launched)

	noRedirect := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	do := func(t *testing.T, base, method, path string, set func(*http.Request)) (*http.Response, string) {
		t.Helper()
		req, err := http.NewRequest(method, base+path, nil)
		require.NoError(t, err)
		set(req)
		resp, err := noRedirect.Do(req)
		require.NoError(t, err)
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		require.NoError(t, err)
		return resp, string(b)
	}
	admin := func(r *http.Request) { r.SetBasicAuth("admin", testenv.AdminToken) }
	base := env.Server.URL
	page := "/ui/batches/" + exampleBatchID

	t.Run("Pages", func(t *testing.T) {
		for _, p := range []struct{ path, want string }{
			{"/ui", `data-batch="` + exampleBatchID + `"`},
			{"/ui?status=PDF_PAGES", `data-batch="` + exampleBatchID + `"`},
			{"/ui?status=DONE", "No batches in DONE."},
			{page, `data-phase="PDF_PAGES"`},
			{"/ui/static/app.js", "EventSource"},
			{"/ui/static/style.css", "@media"},
		} {
			resp, body := do(t, base, http.MethodGet, p.path, admin)
			require.Equal(t, http.StatusOK, resp.StatusCode, "%s: %s", p.path, body)
			require.Contains(t, body, p.want, p.path)
		}
		resp, _ := do(t, base, http.MethodGet, "/ui/", admin)
		require.Equal(t, http.StatusMovedPermanently, resp.StatusCode)
		require.Equal(t, "/ui", resp.Header.Get("Location"))
		resp, body := do(t, base, http.MethodGet, "/ui?status=NOPE", admin)
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
				require.Equal(t, `Basic realm="orchestrator admin", charset="UTF-8"`, resp.Header.Get("WWW-Authenticate"))
			}
		}
	})

	t.Run("NoAdminToken", func(t *testing.T) {
		ctx, cancel := context.WithCancel(context.Background())
		t.Cleanup(cancel)
		srv := httptest.NewServer(api.New(api.Config{Pool: env.Pool, Logger: slog.New(slog.DiscardHandler), Context: ctx}))
		t.Cleanup(srv.Close)
		for _, set := range []func(*http.Request){func(*http.Request) {}, func(r *http.Request) { r.SetBasicAuth("admin", "") }} {
			resp, body := do(t, srv.URL, http.MethodGet, "/ui", set)
			require.Equal(t, http.StatusUnauthorized, resp.StatusCode)
			require.JSONEq(t, `{"error": "the dashboard is disabled: ADMIN_TOKEN is not set"}`, body)
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

	t.Run("SameOriginPosts", func(t *testing.T) {
		// Nothing failed: the retry's 409 comes back as the page's notice.
		resp, body := do(t, base, http.MethodPost, page+"/retry", func(r *http.Request) {
			admin(r)
			r.Header.Set("Origin", base)
			r.Header.Set("Sec-Fetch-Site", "same-origin")
		})
		require.Equal(t, http.StatusConflict, resp.StatusCode)
		require.Contains(t, body, `<p class="notice" role="status">conflict: batch `+exampleBatchID+` is running PDF_PAGES with no failed task`)
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
