package api_test

import (
	"net/http"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/arke-institute/orchestrator/internal/harness/testenv"
)

// TestAdminCredential: River UI and the admin routes refuse requests
// without the admin credential, and serve them with it, as a bearer token
// or as basic auth (user admin, password ADMIN_TOKEN). River UI's refusal
// makes browsers prompt for the credential.
func TestAdminCredential(t *testing.T) {
	t.Parallel()
	env := testenv.New(t, testenv.Options{NoWorkers: true})

	type cred func(*http.Request)
	none := func(*http.Request) {}
	bearer := func(tok string) cred { return func(r *http.Request) { r.Header.Set("Authorization", "Bearer "+tok) } }
	basic := func(user, pass string) cred { return func(r *http.Request) { r.SetBasicAuth(user, pass) } }
	// Each request comes from the server's own pages, as the dashboard's
	// and River UI's do: basic auth opens no write from another site
	// (TestCrossSiteWritesRefused).
	do := func(t *testing.T, method, path string, c cred) (*http.Response, string) {
		t.Helper()
		return send(t, method, env.Server.URL+path, "", func(r *http.Request) {
			c(r)
			r.Header.Set("Origin", env.Server.URL)
		})
	}

	routes := []struct {
		name, method, path string
		served             int    // status once admitted
		body               string // part of the body once admitted
		browser            bool   // refusals carry a basic-auth challenge
	}{
		{"RiverUIPage", http.MethodGet, "/riverui/", http.StatusOK, "<html", true},
		{"RiverUIAsset", http.MethodGet, "/riverui/jobs", http.StatusOK, "<html", true},
		{"RiverUIAPI", http.MethodGet, "/riverui/api/jobs?state=available", http.StatusOK, `"data"`, true},
		{"RiverUIRoot", http.MethodGet, "/riverui", http.StatusMovedPermanently, "", true},
		{"Reset", http.MethodPost, "/admin/reset/NO-SUCH-BATCH", http.StatusNotFound, "batch NO-SUCH-BATCH: not found", false},
		{"Retry", http.MethodPost, "/admin/retry/NO-SUCH-BATCH", http.StatusNotFound, "batch NO-SUCH-BATCH: not found", false},
	}
	refused := []struct {
		name string
		cred cred
	}{
		{"NoCredential", none},
		{"WrongBearer", bearer("wrong")},
		{"EmptyBearer", bearer("")},
		{"WrongPassword", basic("admin", "wrong")},
		{"WrongUser", basic("root", testenv.AdminToken)},
		{"TokenAsUser", basic(testenv.AdminToken, "")},
		{"OtherScheme", func(r *http.Request) { r.Header.Set("Authorization", "Token "+testenv.AdminToken) }},
	}
	admitted := []struct {
		name string
		cred cred
	}{
		{"Bearer", bearer(testenv.AdminToken)},
		{"Basic", basic("admin", testenv.AdminToken)},
	}
	for _, rt := range routes {
		t.Run(rt.name, func(t *testing.T) {
			for _, c := range refused {
				resp, body := do(t, rt.method, rt.path, c.cred)
				require.Equal(t, http.StatusUnauthorized, resp.StatusCode, "%s: %s", c.name, body)
				require.JSONEq(t, `{"error": "missing or wrong admin credential"}`, body, c.name)
				if rt.browser {
					require.Equal(t, `Basic realm="orchestrator", charset="UTF-8"`, resp.Header.Get("WWW-Authenticate"), c.name)
				}
			}
			for _, c := range []cred{bearer(testenv.ReadToken), basic("reader", testenv.ReadToken)} {
				resp, body := do(t, rt.method, rt.path, c)
				require.Equal(t, http.StatusForbidden, resp.StatusCode, "the read token: %s", body)
				require.JSONEq(t, `{"error": "the read token does not open admin routes"}`, body)
			}
			for _, c := range admitted {
				resp, body := do(t, rt.method, rt.path, c.cred)
				require.Equal(t, rt.served, resp.StatusCode, "%s: %s", c.name, body)
				require.Contains(t, body, rt.body, c.name)
				if rt.served == http.StatusMovedPermanently {
					require.Equal(t, "/riverui/", resp.Header.Get("Location"))
				}
			}
		})
	}

	// River UI's unsafe requests from other sites: TestCrossSiteWritesRefused.

	t.Run("NotAPrefixMatch", func(t *testing.T) {
		resp, _ := do(t, http.MethodGet, "/riverui-other", bearer(testenv.AdminToken))
		require.Equal(t, http.StatusNotFound, resp.StatusCode)
	})
}
