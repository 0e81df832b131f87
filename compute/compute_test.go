package compute_test

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/arke-institute/orchestrator/compute"
)

func TestErrorKinds(t *testing.T) {
	t.Parallel()
	base := errors.New("boom")
	kinds := []error{compute.ErrRateLimited, compute.ErrAmbiguous, compute.ErrPermanent}
	for name, tc := range map[string]struct {
		err  error
		kind error
		text string
	}{
		"RateLimited":  {compute.RateLimited(base, 429, time.Second), compute.ErrRateLimited, "boom (HTTP 429)"},
		"Ambiguous":    {compute.Ambiguous(base, 503), compute.ErrAmbiguous, "boom (HTTP 503)"},
		"Permanent":    {compute.Permanent(base, 400), compute.ErrPermanent, "boom (HTTP 400)"},
		"NoStatus":     {compute.Ambiguous(base, 0), compute.ErrAmbiguous, "boom"},
		"StatusInText": {compute.Permanent(errors.New("fly said 422: bad"), 422), compute.ErrPermanent, "fly said 422: bad"},
	} {
		t.Run(name, func(t *testing.T) {
			// The kind and the cause are both visible, also through wrapping,
			// and the text is the cause's own plus the status if it lacks it.
			wrapped := fmt.Errorf("launching task t1: %w", tc.err)
			require.ErrorIs(t, wrapped, tc.kind)
			if name != "StatusInText" {
				require.ErrorIs(t, wrapped, base)
			}
			require.Equal(t, tc.text, tc.err.Error())
			for _, other := range kinds {
				if other != tc.kind {
					require.NotErrorIs(t, tc.err, other)
				}
			}
		})
	}
}

func TestRetryAfter(t *testing.T) {
	t.Parallel()
	base := errors.New("boom")
	require.Equal(t, 3*time.Second, compute.RetryAfter(fmt.Errorf("x: %w", compute.RateLimited(base, 429, 3*time.Second))))
	require.Zero(t, compute.RetryAfter(compute.RateLimited(base, 429, 0)))
	require.Zero(t, compute.RetryAfter(compute.Ambiguous(base, 503)))
	require.Zero(t, compute.RetryAfter(&compute.Error{Kind: compute.ErrPermanent, RetryAfter: time.Second, Err: base}))
	require.Zero(t, compute.RetryAfter(base))
	require.Zero(t, compute.RetryAfter(nil))
}

func TestFence(t *testing.T) {
	t.Parallel()
	t0 := time.Date(2025, 1, 2, 3, 4, 5, 0, time.UTC)
	m := func(id string, attempt int, state string, age time.Duration) compute.Machine {
		return compute.Machine{ID: id, State: state, TaskID: "t", Attempt: attempt, CreatedAt: t0.Add(-age)}
	}
	ids := func(ms []compute.Machine) []string {
		var out []string
		for _, m := range ms {
			out = append(out, m.ID)
		}
		return out
	}
	for name, tc := range map[string]struct {
		found          []compute.Machine
		attempt        int
		current, stale []string
	}{
		"Nothing": {nil, 1, nil, nil},
		"OldStoppedAndNew": {
			[]compute.Machine{m("old", 1, "stopped", time.Minute), m("new", 2, "started", 0)}, 2,
			[]string{"new"}, []string{"old"},
		},
		"OldRunningAndNew": {
			[]compute.Machine{m("old", 1, "started", time.Minute), m("new", 2, "created", 0)}, 2,
			[]string{"new"}, []string{"old"},
		},
		"OnlyOldAttempt": {
			[]compute.Machine{m("old", 1, "started", time.Minute)}, 2,
			nil, []string{"old"},
		},
		"DestroyingOldIsLeftAlone": {
			[]compute.Machine{m("old", 1, "destroying", time.Minute), m("new", 2, "started", 0)}, 2,
			[]string{"new"}, nil,
		},
		"StoppedCurrentIsIgnored": {
			[]compute.Machine{m("done", 2, "stopped", 0)}, 2,
			nil, nil,
		},
		"LaterAttemptIsNeverTouched": {
			[]compute.Machine{m("mine", 1, "started", time.Minute), m("later", 2, "started", 0)}, 1,
			[]string{"mine"}, nil,
		},
		"NoAttemptIsStale": {
			[]compute.Machine{m("legacy", 0, "started", time.Minute), m("new", 1, "started", 0)}, 1,
			[]string{"new"}, []string{"legacy"},
		},
		"NewestFirst": {
			[]compute.Machine{m("a", 3, "started", 0), m("b", 3, "started", time.Minute), m("c", 3, "starting", 30*time.Second)}, 3,
			[]string{"a", "c", "b"}, nil,
		},
		"SameSecondLaterListedFirst": {
			[]compute.Machine{m("first", 1, "started", 0), m("second", 1, "started", 0)}, 1,
			[]string{"second", "first"}, nil,
		},
	} {
		t.Run(name, func(t *testing.T) {
			f := compute.Fence(tc.found, tc.attempt)
			require.Equal(t, tc.current, ids(f.Current), "current")
			require.Equal(t, tc.stale, ids(f.Stale), "stale")
		})
	}
}
