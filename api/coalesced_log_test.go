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

	"github.com/arke-institute/orchestrator/service"
)

// TestExpected503sAreLoggedCoalesced: while the database is away every
// request is answered 503 with Retry-After, but the log gets one warning
// per coalescedLogEvery saying how many requests it stands for, not an
// error line per request. Unexpected errors are still logged one by one.
func TestExpected503sAreLoggedCoalesced(t *testing.T) {
	var buf bytes.Buffer
	now := time.Date(2026, 11, 24, 12, 0, 0, 0, time.UTC)
	clock := func() time.Time { return now }
	h := &handlers{log: slog.New(slog.NewJSONHandler(&buf, nil)), dbAway: coalescedLog{now: clock}, busy: coalescedLog{now: clock}}
	e := echo.New()
	answer := func(err error) *httptest.ResponseRecorder {
		rec := httptest.NewRecorder()
		c := e.NewContext(httptest.NewRequest(http.MethodPost, "/callback/B/tiff_t1", nil), rec)
		c.SetPath("/callback/:batchId/:taskId")
		h.errorHandler(err, c)
		return rec
	}
	type line struct {
		Level    string `json:"level"`
		Msg      string `json:"msg"`
		Requests int    `json:"requests"`
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
	require.Equal(t, []line{{Level: "WARN", Msg: "answering 503: the database is unavailable; try again shortly", Requests: 1}}, lines(),
		"the first request of an outage is logged at once, the rest held")

	now = now.Add(coalescedLogEvery)
	answer(away)
	require.Equal(t, []line{{Level: "WARN", Msg: "answering 503: the database is unavailable; try again shortly", Requests: 100}}, lines(),
		"the next line stands for the 99 held and this one")

	answer(service.ErrBusy)
	answer(service.ErrBusy)
	require.Len(t, lines(), 1, "a full callback queue has its own coalesced line")

	answer(errUnexpected)
	answer(errUnexpected)
	require.Equal(t, []line{{Level: "ERROR", Msg: "request failed"}, {Level: "ERROR", Msg: "request failed"}}, lines(),
		"unexpected errors are each logged")
}

var errUnexpected = errors.New("disk on fire")
