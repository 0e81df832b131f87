package client_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/arke-institute/orchestrator/client"
	"github.com/arke-institute/orchestrator/intakesig"
	"github.com/arke-institute/orchestrator/internal/fakes/fakefly"
	"github.com/arke-institute/orchestrator/internal/harness/testenv"
	"github.com/arke-institute/orchestrator/manifest"
)

// queueMessage is the message of a batch whose manifest lists files under
// staging/{id}/, which it uploads to the test's bucket.
func queueMessage(t *testing.T, env *testenv.Env, id string, files ...manifest.FileInfo) manifest.QueueMessage {
	t.Helper()
	prefix := "staging/" + id + "/"
	groups := make([]manifest.DirectoryGroup, 0, len(files))
	for _, f := range files {
		f.R2Key, f.LogicalPath = prefix+f.FileName, "/"+f.FileName
		groups = append(groups, manifest.DirectoryGroup{DirectoryPath: "/", ProcessingConfig: manifest.ProcessingConfig{Pinax: true},
			Files: []manifest.FileInfo{f}})
	}
	m := manifest.Build(id, groups)
	body, err := json.Marshal(m)
	require.NoError(t, err)
	env.PutObject(t, prefix+"_manifest.json", body)
	now := time.Now().UTC()
	return manifest.QueueMessage{
		BatchID: id, ManifestR2Key: prefix + "_manifest.json", R2Prefix: prefix,
		Uploader: "tester@arke.institute", RootPath: "/tests", ParentPI: "00000000000000000000000000",
		TotalFiles: m.TotalFiles, TotalBytes: m.TotalBytes, UploadedAt: now, FinalizedAt: now,
		Metadata: map[string]any{"test": t.Name()},
	}
}

// requireAPIError requires err to be an *Error with the status code and
// message.
func requireAPIError(t *testing.T, err error, code int, msg string) *client.Error {
	t.Helper()
	var apiErr *client.Error
	require.ErrorAs(t, err, &apiErr)
	require.Equal(t, code, apiErr.StatusCode, "%v", err)
	require.Equal(t, msg, apiErr.Message)
	require.Equal(t, code, client.StatusCode(err))
	return apiErr
}

