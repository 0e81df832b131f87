package logcoalesce

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

type line struct {
	Level    string `json:"level"`
	Msg      string `json:"msg"`
	HeldBack int    `json:"held_back"`
	Client   string `json:"client"`
}

func read(t *testing.T, buf *bytes.Buffer) []line {
	t.Helper()
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

// TestHandler: a warning repeated within the interval is written once,
// and the next one written says how many were held back; other messages,
// and records below warning level, pass as they come. Handlers derived
// with WithAttrs share the count.
func TestHandler(t *testing.T) {
	var buf bytes.Buffer
	h := New(slog.NewJSONHandler(&buf, &slog.HandlerOptions{Level: slog.LevelDebug}), 5*time.Second)
	base := slog.New(h)
	derived := base.With("client", "c1")
	t0 := time.Date(2026, 11, 24, 12, 0, 0, 0, time.UTC)
	log := func(l *slog.Logger, level slog.Level, msg string, at time.Duration) {
		r := slog.NewRecord(t0.Add(at), level, msg, 0)
		require.NoError(t, l.Handler().Handle(context.Background(), r))
	}

	for i := range 50 {
		log(base, slog.LevelError, "producer: Error fetching jobs", time.Duration(i)*50*time.Millisecond)
		log(derived, slog.LevelError, "producer: Error fetching jobs", time.Duration(i)*50*time.Millisecond)
		log(base, slog.LevelInfo, "job done", 0)
	}
	log(base, slog.LevelWarn, "notifier: reconnecting", time.Second)
	got := read(t, &buf)
	require.Equal(t, line{Level: "ERROR", Msg: "producer: Error fetching jobs"}, got[0])
	require.Len(t, got, 1+50+1, "one error, every info line, the other warning")
	require.Equal(t, line{Level: "WARN", Msg: "notifier: reconnecting"}, got[51])

	log(derived, slog.LevelError, "producer: Error fetching jobs", 5*time.Second)
	require.Equal(t, []line{{Level: "ERROR", Msg: "producer: Error fetching jobs", HeldBack: 99, Client: "c1"}}, read(t, &buf),
		"the 99 held back across both loggers are counted on the next line written")
	log(base, slog.LevelError, "producer: Error fetching jobs", 11*time.Second)
	require.Equal(t, []line{{Level: "ERROR", Msg: "producer: Error fetching jobs"}}, read(t, &buf), "none held back since")
}

// TestHandlerForgetsOldMessages: the messages remembered stay bounded.
func TestHandlerForgetsOldMessages(t *testing.T) {
	h := New(slog.NewJSONHandler(&bytes.Buffer{}, nil), time.Second)
	t0 := time.Date(2026, 11, 24, 12, 0, 0, 0, time.UTC)
	for i := range 3 * maxKeys {
		r := slog.NewRecord(t0.Add(time.Duration(i)*time.Second), slog.LevelWarn, "message "+strings.Repeat("x", i%7)+string(rune('a'+i%26))+time.Duration(i).String(), 0)
		require.NoError(t, h.Handle(context.Background(), r))
	}
	require.LessOrEqual(t, len(h.state.seen), maxKeys)
}
