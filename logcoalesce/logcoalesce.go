// Package logcoalesce keeps one warning repeated many times from flooding
// the log. While Postgres restarts, River logs an error for every poll of
// every producer, elector and notifier: thousands of lines in 30 s that
// hide everything else. Through Handler, a message at warning level or
// above is written at most once per interval, with how many of it were
// held back since the last one written.
package logcoalesce

import (
	"context"
	"log/slog"
	"sync"
	"time"
)

// maxKeys bounds the messages remembered: past it, those not seen for an
// interval are forgotten.
const maxKeys = 1000

// Handler wraps another slog.Handler. Records below slog.LevelWarn pass
// through untouched.
type Handler struct {
	next  slog.Handler
	every time.Duration
	state *state // shared by the handlers WithAttrs and WithGroup derive
}

type state struct {
	mu   sync.Mutex
	seen map[string]*entry
}

type entry struct {
	last time.Time // when a record of this message was last written
	held int       // records held back since
}

// New returns a Handler that writes a given message at warning level or
// above at most once per every, through next.
func New(next slog.Handler, every time.Duration) *Handler {
	return &Handler{next: next, every: every, state: &state{seen: map[string]*entry{}}}
}

// Enabled reports whether next handles level.
func (h *Handler) Enabled(ctx context.Context, level slog.Level) bool {
	return h.next.Enabled(ctx, level)
}

// Handle writes r through next, unless a record with its message was
// written less than the interval ago (by the record's time): then it is
// only counted. A record written after some were held back says how many,
// as the attribute "held_back".
func (h *Handler) Handle(ctx context.Context, r slog.Record) error {
	if r.Level < slog.LevelWarn {
		return h.next.Handle(ctx, r)
	}
	held, ok := h.state.take(r.Message, r.Time, h.every)
	if !ok {
		return nil
	}
	if held > 0 {
		r = r.Clone()
		r.AddAttrs(slog.Int("held_back", held))
	}
	return h.next.Handle(ctx, r)
}

// WithAttrs returns a Handler whose records carry as, sharing this one's
// count of messages.
func (h *Handler) WithAttrs(as []slog.Attr) slog.Handler {
	return &Handler{next: h.next.WithAttrs(as), every: h.every, state: h.state}
}

// WithGroup returns a Handler whose attributes go in group name, sharing
// this one's count of messages.
func (h *Handler) WithGroup(name string) slog.Handler {
	return &Handler{next: h.next.WithGroup(name), every: h.every, state: h.state}
}

// take counts a record of msg at t and tells whether to write it, with how
// many were held back before it.
func (s *state) take(msg string, t time.Time, every time.Duration) (held int, ok bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	e := s.seen[msg]
	if e == nil {
		if len(s.seen) >= maxKeys {
			for k, old := range s.seen {
				if t.Sub(old.last) >= every {
					delete(s.seen, k)
				}
			}
		}
		s.seen[msg] = &entry{last: t}
		return 0, true
	}
	if t.Sub(e.last) < every {
		e.held++
		return 0, false
	}
	held, e.held, e.last = e.held, 0, t
	return held, true
}
