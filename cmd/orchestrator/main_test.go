package main

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/arke-institute/orchestrator/blob"
	"github.com/arke-institute/orchestrator/internal/harness/dbtest"
	"github.com/arke-institute/orchestrator/internal/harness/eventually"
	"github.com/arke-institute/orchestrator/internal/harness/syncbuf"
)

// testdata holds spec 001's example message and manifest. It is resolved
// before any test runs: the local S3 server started by serve changes the
// process's working directory (see package locals3).
var testdata, _ = filepath.Abs("../../manifest/testdata")

func TestServeRefusesMissingSettings(t *testing.T) {
	t.Setenv("DATABASE_URL", "")
	err := run(context.Background(), []string{"serve"}, io.Discard, io.Discard)
	require.EqualError(t, err, "missing required setting: DATABASE_URL")

	t.Setenv("DATABASE_URL", "postgres://localhost/x")
	t.Setenv("R2_ACCOUNT_ID", "acc")
	err = run(context.Background(), []string{"serve"}, io.Discard, io.Discard)
	require.EqualError(t, err, "missing required setting: R2_ACCESS_KEY_ID, R2_SECRET_ACCESS_KEY")
}

func TestUnknownCommand(t *testing.T) {
	var stderr bytes.Buffer
	err := run(context.Background(), []string{"frobnicate"}, io.Discard, &stderr)
	require.ErrorAs(t, err, new(usageError))
	require.Contains(t, stderr.String(), "orchestrator serve")
}

func TestServeRefusesUnknownQueue(t *testing.T) {
	var stderr bytes.Buffer
	err := run(context.Background(), []string{"serve", "-queues", "ocr,nope"}, io.Discard, &stderr)
	require.ErrorAs(t, err, new(usageError))
	require.EqualError(t, err, `no job queue "nope" (the queues are default, phase_build, webhooks, ocr)`)
}

