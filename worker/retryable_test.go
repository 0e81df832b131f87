package worker_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/arke-institute/orchestrator/blob"
	"github.com/arke-institute/orchestrator/worker"
)

// TestRetryable classifies failures as spec 002 and 004 do: outages and
// timeouts are transient, bad input is permanent.
func TestRetryable(t *testing.T) {
	t.Parallel()
	refused := &url.Error{Op: "Get", URL: "http://s3.test/x", Err: &net.OpError{Op: "dial", Net: "tcp", Err: os.NewSyscallError("connect", errors.New("connection refused"))}}
	for _, tc := range []struct {
		name string
		err  error
		want bool
	}{
		{"S3Unavailable", fmt.Errorf("downloading input: %w", &worker.HTTPError{StatusCode: http.StatusServiceUnavailable}), true},
		{"S3InternalError", &worker.HTTPError{StatusCode: http.StatusInternalServerError}, true},
		{"S3SlowDown429", &worker.HTTPError{StatusCode: http.StatusTooManyRequests}, true},
		{"Timeout", fmt.Errorf("uploading: %w", context.DeadlineExceeded), true},
		{"ConnectionRefused", fmt.Errorf("downloading input: %w", refused), true},
		{"OrchestratorDownForURLs", fmt.Errorf("asking for URLs: %w", &worker.StatusError{Code: http.StatusServiceUnavailable}), true},
		{"MarkedTransient", worker.Transient(errors.New("interrupted (received SIGTERM)")), true},
		{"InputMissing", fmt.Errorf("downloading input: %w", blob.ErrNotFound), false},
		{"Forbidden", &worker.HTTPError{StatusCode: http.StatusForbidden}, false},
		{"URLsRefused", &worker.StatusError{Code: http.StatusConflict}, false},
		{"DecodeError", errors.New("decoding TIFF staging/B/x.tif: unsupported compression"), false},
		{"NotImplemented", &worker.HTTPError{StatusCode: http.StatusNotImplemented}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			require.Equal(t, tc.want, worker.Retryable(tc.err), "%v", tc.err)
		})
	}
	require.NoError(t, worker.Transient(nil))
}

// TestCallbackRetryWindow: a callback is retried for the window while the
// orchestrator answers 503 (a database restart), and delivered once it
// answers; past the window it gives up. The retries are logged without
// the token.
func TestCallbackRetryWindow(t *testing.T) {
	t.Parallel()
	body := map[string]string{"status": "success"}

	t.Run("DeliveredWithinWindow", func(t *testing.T) {
		t.Parallel()
		o := newOrchestrator(t, 503, 503, 503, 503, 503, 503, 200)
		cb := o.callback()
		cb.Backoff = worker.Backoff{Initial: time.Millisecond, Max: 10 * time.Millisecond, Window: 10 * time.Second}
		var logs logBuffer
		cb.Logger = logs.logger()
		require.NoError(t, cb.Post(t.Context(), body), "more attempts than a fixed count would allow, within the window")
		require.Len(t, o.requests(), 7)
		require.Contains(t, logs.String(), "callback failed, retrying")
		require.NotContains(t, logs.String(), cb.Token)
	})

	t.Run("GivesUpAfterWindow", func(t *testing.T) {
		t.Parallel()
		o := newOrchestrator(t, 503)
		cb := o.callback()
		cb.Backoff = worker.Backoff{Initial: 10 * time.Millisecond, Max: 50 * time.Millisecond, Window: 300 * time.Millisecond}
		start := time.Now()
		err := cb.Post(t.Context(), body)
		elapsed := time.Since(start)
		require.ErrorContains(t, err, "not delivered after")
		require.GreaterOrEqual(t, elapsed, 300*time.Millisecond, "retried for the whole window")
		require.Less(t, elapsed, 5*time.Second, "and no longer")
		require.Greater(t, len(o.requests()), 3)
	})

	t.Run("WindowFromEnv", func(t *testing.T) {
		t.Parallel()
		e := baseEnv()
		e["CALLBACK_RETRY_WINDOW"] = "60000"
		cfg, err := worker.ParseEnv(worker.KindTIFF, env(e))
		require.NoError(t, err)
		require.Equal(t, time.Minute, cfg.Callback.Backoff.Window)
		e["CALLBACK_RETRY_WINDOW"] = "soon"
		_, err = worker.ParseEnv(worker.KindTIFF, env(e))
		require.ErrorContains(t, err, `CALLBACK_RETRY_WINDOW: "soon" is not a positive number of milliseconds`)
	})
}

// logBuffer collects a logger's text output, safely for concurrent use.
type logBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *logBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *logBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

func (b *logBuffer) logger() *slog.Logger { return slog.New(slog.NewTextHandler(b, nil)) }