// TestClientAgainstOrchestrator runs every call against a real
// orchestrator (real Postgres, S3 server and API; machines that never call
// back): the answers, decoded, and each refusal with the server's message.
func TestClientAgainstOrchestrator(t *testing.T) {
	t.Parallel()
	env := testenv.New(t, testenv.Options{Behave: func(fakefly.Launch) fakefly.Behavior { return fakefly.Behavior{Hang: true} }})
	c, err := client.New(client.Config{URL: env.Server.URL + "/", AdminToken: testenv.AdminToken, ReadToken: testenv.ReadToken, IngestToken: testenv.IngestToken})
	require.NoError(t, err)
	require.Equal(t, env.Server.URL, c.URL())
	ctx := context.Background()
	require.NoError(t, c.Health(ctx))

	t.Run("DocumentsToDone", func(t *testing.T) {
		// No image: no phase has work, so the batch goes straight to DONE.
		msg := queueMessage(t, env, "DOCS", manifest.FileInfo{FileName: "notes.txt", FileSize: 5, ContentType: "text/plain"})
		acc, err := c.Submit(ctx, msg)
		require.NoError(t, err)
		require.Equal(t, client.Receipt{BatchID: "DOCS", Status: client.StatusPending, Created: true}, acc)

		st, err := c.Await(ctx, "DOCS", 10*time.Millisecond, func(st client.Status) bool { return st.Ingest.Status == client.IngestDelivered })
		require.NoError(t, err)
		require.Equal(t, client.StatusDone, st.Status)
		require.True(t, st.Ended())
		require.NotNil(t, st.CompletedAt)
		require.NotNil(t, st.Ingest.DeliveredAt)
		require.EqualValues(t, 1, st.Ingest.Attempts)
		// Every field of the server's document is a field of Status.
		again, err := json.Marshal(st)
		require.NoError(t, err)
		require.JSONEq(t, string(st.Raw), string(again))

		// A redelivery changes nothing and says so.
		acc, err = c.Submit(ctx, msg)
		require.NoError(t, err)
		require.Equal(t, client.Receipt{BatchID: "DOCS", Status: client.StatusDone, Created: false}, acc)

		_, err = c.Reset(ctx, "DOCS")
		_ = requireAPIError(t, err, http.StatusConflict, "conflict: batch DOCS is DONE; there is nothing to reset")
		_, err = c.Retry(ctx, "DOCS")
		_ = requireAPIError(t, err, http.StatusConflict, "conflict: batch DOCS is DONE with nothing failed; there is nothing to retry")
	})

	t.Run("ResetAndRetry", func(t *testing.T) {
		_, err := c.Submit(ctx, queueMessage(t, env, "SCAN", manifest.FileInfo{FileName: "a.tif", FileSize: 10, ContentType: "image/tiff"}))
		require.NoError(t, err)
		st, err := c.Await(ctx, "SCAN", 10*time.Millisecond, func(st client.Status) bool {
			return len(st.Phases) > 0 && st.Phases[0].TasksProcessing > 0 || st.Ended()
		})
		require.NoError(t, err)
		require.Equal(t, "TIFF_CONVERSION", st.Status, "error: %v", st.Error)
		require.Equal(t, []client.PhaseProgress{{Phase: "TIFF_CONVERSION", Executor: "machine", Unit: "tasks", TasksTotal: 1, TasksProcessing: 1}}, st.Phases)
		again, err := json.Marshal(st)
		require.NoError(t, err)
		require.JSONEq(t, string(st.Raw), string(again))

		// The machine never calls back: waiting ends with the context,
		// with the last status read.
		short, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
		defer cancel()
		last, err := c.Await(short, "SCAN", 10*time.Millisecond, client.Status.Ended)
		require.ErrorIs(t, err, context.DeadlineExceeded)
		require.Equal(t, "TIFF_CONVERSION", last.Status)

		_, err = c.Retry(ctx, "SCAN")
		_ = requireAPIError(t, err, http.StatusConflict, "conflict: batch SCAN is running TIFF_CONVERSION with no failed work; there is nothing to retry")

		st, err = c.Reset(ctx, "SCAN")
		require.NoError(t, err)
		require.Equal(t, client.StatusError, st.Status)
		require.Equal(t, "Manually reset by admin", *st.Error)
		again, err = json.Marshal(st)
		require.NoError(t, err)
		require.JSONEq(t, string(st.Raw), string(again))

		st, err = c.Retry(ctx, "SCAN")
		require.NoError(t, err)
		require.NotEqual(t, client.StatusError, st.Status)
		require.Nil(t, st.Error)
	})

	t.Run("Refusals", func(t *testing.T) {
		_, err := c.Status(ctx, "NOPE")
		apiErr := requireAPIError(t, err, http.StatusNotFound, "batch NOPE: not found")
		require.Equal(t, "GET /status/NOPE answered 404 Not Found: batch NOPE: not found", apiErr.Error())
		_, err = c.Reset(ctx, "NOPE")
		_ = requireAPIError(t, err, http.StatusNotFound, "batch NOPE: not found")

		wrong, err := client.New(client.Config{URL: env.Server.URL, AdminToken: "wrong"})
		require.NoError(t, err)
		_, err = wrong.Retry(ctx, "SCAN")
		_ = requireAPIError(t, err, http.StatusUnauthorized, "missing or wrong admin credential")
		noToken, err := client.New(client.Config{URL: env.Server.URL})
		require.NoError(t, err)
		_, err = noToken.Reset(ctx, "SCAN")
		_ = requireAPIError(t, err, http.StatusUnauthorized, "missing or wrong admin credential")
		_, err = noToken.Status(ctx, "SCAN")
		_ = requireAPIError(t, err, http.StatusUnauthorized, "missing or wrong read credential (READ_TOKEN or ADMIN_TOKEN)")
		adminOnly, err := client.New(client.Config{URL: env.Server.URL, AdminToken: testenv.AdminToken})
		require.NoError(t, err)
		_, err = adminOnly.Submit(ctx, queueMessage(t, env, "BY-ADMIN", manifest.FileInfo{FileName: "a.txt", FileSize: 1, ContentType: "text/plain"}))
		_ = requireAPIError(t, err, http.StatusUnauthorized, "missing or wrong ingest credential: send the ingest token (Authorization: Bearer) or sign the body (X-Signature); the admin and read tokens do not open intake")

		bad := queueMessage(t, env, "BAD", manifest.FileInfo{FileName: "a.txt", FileSize: 1, ContentType: "text/plain"})
		bad.ManifestR2Key, bad.TotalFiles = "", -1
		_, err = c.Submit(ctx, bad)
		_ = requireAPIError(t, err, http.StatusBadRequest,
			"invalid batch message: manifest_r2_key is required; total_files must be a non-negative integer, got -1")
	})
}

