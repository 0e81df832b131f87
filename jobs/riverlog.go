package jobs

import (
	"context"
	"log/slog"
)

// quieter lowers River's routine information ("Producer job counts" every
// 5 seconds per queue, elections, starts and stops) to debug, so that at
// LOG_LEVEL=info the log is the orchestrator's own lines and River's
// warnings and errors. A record at warning level or above passes as it is.
type quieter struct{ next slog.Handler }

// Enabled reports whether next takes records of level as Handle would pass
// them on: information at debug.
func (h quieter) Enabled(ctx context.Context, level slog.Level) bool {
	return h.next.Enabled(ctx, lowered(level))
}

// Handle passes r to next, information lowered to debug.
func (h quieter) Handle(ctx context.Context, r slog.Record) error {
	r.Level = lowered(r.Level)
	return h.next.Handle(ctx, r)
}

// WithAttrs is next's, quieted.
func (h quieter) WithAttrs(attrs []slog.Attr) slog.Handler {
	return quieter{h.next.WithAttrs(attrs)}
}

// WithGroup is next's, quieted.
func (h quieter) WithGroup(name string) slog.Handler {
	return quieter{h.next.WithGroup(name)}
}

// lowered is level, information lowered to debug.
func lowered(level slog.Level) slog.Level {
	if level >= slog.LevelInfo && level < slog.LevelWarn {
		return slog.LevelDebug
	}
	return level
}
