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
	}{
		"RateLimited": {compute.RateLimited(base, 429, time.Second), compute.ErrRateLimited},
		"Ambiguous":   {compute.Ambiguous(base, 503), compute.ErrAmbiguous},
		"Permanent":   {compute.Permanent(base, 400), compute.ErrPermanent},
	} {
		t.Run(name, func(t *testing.T) {
			// The kind and the cause are both visible, also through wrapping,
			// and the text is the cause's own.
			wrapped := fmt.Errorf("launching task t1: %w", tc.err)
			require.ErrorIs(t, wrapped, tc.kind)
			require.ErrorIs(t, wrapped, base)
			require.Equal(t, "boom", tc.err.Error())
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
