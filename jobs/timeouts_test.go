package jobs

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestKilledProcessJobsResumeWithin90s: River rescues a job of a killed
// process once its run's bound has passed, at its next rescue round (every
// 30 s), so every core job but phase_build must be bounded well under a
// minute for stranded work to run again within 90 s (issue 19). (Each
// executor's package checks its own jobs.)
func TestKilledProcessJobsResumeWithin90s(t *testing.T) {
	const riverRescueInterval = 30 * time.Second
	bounds := map[string]time.Duration{
		"batch_start":    (&BatchStartWorker{}).Timeout(nil),
		"phase_check":    (&PhaseCheckWorker{}).Timeout(nil),
		"task_sweep":     (&TaskSweepWorker{}).Timeout(nil),
		"batch_finalize": (&BatchFinalizeWorker{}).Timeout(nil),
	}
	for kind, bound := range bounds {
		require.LessOrEqual(t, bound+riverRescueInterval, 90*time.Second, "%s runs for up to %s", kind, bound)
	}
	require.Equal(t, longJobTimeout, (&PhaseBuildWorker{}).Timeout(nil), "phase_build resumes from its cursor, and may run long")
}
