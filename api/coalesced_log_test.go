package api

import (
	"bytes"
	"encoding/json"
	"errors"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/labstack/echo/v4"
	"github.com/stretchr/testify/require"

	"github.com/arke-institute/orchestrator/fanin"
	"github.com/arke-institute/orchestrator/logcoalesce"
)

// TestExpected503sAreLoggedCoalesced: while the database is away every
// request is answered 503 with Retry-After, but the log gets one warning
// per coalescedLogEvery (logcoalesce; the next one says how many
// were held back), not an error line per request. Unexpected errors are
// still logged one by one.
func TestExpected503sAreLoggedCoalesced(t *testing.T) {
	var buf bytes.Buffer
	log := slog.NewJSONHandler(&buf, nil)
	h := &handlers{log: slog.New(log), quiet: slog.New(logcoalesce.New(log, time.Hour))}
	e := echo.New()
	answer := func(err error) *httptest.ResponseRecorder {
		rec := httptest.NewRecorder()
		c := e.NewContext(httptest.NewRequest(http.MethodPost, "/callback/B/tiff_t1", nil), rec)
		c.SetPath("/callback/:batchId/:taskId")
		h.errorHandler(err, c)
		return rec
	}
	type line struct {
		Level string `json:"level"`
		Msg   string `json:"msg"`
	}
	lines := func() []line {
		var out []line
		for _, l := range strings.Split(strings.TrimSpace(buf.String()), "\n") {
			if l == "" {
				continue
			}
			var x line
			require.NoError(t, json.Unmarshal([]byte(l), &x))
			out = append(out, x)
		}
		buf.Reset()
		return out
	}
	away := &pgconn.ConnectError{}

	for range 100 {
		rec := answer(away)
		require.Equal(t, http.StatusServiceUnavailable, rec.Code)
		require.Equal(t, dbRetryAfter, rec.Header().Get("Retry-After"))
	}
	require.Equal(t, []line{{Level: "WARN", Msg: "answering 503: the database is unavailable; try again shortly"}}, lines(),
		"the first request of an outage is logged at once, the rest held back")

	answer(fanin.ErrBusy)
	answer(fanin.ErrBusy)
	require.Len(t, lines(), 1, "a full callback queue has its own coalesced line")

	answer(errUnexpected)
	answer(errUnexpected)
	require.Equal(t, []line{{Level: "ERROR", Msg: "request failed"}, {Level: "ERROR", Msg: "request failed"}}, lines(),
		"unexpected errors are each logged")
}

var errUnexpected = errors.New("disk on fire")
