package api_test

import (
	"net/http"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/arke-institute/orchestrator/internal/harness/testenv"
)

// TestCrossSiteWritesRefused: a browser's cached dashboard login (basic
// auth) opens no state-changing route from another site's page, while the
// same request from this site's pages, or with a bearer token, is let in;
// and the JSON routes refuse a body that is not declared JSON (a text/plain
// form makes valid JSON).
func TestCrossSiteWritesRefused(t *testing.T) {
	t.Parallel()
	env := testenv.New(t, testenv.Options{NoWorkers: true})
	base := env.Server.URL
	writes := []struct{ path, body string }{
		{"/admin/reset/NOPE", ""},
		{"/admin/retry/NOPE", ""},
		{"/documents", `{"r2_key": "staging/documents/a.txt"}`},
		{"/documents/NOPE/retry", ""},
		{"/riverui/api/jobs/cancel", `{"ids": ["1"]}`},
	}
	adminBasic := func(r *http.Request) { r.SetBasicAuth("admin", testenv.AdminToken) }
	for name, from := range map[string]func(*http.Request){
		"NoOrigin":       func(*http.Request) {},
		"OtherOrigin":    func(r *http.Request) { r.Header.Set("Origin", "https://evil.example") },
		"OtherReferer":   func(r *http.Request) { r.Header.Set("Referer", "https://evil.example/x") },
		"NullOrigin":     func(r *http.Request) { r.Header.Set("Origin", "null") },
		"CrossSiteFetch": func(r *http.Request) { r.Header.Set("Origin", base); r.Header.Set("Sec-Fetch-Site", "cross-site") },
	} {
		for _, w := range writes {
			code, body := authRequest(t, env, http.MethodPost, w.path, w.body, func(r *http.Request) { adminBasic(r); from(r) })
			require.Equal(t, http.StatusForbidden, code, "%s %s: %s", name, w.path, body)
			require.Contains(t, body, "cross-site request refused")
		}
	}
	for _, w := range writes {
		for name, set := range map[string]func(*http.Request){
			"SameOrigin": func(r *http.Request) {
				adminBasic(r)
				r.Header.Set("Origin", base)
				r.Header.Set("Sec-Fetch-Site", "same-origin")
			},
			"Bearer": func(r *http.Request) { r.Header.Set("Authorization", "Bearer "+testenv.AdminToken) },
		} {
			code, body := authRequest(t, env, http.MethodPost, w.path, w.body, set)
			require.NotContains(t, []int{http.StatusUnauthorized, http.StatusForbidden, http.StatusUnsupportedMediaType}, code,
				"%s %s: %s", name, w.path, body)
		}
	}

	// A body not declared JSON is refused before it is read, even with
	// the route's credential.
	ingest := func(r *http.Request) { r.Header.Set("Authorization", "Bearer "+testenv.IngestToken) }
	for _, rt := range []struct{ path, contentType, token string }{
		{"/documents", "text/plain", testenv.IngestToken},
		{"/documents", "application/x-www-form-urlencoded", testenv.IngestToken},
		{"/documents/NOPE/retry", "text/plain", testenv.IngestToken},
		{"/batches", "text/plain", testenv.IngestToken},
		{"/batches", "multipart/form-data; boundary=x", testenv.IngestToken},
		{"/callback/NOPE/TASK", "text/plain", "any"},
		{"/admin/retry/NOPE", "text/plain", testenv.AdminToken},
	} {
		code, body := authRequest(t, env, http.MethodPost, rt.path, `{"r2_key": "staging/documents/a.txt"}`, func(r *http.Request) {
			r.Header.Set("Authorization", "Bearer "+rt.token)
			r.Header.Set("Content-Type", rt.contentType)
		})
		require.Equal(t, http.StatusUnsupportedMediaType, code, "%s as %s: %s", rt.path, rt.contentType, body)
		require.JSONEq(t, `{"error": "the body must be JSON, sent with Content-Type: application/json"}`, body)
	}
	code, body := authRequest(t, env, http.MethodPost, "/documents", `{"r2_key": "x"}`, func(r *http.Request) {
		ingest(r)
		r.Header.Set("Content-Type", "application/json; charset=utf-8")
	})
	require.NotEqual(t, http.StatusUnsupportedMediaType, code, body)
}
