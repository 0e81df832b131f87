package api_test

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"io"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/arke-institute/orchestrator/intakesig"
	"github.com/arke-institute/orchestrator/internal/harness/testenv"
)

// send sends a request to url with body (JSON, none if empty) and set
// applied (nil: nothing), without following redirects, and returns the
// answer and its body: the one request helper of the api tests that craft
// their own credentials and headers.
func send(t *testing.T, method, url, body string, set func(*http.Request)) (*http.Response, string) {
	t.Helper()
	var r io.Reader
	if body != "" {
		r = strings.NewReader(body)
	}
	req, err := http.NewRequest(method, url, r)
	require.NoError(t, err)
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	if set != nil {
		set(req)
	}
	resp, err := noRedirects.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return resp, string(b)
}

// noRedirects is a client that answers redirects rather than following them.
var noRedirects = &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}

// authRequest is send to env's server, returning the status and body.
func authRequest(t *testing.T, env *testenv.Env, method, path, body string, set func(*http.Request)) (int, string) {
	t.Helper()
	resp, b := send(t, method, env.Server.URL+path, body, set)
	return resp.StatusCode, b
}

// TestCredentialsOpenTheirRoutes: each credential opens its own routes and
// no other: only /healthz is open; the read token opens the reads; the
// admin token the reads and the admin routes; the ingest token intake
// alone (and no other token opens intake).
func TestCredentialsOpenTheirRoutes(t *testing.T) {
	t.Parallel()
	env := testenv.New(t, testenv.Options{NoWorkers: true})

	type cred struct {
		name string
		set  func(*http.Request)
	}
	bearer := func(tok string) func(*http.Request) {
		return func(r *http.Request) { r.Header.Set("Authorization", "Bearer "+tok) }
	}
	basic := func(user, pass string) func(*http.Request) {
		return func(r *http.Request) { r.SetBasicAuth(user, pass) }
	}
	creds := []cred{
		{"none", func(*http.Request) {}},
		{"wrong", bearer("not-a-token-of-this-server")},
		{"read", bearer(testenv.ReadToken)},
		{"readBasic", basic("reader", testenv.ReadToken)},
		{"readAsAdmin", basic("admin", testenv.ReadToken)},
		{"admin", bearer(testenv.AdminToken)},
		{"adminBasic", basic("admin", testenv.AdminToken)},
		{"ingest", bearer(testenv.IngestToken)},
	}
	// Each route, with the credentials that open it; for the others it
	// answers 401 or 403. What an admitted request gets (404 for an
	// unknown batch, 400 for an empty message) shows it was let in.
	routes := []struct {
		method, path, body string
		opens              []string
	}{
		{"GET", "/healthz", "", []string{"none", "wrong", "read", "readBasic", "readAsAdmin", "admin", "adminBasic", "ingest"}},
		{"GET", "/openapi.yaml", "", []string{"read", "readBasic", "admin", "adminBasic"}},
		{"GET", "/batches", "", []string{"read", "readBasic", "admin", "adminBasic"}},
		{"GET", "/batches/NOPE/events", "", []string{"read", "readBasic", "admin", "adminBasic"}},
		{"GET", "/batches/NOPE/stream", "", []string{"read", "readBasic", "admin", "adminBasic"}},
		{"GET", "/status/NOPE", "", []string{"read", "readBasic", "admin", "adminBasic"}},
		{"GET", "/status/NOPE/0", "", []string{"read", "readBasic", "admin", "adminBasic"}},
		{"GET", "/ui", "", []string{"readBasic", "read", "admin", "adminBasic"}},
		{"GET", "/ui/batches/NOPE", "", []string{"readBasic", "read", "admin", "adminBasic"}},
		{"POST", "/batches", "{}", []string{"ingest"}},
		// A program's writes take a bearer token: basic auth opens them
		// only from this site's pages (TestCrossSiteWritesRefused).
		{"POST", "/admin/reset/NOPE", "", []string{"admin"}},
		{"POST", "/admin/retry/NOPE", "", []string{"admin"}},
		{"POST", "/admin/pause", `{"batch_id": "NOPE"}`, []string{"admin"}},
		{"POST", "/admin/resume", `{"batch_id": "NOPE"}`, []string{"admin"}},
		{"GET", "/admin/pauses", "", []string{"admin", "adminBasic"}},
		{"POST", "/documents", "{}", []string{"admin", "ingest"}},
		{"GET", "/riverui/", "", []string{"admin", "adminBasic"}},
	}
	for _, rt := range routes {
		for _, c := range creds {
			code, body := authRequest(t, env, rt.method, rt.path, rt.body, c.set)
			opens := false
			for _, o := range rt.opens {
				opens = opens || o == c.name
			}
			if opens {
				require.NotContains(t, []int{http.StatusUnauthorized, http.StatusForbidden}, code, "%s %s as %s: %s", rt.method, rt.path, c.name, body)
			} else {
				require.Contains(t, []int{http.StatusUnauthorized, http.StatusForbidden}, code, "%s %s as %s: %s", rt.method, rt.path, c.name, body)
			}
		}
	}
}