// fakeAPI answers every request with code and body, and records the
// requests.
type fakeAPI struct {
	*httptest.Server
	mu     sync.Mutex
	reqs   []*http.Request
	bodies [][]byte
	code   int
	body   string
}

func newFakeAPI(t *testing.T, code int, body string) *fakeAPI {
	f := &fakeAPI{code: code, body: body}
	f.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		f.mu.Lock()
		f.reqs = append(f.reqs, r)
		f.bodies = append(f.bodies, b)
		code, body := f.code, f.body
		f.mu.Unlock()
		w.WriteHeader(code)
		fmt.Fprint(w, body)
	}))
	t.Cleanup(f.Close)
	return f
}

// answer changes the answer to the next requests.
func (f *fakeAPI) answer(code int, body string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.code, f.body = code, body
}

func (f *fakeAPI) last() *http.Request {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.reqs[len(f.reqs)-1]
}

// TestErrors: a refusal is an *Error carrying the status and the server's
// message, whatever the shape of the body; a success without the expected
// document is an error too.
func TestErrors(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	for name, tc := range map[string]struct {
		code          int
		body, message string
		text          string // Error()
	}{
		"ErrorBody":  {http.StatusConflict, `{"error": "conflict: batch B is DONE"}` + "\n", "conflict: batch B is DONE", "GET /status/B answered 409 Conflict: conflict: batch B is DONE"},
		"ProxyPage":  {http.StatusBadGateway, "\n  <html>bad gateway</html>\n", "<html>bad gateway</html>", "GET /status/B answered 502 Bad Gateway: <html>bad gateway</html>"},
		"OtherJSON":  {http.StatusInternalServerError, `{"message": "boom"}`, `{"message": "boom"}`, `GET /status/B answered 500 Internal Server Error: {"message": "boom"}`},
		"EmptyBody":  {http.StatusServiceUnavailable, "", "", "GET /status/B answered 503 Service Unavailable"},
		"WrongShape": {http.StatusTeapot, `["error"]`, `["error"]`, `GET /status/B answered 418 I'm a teapot: ["error"]`},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			api := newFakeAPI(t, tc.code, tc.body)
			c, err := client.New(client.Config{URL: api.URL})
			require.NoError(t, err)
			_, err = c.Status(ctx, "B")
			apiErr := requireAPIError(t, err, tc.code, tc.message)
			require.Equal(t, tc.text, err.Error())
			require.Equal(t, http.MethodGet, apiErr.Method)
			require.Equal(t, "/status/B", apiErr.Path)
			require.Equal(t, fmt.Sprintf("%d %s", tc.code, http.StatusText(tc.code)), apiErr.Status)
			require.Equal(t, strings.TrimSpace(tc.body), string(apiErr.Body))
		})
	}

	t.Run("NoStatusDocument", func(t *testing.T) {
		t.Parallel()
		for _, body := range []string{"", "not json", `{"batch_id": "B"}`} {
			api := newFakeAPI(t, http.StatusOK, body)
			c, err := client.New(client.Config{URL: api.URL})
			require.NoError(t, err)
			_, err = c.Status(ctx, "B")
			require.EqualError(t, err, "the orchestrator answered 200 OK with no status document: "+body)
			require.Zero(t, client.StatusCode(err))
			_, err = c.Submit(ctx, manifest.QueueMessage{BatchID: "B"})
			require.EqualError(t, err, "the orchestrator answered 200 OK without a status: "+body)
		}
	})

	t.Run("Unreachable", func(t *testing.T) {
		t.Parallel()
		api := newFakeAPI(t, http.StatusOK, "")
		api.Close()
		c, err := client.New(client.Config{URL: api.URL})
		require.NoError(t, err)
		err = c.Health(ctx)
		var urlErr *url.Error
		require.ErrorAs(t, err, &urlErr, "the net/http error, unchanged")
		require.Zero(t, client.StatusCode(err))
		require.False(t, errors.As(err, new(*client.Error)))
	})
}

