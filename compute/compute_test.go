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
