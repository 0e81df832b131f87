package api_test

import (
	"context"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/arke-institute/orchestrator/api"
	"github.com/arke-institute/orchestrator/internal/harness/testenv"
)

// TestFailedCredentialsLimited: a client may fail DefaultFailureBurst
// credentials; past that it is answered 429, whatever it presents, until
// its budget refills, while other clients and /healthz are not held up.
// Behind a trusted proxy the client is the one its header names; without
// CLIENT_IP_HEADER the header names nobody.
func TestFailedCredentialsLimited(t *testing.T) {
	t.Parallel()
	env := testenv.New(t, testenv.Options{NoWorkers: true})
	serve := func(header string) string {
		ctx, cancel := context.WithCancel(context.Background())
		t.Cleanup(cancel)
		srv := httptest.NewServer(api.New(api.Config{Pool: env.Pool, Logger: slog.New(slog.DiscardHandler), Context: ctx,
			Credentials: api.Credentials{ReadToken: testenv.ReadToken}, ClientIPHeader: header}))
		t.Cleanup(srv.Close)
		return srv.URL
	}
	from := func(addr, token string) func(*http.Request) {
		return func(r *http.Request) {
			r.Header.Set("Fly-Client-IP", addr)
			r.Header.Set("Authorization", "Bearer "+token)
		}
	}

	base := serve("Fly-Client-IP")
	for i := range api.DefaultFailureBurst {
		resp, body := send(t, http.MethodGet, base+"/batches", "", from("203.0.113.1", "wrong"))
		require.Equal(t, http.StatusUnauthorized, resp.StatusCode, "failure %d: %s", i+1, body)
	}
	for _, token := range []string{"wrong", testenv.ReadToken} {
		resp, body := send(t, http.MethodGet, base+"/batches", "", from("203.0.113.1", token))
		require.Equal(t, http.StatusTooManyRequests, resp.StatusCode, body)
		require.Equal(t, "1", resp.Header.Get("Retry-After"))
		require.JSONEq(t, `{"error": "too many failed credentials from this address; try again in 1 s"}`, body)
	}
	// A forged callback is a failure too, and refused before its body.
	resp, _ := send(t, http.MethodPost, base+"/callback/B/tiff_t000", `{"status": "success"}`, from("203.0.113.1", "x.y"))
	require.Equal(t, http.StatusTooManyRequests, resp.StatusCode)

	resp, body := send(t, http.MethodGet, base+"/batches", "", from("203.0.113.2", testenv.ReadToken))
	require.Equal(t, http.StatusOK, resp.StatusCode, "another client: %s", body)
	resp, _ = send(t, http.MethodGet, base+"/healthz", "", from("203.0.113.1", "wrong"))
	require.Equal(t, http.StatusOK, resp.StatusCode, "/healthz is never held up")
	// One failure a second refills.
	require.Eventually(t, func() bool {
		resp, _ := send(t, http.MethodGet, base+"/batches", "", from("203.0.113.1", testenv.ReadToken))
		return resp.StatusCode == http.StatusOK
	}, 5*time.Second, 100*time.Millisecond)

	// Without CLIENT_IP_HEADER, the header does not make one client many.
	base = serve("")
	for i := range api.DefaultFailureBurst {
		resp, _ := send(t, http.MethodGet, base+"/batches", "", from("203.0.113.100", "wrong"))
		require.Equal(t, http.StatusUnauthorized, resp.StatusCode, "failure %d", i+1)
	}
	resp, _ = send(t, http.MethodGet, base+"/batches", "", from("203.0.113.101", testenv.ReadToken))
	require.Equal(t, http.StatusTooManyRequests, resp.StatusCode)
}

// TestLongIDsRefusedAtOnce: a path whose batch or task id is longer than
// any there is gets 404 before its credential is checked.
func TestLongIDsRefusedAtOnce(t *testing.T) {
	t.Parallel()
	env := testenv.New(t, testenv.Options{NoWorkers: true})
	long := strings.Repeat("x", 4096)
	for _, path := range []string{"/callback/" + long + "/tiff_t000", "/callback/B/tiff_" + long, "/callback/B/" + long + "/urls",
		"/status/" + long} {
		code, body := authRequest(t, env, http.MethodPost, path, `{}`, nil)
		if strings.HasPrefix(path, "/status") {
			code, body = authRequest(t, env, http.MethodGet, path, "", nil)
		}
		require.Equal(t, http.StatusNotFound, code, body)
		require.JSONEq(t, `{"error": "not found: a batch id is at most 128 bytes, a task id at most 128"}`, body)
	}
}