// TestServeOnEmbeddedDefaults runs `orchestrator serve` as a newcomer would:
// an empty database (migrated on start), no R2 settings (so the local S3
// server starts), then spec 001's example batch goes from PENDING to its
// first phase, PDF_PAGES. It prints the newcomer's banner with a generated
// admin token, kept with the run.env of the operator commands.
//
// Not parallel (it uses t.Setenv): it runs before the parallel tests start
// s3test's server, since the embedded S3 gateway runs once per process at a
// time, and serve waits for its own gateway to stop before returning.
func TestServeOnEmbeddedDefaults(t *testing.T) {
	_, dbURL := dbtest.NewEmpty(t)
	listen, s3Addr := freeAddr(t), freeAddr(t)
	dataDir := t.TempDir()
	t.Setenv("DATABASE_URL", dbURL)
	t.Setenv("LOCAL_DATA_DIR", dataDir)
	t.Setenv("ADMIN_TOKEN", "")
	t.Setenv("LISTEN_ADDR", listen)
	t.Setenv("LOCAL_S3_DIR", t.TempDir())
	t.Setenv("LOCAL_S3_ADDR", s3Addr)
	t.Setenv("LOG_LEVEL", "warn")
	// A worker that exits at once: this test only looks at discovery.
	t.Setenv("LOCAL_WORKER_BIN", "/bin/true")
	for _, k := range []string{"R2_ACCOUNT_ID", "R2_ENDPOINT", "R2_ACCESS_KEY_ID", "R2_SECRET_ACCESS_KEY"} {
		t.Setenv(k, "")
	}

	ctx, cancel := context.WithCancel(context.Background())
	served := make(chan error, 1)
	var stderr syncbuf.Buffer
	go func() { served <- run(ctx, []string{"serve"}, io.Discard, &stderr) }()
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-served:
			require.NoError(t, err, "serve stops cleanly on cancel")
		case <-time.After(30 * time.Second):
			t.Error("serve did not stop within 30s of cancel")
		}
	})

	base := "http://" + listen
	awaitOK(t, served, base+"/healthz")

	require.Eventually(t, func() bool { return strings.Contains(stderr.String(), "Ctrl-C stops everything") }, 10*time.Second, 10*time.Millisecond)
	token, err := os.ReadFile(filepath.Join(dataDir, "admin-token"))
	require.NoError(t, err)
	tok := strings.TrimSpace(string(token))
	banner := stderr.String()
	// Not a terminal: the banner says where the token is, not what.
	for _, name := range []string{"admin-token", "read-token", "ingest-token"} {
		require.Contains(t, banner, "                 in "+filepath.Join(dataDir, name)+" (shown here on a terminal only)\n")
	}
	require.Contains(t, banner, "Dashboard      "+base+"/ui\n")
	require.Contains(t, banner, "S3             http://"+s3Addr+"   access key local, secret key in ")
	require.NotContains(t, banner, tok, "the token is never logged")
	runEnv, err := os.ReadFile(filepath.Join(dataDir, "run.env"))
	require.NoError(t, err)
	require.Contains(t, string(runEnv), "ORCHESTRATOR_URL="+base+"\n")
	require.Contains(t, string(runEnv), "DATABASE_URL="+dbURL+"\n")
	require.Contains(t, string(runEnv), "LOCAL_S3_ADDR="+s3Addr+"\n")
	require.Contains(t, string(runEnv), "INGEST_TOKEN_FILE="+filepath.Join(dataDir, "ingest-token")+"\n")
	req, err := http.NewRequest(http.MethodPost, base+"/admin/reset/NOPE", nil)
	require.NoError(t, err)
	req.Header.Set("Authorization", "Bearer "+tok)
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, http.StatusNotFound, resp.StatusCode, "the generated token is the admin's")

	// The upstream service puts the manifest in the staging bucket, which
	// serve created on its local S3 server.
	store, err := blob.NewS3(blob.S3Config{Endpoint: "http://" + s3Addr, AccessKeyID: "local", SecretAccessKey: "localsecret"})
	require.NoError(t, err)
	manifest, err := os.ReadFile(filepath.Join(testdata, "manifest.json"))
	require.NoError(t, err)
	require.NoError(t, store.Put(ctx, "arke-staging", "staging/01K8RNKN488RQCG3YGG72QBZS5/_manifest.json",
		bytes.NewReader(manifest), int64(len(manifest)), "application/json"))

	msg, err := os.ReadFile(filepath.Join(testdata, "queue_message.json"))
	require.NoError(t, err)
	resp, err = http.Post(base+"/batches", "application/json", bytes.NewReader(msg))
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, http.StatusUnauthorized, resp.StatusCode, "intake needs the ingest token")
	ingestToken, err := os.ReadFile(filepath.Join(dataDir, "ingest-token"))
	require.NoError(t, err)
	readToken, err := os.ReadFile(filepath.Join(dataDir, "read-token"))
	require.NoError(t, err)
	req, err = http.NewRequest(http.MethodPost, base+"/batches", bytes.NewReader(msg))
	require.NoError(t, err)
	req.Header.Set("Authorization", "Bearer "+strings.TrimSpace(string(ingestToken)))
	req.Header.Set("Content-Type", "application/json")
	resp, err = http.DefaultClient.Do(req)
	require.NoError(t, err)
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	require.Equal(t, http.StatusAccepted, resp.StatusCode, string(body))
	require.JSONEq(t, `{"batch_id": "01K8RNKN488RQCG3YGG72QBZS5", "status": "PENDING"}`, string(body))

	var st struct {
		Status   string         `json:"status"`
		Progress map[string]int `json:"progress"`
		Error    *string        `json:"error"`
	}
	eventually.True(t, 30*time.Second, "the batch to leave PENDING", func() bool {
		req, err := http.NewRequest(http.MethodGet, base+"/status/01K8RNKN488RQCG3YGG72QBZS5", nil)
		require.NoError(t, err)
		req.SetBasicAuth("reader", strings.TrimSpace(string(readToken)))
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		require.NoError(t, json.NewDecoder(resp.Body).Decode(&st))
		resp.Body.Close()
		return st.Status != "PENDING"
	})
	require.Equal(t, "PDF_PAGES", st.Status, "error: %v", st.Error)
	require.Equal(t, map[string]int{"tasks_total": 1, "tasks_completed": 0, "tasks_failed": 0}, st.Progress)
}

func freeAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer l.Close()
	return l.Addr().String()
}

// awaitOK polls url until it answers 200, failing fast if serve exits.
func awaitOK(t *testing.T, served <-chan error, url string) {
	t.Helper()
	eventually.True(t, 60*time.Second, url+" to answer 200", func() bool {
		select {
		case err := <-served:
			t.Fatalf("serve exited before answering: %v", err)
		default:
		}
		resp, err := http.Get(url)
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	})
}

func init() {
	// The tests above must not pick up a developer's real settings.
	for _, k := range []string{"R2_BUCKET", "ARCHIVE_BUCKET", "LOG_FORMAT"} {
		os.Unsetenv(k)
	}
}
