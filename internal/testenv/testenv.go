// Package testenv assembles a whole orchestrator for end-to-end tests: a
// fresh Postgres database, a real S3 server with a bucket of the test's own,
// River workers and the HTTP API on a loopback port.
package testenv

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/stretchr/testify/require"

	"github.com/arke-institute/orchestrator/api"
	"github.com/arke-institute/orchestrator/blob"
	"github.com/arke-institute/orchestrator/internal/dbtest"
	"github.com/arke-institute/orchestrator/internal/s3test"
	"github.com/arke-institute/orchestrator/jobs"
	"github.com/arke-institute/orchestrator/manifest"
	"github.com/arke-institute/orchestrator/service"
)

// Env is a running orchestrator for one test.
type Env struct {
	Pool   *pgxpool.Pool
	S3     *s3test.Server
	Bucket string
	Store  blob.Store
	River  *river.Client[pgx.Tx]
	Server *httptest.Server
}

// Options adjust an Env.
type Options struct {
	// StoreConfig overrides the S3 client configuration, e.g. to go through a
	// fault-injecting proxy; nil uses the test S3 server directly.
	StoreConfig *blob.S3Config
}

// New starts an orchestrator for the test and stops it when the test ends.
func New(t *testing.T, opts Options) *Env {
	t.Helper()
	pool := dbtest.New(t)
	s3 := s3test.Start(t)
	bucket := s3.NewBucket(t)
	scfg := s3.Config()
	if opts.StoreConfig != nil {
		scfg = *opts.StoreConfig
	}
	store, err := blob.NewS3(scfg)
	require.NoError(t, err)

	logger := slog.New(slog.NewTextHandler(testWriter{t}, &slog.HandlerOptions{Level: slog.LevelWarn}))
	client, err := jobs.NewClient(jobs.Deps{
		Pool: pool, Store: store, Bucket: bucket, Limits: manifest.DefaultLimits(), Logger: logger,
	}, jobs.ClientConfig{FetchPollInterval: 100 * time.Millisecond})
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	require.NoError(t, client.Start(ctx))
	t.Cleanup(func() {
		stopCtx, stopCancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer stopCancel()
		_ = client.Stop(stopCtx)
		cancel()
	})

	srv := httptest.NewServer(api.New(api.Config{Service: service.New(pool, client, logger), Pool: pool, Logger: logger}))
	t.Cleanup(srv.Close)
	return &Env{Pool: pool, S3: s3, Bucket: bucket, Store: store, River: client, Server: srv}
}

// PutObject stores body at key in the test's bucket.
func (e *Env) PutObject(t *testing.T, key string, body []byte) {
	t.Helper()
	err := e.Store.Put(context.Background(), e.Bucket, key, strings.NewReader(string(body)), int64(len(body)), "application/octet-stream")
	require.NoError(t, err)
}

// Do sends a request to the API and returns the status code and body.
func (e *Env) Do(t *testing.T, method, path string, body io.Reader) (int, []byte) {
	t.Helper()
	req, err := http.NewRequest(method, e.Server.URL+path, body)
	require.NoError(t, err)
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return resp.StatusCode, b
}

// Status fetches GET /status/:id, failing the test unless it answers 200.
func (e *Env) Status(t *testing.T, id string) service.Status {
	t.Helper()
	code, body := e.Do(t, http.MethodGet, "/status/"+id, nil)
	require.Equal(t, http.StatusOK, code, "status of %s: %s", id, body)
	var st service.Status
	require.NoError(t, json.Unmarshal(body, &st))
	return st
}

// AwaitStatus polls the batch's status until it leaves PENDING (or the
// deadline passes) and returns it. Polling a condition, not sleeping a guess.
func (e *Env) AwaitStatus(t *testing.T, id string, done func(service.Status) bool) service.Status {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for {
		st := e.Status(t, id)
		if done(st) {
			return st
		}
		if time.Now().After(deadline) {
			t.Fatalf("batch %s did not reach the awaited state; last status: %+v", id, st)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// testWriter sends log output to the test log, so it shows only on failure.
type testWriter struct{ t *testing.T }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Helper()
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}
