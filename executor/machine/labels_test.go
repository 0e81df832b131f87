package machine

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/arke-institute/orchestrator/compute"
	"github.com/arke-institute/orchestrator/metrics"
)

// TestLaunchFailureReason sorts launch errors as the backends classify them
// into the launch failure metric's reasons.
func TestLaunchFailureReason(t *testing.T) {
	t.Parallel()
	cause := errors.New("boom")
	for _, c := range []struct {
		name string
		err  error
		want string
	}{
		{"RateLimited", compute.RateLimited(cause, 429, 0), metrics.LaunchRateLimited},
		{"Rejected", compute.Permanent(cause, 422), metrics.Launch4xx},
		{"NameConflict", compute.Ambiguous(cause, 409), metrics.Launch4xx},
		{"ServerError", compute.Ambiguous(cause, 503), metrics.Launch5xx},
		{"Network", compute.Ambiguous(context.DeadlineExceeded, 0), metrics.LaunchNetwork},
		{"Wrapped", fmt.Errorf("launching: %w", compute.Ambiguous(cause, 502)), metrics.Launch5xx},
		{"RefusedLocally", compute.Permanent(cause, 0), metrics.LaunchOther},
		{"Unclassified", cause, metrics.LaunchOther},
	} {
		t.Run(c.name, func(t *testing.T) {
			require.Equal(t, c.want, launchFailureReason(c.err))
		})
	}
}
