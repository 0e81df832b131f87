package main

import (
	"bytes"
	"encoding/json"
	"io"
	"log/slog"
	"os"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/arke-institute/orchestrator/config"
)

// TestLoggerFormat holds that logs are JSON unless LOG_FORMAT says text or,
// with LOG_FORMAT unset, stderr is a terminal, and that LOG_LEVEL applies.
func TestLoggerFormat(t *testing.T) {
	t.Parallel()
	line := func(format, level string, w io.Writer, read func() string) string {
		t.Helper()
		cfg := &config.Config{LogFormat: format, LogLevel: level}
		l := newLogger(cfg, w)
		l.Debug("hidden unless debug")
		l.Info("hello", "batch_id", "B1")
		return read()
	}
	t.Run("JSONByDefault", func(t *testing.T) {
		var buf bytes.Buffer
		out := line("", "info", &buf, buf.String)
		var rec map[string]any
		require.NoError(t, json.Unmarshal([]byte(out), &rec), out)
		require.Equal(t, "B1", rec["batch_id"])
		require.NotContains(t, out, "hidden")
	})
	t.Run("JSONOnAPipe", func(t *testing.T) {
		r, w, err := os.Pipe()
		require.NoError(t, err)
		out := line("", "info", w, func() string {
			require.NoError(t, w.Close())
			b, err := io.ReadAll(r)
			require.NoError(t, err)
			return string(b)
		})
		require.True(t, strings.HasPrefix(out, "{"), out)
	})
	t.Run("TextWhenAsked", func(t *testing.T) {
		var buf bytes.Buffer
		out := line("text", "debug", &buf, buf.String)
		require.Contains(t, out, "batch_id=B1")
		require.Contains(t, out, "hidden unless debug")
	})
	t.Run("TextOnATerminal", func(t *testing.T) {
		tty, err := os.OpenFile("/dev/ptmx", os.O_RDWR, 0)
		if err != nil {
			t.Skipf("no pseudo-terminal: %v", err)
		}
		defer tty.Close()
		l := newLogger(&config.Config{LogLevel: "info"}, tty)
		_, isText := l.Handler().(*slog.TextHandler)
		require.True(t, isText, "a terminal gets text")
	})
}
