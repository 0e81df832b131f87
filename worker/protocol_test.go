package worker_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/arke-institute/orchestrator/worker"
	"github.com/arke-institute/orchestrator/worker/protocol"
)

// TestWorkerSendsItsProtocol: a worker sends its protocol version with
// its callbacks and lease requests; one set to version 1 sends none, as
// the workers of version 1 did. It reads its orchestrator's from
// WORKER_PROTOCOL, version 1 when unset.
func TestWorkerSendsItsProtocol(t *testing.T) {
	t.Parallel()
	var (
		mu   sync.Mutex
		sent = map[string][]string{}
	)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		sent[r.URL.Path] = append(sent[r.URL.Path], r.Header.Get(protocol.Header))
		mu.Unlock()
		_, _ = w.Write([]byte(`{"done": true}`))
	}))
	t.Cleanup(srv.Close)
	ctx := context.Background()

	require.NoError(t, (&worker.Callback{URL: srv.URL + "/callback", Token: "t"}).Post(ctx, map[string]string{"status": "success"}))
	require.NoError(t, (&worker.Callback{URL: srv.URL + "/callback", Token: "t", Protocol: protocol.V1}).Post(ctx, map[string]string{"status": "success"}))
	l, err := worker.Pool{LeaseURL: srv.URL + "/lease", Token: "p", Backoff: worker.DefaultBackoff}.Lease(ctx)
	require.NoError(t, err)
	require.True(t, l.Done)
	mu.Lock()
	require.Equal(t, map[string][]string{"/callback": {"2", ""}, "/lease": {"2"}}, sent)
	mu.Unlock()

	for _, tc := range []struct {
		value string
		want  int
	}{{"", protocol.V1}, {"2", protocol.V2}, {"3", 3}} {
		cfg, _ := worker.ParseEnv(worker.KindTIFF, func(k string) string { return map[string]string{protocol.EnvVar: tc.value}[k] })
		require.Equal(t, tc.want, cfg.Orchestrator, "WORKER_PROTOCOL=%q", tc.value)
	}
	_, err = worker.ParseEnv(worker.KindTIFF, func(k string) string { return map[string]string{protocol.EnvVar: "two"}[k] })
	require.ErrorContains(t, err, `WORKER_PROTOCOL: worker protocol "two" is not a version`)
}