// TestStatusPublic: STATUS_PUBLIC=true opens a batch's status and its chunk
// status, as spec 000 has it, and nothing else.
func TestStatusPublic(t *testing.T) {
	t.Parallel()
	env := testenv.New(t, testenv.Options{NoWorkers: true, Settings: map[string]string{"STATUS_PUBLIC": "true"}})
	none := func(*http.Request) {}
	for path, want := range map[string]int{
		"/status/NOPE":         http.StatusNotFound,
		"/status/NOPE/0":       http.StatusNotFound,
		"/batches":             http.StatusUnauthorized,
		"/batches/NOPE/events": http.StatusUnauthorized,
		"/ui":                  http.StatusUnauthorized,
	} {
		code, body := authRequest(t, env, http.MethodGet, path, "", none)
		require.Equal(t, want, code, "%s: %s", path, body)
	}
}

// TestIntakeSignature: with INGEST_SIGNING_SECRET, a request signed
// within the window is accepted once; a replay, a stale or future
// timestamp, a changed body, another route's or method's signature, a v1
// signature of the body alone and another secret's signature are refused,
// each saying why, and nothing is created by a refused request.
func TestIntakeSignature(t *testing.T) {
	t.Parallel()
	const secret = "intake-signing-secret-for-tests"
	env := testenv.New(t, testenv.Options{NoWorkers: true, Settings: map[string]string{"INGEST_SIGNING_SECRET": secret}})
	env.PutObject(t, exampleManifestKey, []byte(exampleManifest))
	body := exampleMessage
	post := func(sig string) (int, string) {
		return authRequest(t, env, http.MethodPost, "/batches", body, func(r *http.Request) { r.Header.Set(intakesig.Header, sig) })
	}
	now := time.Now()
	sign := func(secret, method, path, body string, at time.Time) string {
		return intakesig.Sign(secret, intakesig.Request{Method: method, Path: path, Body: []byte(body)}, at)
	}
	m := hmac.New(sha256.New, []byte(secret))
	m.Write([]byte(strconv.FormatInt(now.Unix(), 10) + "." + body))
	v1 := "t=" + strconv.FormatInt(now.Unix(), 10) + ",v1=" + hex.EncodeToString(m.Sum(nil))

	for name, tc := range map[string]struct{ sig, want string }{
		"Stale":       {sign(secret, "POST", "/batches", body, now.Add(-6*time.Minute)), "more than 5m0s from the server's time"},
		"Future":      {sign(secret, "POST", "/batches", body, now.Add(6*time.Minute)), "more than 5m0s from the server's time"},
		"OtherSecret": {sign("another-secret-entirely", "POST", "/batches", body, now), "no v2 signature matches the request"},
		"OtherBody":   {sign(secret, "POST", "/batches", body+" ", now), "no v2 signature matches the request"},
		"OtherRoute":  {sign(secret, "POST", "/documents", body, now), "no v2 signature matches the request"},
		"OtherMethod": {sign(secret, "PUT", "/batches", body, now), "no v2 signature matches the request"},
		"V1":          {v1, "v1 signatures (of the body alone) are no longer accepted"},
		"NoV2":        {"t=123", "want t=UNIX_SECONDS,v2=HEX"},
		"NotKeyValue": {"garbage", "is not key=value"},
		"NotHex":      {"t=1,v2=zz", "v2 must be 64 hex digits"},
	} {
		code, msg := post(tc.sig)
		require.Equal(t, http.StatusUnauthorized, code, "%s: %s", name, msg)
		require.Contains(t, msg, tc.want, name)
	}
	code, msg := authRequest(t, env, http.MethodGet, "/status/01K8RNKN488RQCG3YGG72QBZS5", "", func(r *http.Request) {
		r.Header.Set("Authorization", "Bearer "+testenv.ReadToken)
	})
	require.Equal(t, http.StatusNotFound, code, "refused requests created nothing: %s", msg)

	sig := sign(secret, "POST", "/batches", body, now)
	code, msg = post(sig)
	require.Equal(t, http.StatusAccepted, code, msg)
	code, msg = post(sig)
	require.Equal(t, http.StatusUnauthorized, code, msg)
	require.Contains(t, msg, "this signature was used before (a replay)")

	// Signed anew, the same message is a harmless repeat (200).
	code, msg = post(sign(secret, "POST", "/batches", body, now.Add(time.Second)))
	require.Equal(t, http.StatusOK, code, msg)
	// The ingest token opens intake too; the admin token does not.
	code, msg = authRequest(t, env, http.MethodPost, "/batches", body, func(r *http.Request) {
		r.Header.Set("Authorization", "Bearer "+testenv.AdminToken)
		r.Header.Set(intakesig.Header, sign(secret, "POST", "/batches", body, now.Add(2*time.Second)))
	})
	require.Equal(t, http.StatusUnauthorized, code, "a wrong bearer token is not rescued by a signature: %s", msg)
}
