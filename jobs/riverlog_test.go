package jobs

import (
	"bytes"
	"context"
	"log/slog"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestQuieterLowersRiverInformationToDebug(t *testing.T) {
	for _, tc := range []struct {
		name    string
		level   slog.Level // the log's least level
		written []string
	}{
		{"AtInfo", slog.LevelInfo, []string{"Elector: lost leadership", "producer: queue unreachable"}},
		{"AtDebug", slog.LevelDebug, []string{"Producer job counts", "Elector: lost leadership", "producer: queue unreachable"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var buf bytes.Buffer
			log := slog.New(quieter{slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: tc.level})}).With("component", "river")
			log.Info("Producer job counts", "queue", "default")
			log.Warn("Elector: lost leadership")
			log.ErrorContext(context.Background(), "producer: queue unreachable")
			var got []string
			for _, line := range bytes.Split(bytes.TrimSpace(buf.Bytes()), []byte("\n")) {
				require.Contains(t, string(line), "component=river")
				for _, m := range []string{"Producer job counts", "Elector: lost leadership", "producer: queue unreachable"} {
					if bytes.Contains(line, []byte(m)) {
						got = append(got, m)
					}
				}
			}
			require.Equal(t, tc.written, got)
			if tc.level == slog.LevelDebug {
				require.Contains(t, buf.String(), "level=DEBUG msg=\"Producer job counts\"")
			}
		})
	}
}