// TestRequests: the routes, under the base URL's path, with the batch ID
// escaped; each route with its credential (ingest, read, admin) and no
// other; the queue message as the JSON body of POST /batches.
func TestRequests(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	api := newFakeAPI(t, http.StatusAccepted, `{"batch_id": "a/b", "status": "PENDING"}`)
	c, err := client.New(client.Config{URL: api.URL + "/orch/", AdminToken: "tok", ReadToken: "read-tok", IngestToken: "ingest-tok"})
	require.NoError(t, err)

	acc, err := c.Submit(ctx, manifest.QueueMessage{BatchID: "a/b", Metadata: map[string]any{}})
	require.NoError(t, err)
	require.Equal(t, client.Receipt{BatchID: "a/b", Status: "PENDING", Created: true}, acc)
	r := api.last()
	require.Equal(t, "POST /orch/batches", r.Method+" "+r.URL.EscapedPath())
	require.Equal(t, "application/json", r.Header.Get("Content-Type"))
	require.Equal(t, "Bearer ingest-tok", r.Header.Get("Authorization"))
	require.Empty(t, r.Header.Get(intakesig.Header))

	doc := `{"batch_id": "a/b", "status": "DONE", "ingest": {"status": "delivered"}}`
	api.answer(http.StatusOK, doc)
	for _, call := range []struct {
		route, auth string
		fn          func(context.Context, string) (client.Status, error)
	}{
		{"GET /orch/status/a%2Fb", "Bearer read-tok", c.Status},
		{"POST /orch/admin/reset/a%2Fb", "Bearer tok", c.Reset},
		{"POST /orch/admin/retry/a%2Fb", "Bearer tok", c.Retry},
	} {
		st, err := call.fn(ctx, "a/b")
		require.NoError(t, err)
		require.Equal(t, client.StatusDone, st.Status)
		require.Equal(t, client.IngestDelivered, st.Ingest.Status)
		require.Equal(t, doc, string(st.Raw))
		r := api.last()
		require.Equal(t, call.route, r.Method+" "+r.URL.EscapedPath())
		require.Equal(t, call.auth, r.Header.Get("Authorization"))
	}

	require.NoError(t, c.Health(ctx))
	require.Equal(t, "/orch/healthz", api.last().URL.Path)
	require.Empty(t, api.last().Header.Get("Authorization"))

	// Reads fall back on the admin token; intake without the ingest token
	// signs its body with the signing secret.
	signer, err := client.New(client.Config{URL: api.URL, AdminToken: "tok", IngestSigningSecret: "secret"})
	require.NoError(t, err)
	_, err = signer.Status(ctx, "a")
	require.NoError(t, err)
	require.Equal(t, "Bearer tok", api.last().Header.Get("Authorization"))
	api.answer(http.StatusAccepted, `{"batch_id": "a", "status": "PENDING"}`)
	_, err = signer.Submit(ctx, manifest.QueueMessage{BatchID: "a", Priority: 5})
	require.NoError(t, err)
	r = api.last()
	require.Empty(t, r.Header.Get("Authorization"))
	api.mu.Lock()
	body := api.bodies[len(api.bodies)-1]
	api.mu.Unlock()
	_, _, err = intakesig.Verify("secret", r.Header.Get(intakesig.Header), intakesig.Request{Method: r.Method, Path: r.URL.RequestURI(), Body: body}, time.Now())
	require.NoError(t, err, "the signature is of the request sent")
	require.Contains(t, string(body), `"priority":5`, "the priority is sent, under the signature")
}

func TestNew(t *testing.T) {
	t.Parallel()
	for _, u := range []string{"", "localhost:8080", "ftp://x", "http://", "http:///path"} {
		_, err := client.New(client.Config{URL: u})
		require.EqualError(t, err, fmt.Sprintf("orchestrator URL %q must be an http:// or https:// URL", u))
	}
	c, err := client.New(client.Config{URL: "https://orchestrator.example.org//"})
	require.NoError(t, err)
	require.Equal(t, "https://orchestrator.example.org", c.URL())
}
