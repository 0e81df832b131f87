package machine_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/arke-institute/orchestrator/executor/machine"
	"github.com/arke-institute/orchestrator/internal/fakes/fakefly"
	"github.com/arke-institute/orchestrator/internal/harness/eventually"
	"github.com/arke-institute/orchestrator/internal/harness/testenv"
	"github.com/arke-institute/orchestrator/manifest"
	"github.com/arke-institute/orchestrator/phases"
	"github.com/arke-institute/orchestrator/ratelimit"
)

// madeMachines are the launches that made a machine, in order.
func madeMachines(env *testenv.Env) []fakefly.Launch {
	var out []fakefly.Launch
	for _, l := range env.Fly.Launches() {
		if l.MachineID != "" {
			out = append(out, l)
		}
	}
	return out
}

// countOf counts the launches of batch among ls.
func countOf(ls []fakefly.Launch, batch string) int {
	n := 0
	for _, l := range ls {
		if l.BatchID == batch {
			n++
		}
	}
	return n
}

// TestPriorityLaunchesFirst: under a launch rate of 4 a second, a batch of
// high priority submitted while a normal one is being launched gets its
// machines first: while it waits for them, the normal batch launches only
// its minimum share (one machine per YieldWait); and it is not starved:
// it goes on launching while the high batch waits, and completes its
// launches after.
func TestPriorityLaunchesFirst(t *testing.T) {
	t.Parallel()
	env := testenv.New(t, testenv.Options{Behave: hangAll, Settings: map[string]string{
		"FLY_LAUNCH_RATE": "4", "FLY_LAUNCH_BURST": "1", "PRIORITY_SHARE": "10",
	}})
	const normal, high = "PRIO-NORMAL", "PRIO-HIGH"
	env.Submit(t, normal, testenv.Tiffs(40))
	eventually.True(t, 30*time.Second, "the normal batch's first launches", func() bool {
		return countOf(madeMachines(env), normal) >= 2
	})
	env.SubmitWith(t, high, testenv.Tiffs(12), func(m *manifest.QueueMessage) { m.Priority = 5 })
	eventually.True(t, 30*time.Second, "the high batch's launches", func() bool {
		return countOf(madeMachines(env), high) == 12
	})
	ls := madeMachines(env)
	first, last := -1, -1
	for i, l := range ls {
		if l.BatchID == high {
			if first < 0 {
				first = i
			}
			last = i
		}
	}
	during := countOf(ls[first:last+1], normal)
	span := ls[last].At.Sub(ls[first].At)
	// 12 launches at 4/s take about 3 s; the normal batch's share is one
	// launch per YieldWait (2.25 s), plus one round already under way.
	wait := machine.YieldWait(ratelimit.Limit{Rate: 4, Burst: 1}, 10)
	require.LessOrEqual(t, during, 2+int(span/wait), "the normal batch's launches while the high one's went (over %s)", span)
	require.GreaterOrEqual(t, during, 1, "the normal batch keeps its minimum share while the high one launches (over %s)", span)
	// Once the high batch has its machines, the normal batch's launches
	// go on to the end.
	eventually.True(t, 60*time.Second, "the normal batch's launches", func() bool {
		return countOf(madeMachines(env), normal) == 40
	})
}

// TestEqualPrioritiesShareLaunches: two batches of one priority under a
// launch rate share it: neither waits for the other to be launched.
func TestEqualPrioritiesShareLaunches(t *testing.T) {
	t.Parallel()
	env := testenv.New(t, testenv.Options{Behave: hangAll, Settings: map[string]string{"FLY_LAUNCH_RATE": "8", "FLY_LAUNCH_BURST": "1"}})
	const a, b = "SHARE-A", "SHARE-B"
	env.SubmitWith(t, a, testenv.Tiffs(30), func(m *manifest.QueueMessage) { m.Priority = 3 })
	env.SubmitWith(t, b, testenv.Tiffs(30), func(m *manifest.QueueMessage) { m.Priority = 3 })
	eventually.True(t, 30*time.Second, "24 launches", func() bool { return len(madeMachines(env)) >= 24 })
	ls := madeMachines(env)[:24]
	require.GreaterOrEqual(t, countOf(ls, a), 6, "batch A's share of the first 24 launches")
	require.GreaterOrEqual(t, countOf(ls, b), 6, "batch B's share of the first 24 launches")
}

func TestYieldWait(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		rate  float64
		share int
		want  time.Duration
	}{
		{1, 10, 9 * time.Second},
		{4, 10, 2250 * time.Millisecond},
		{1, 50, time.Second},
		{1e6, 10, time.Second},      // no launch limit to speak of: at least a second
		{0.1, 10, 30 * time.Second}, // at most 30 s
		{1, 0, 30 * time.Second},    // a share below 1% counts as 1%
	} {
		require.Equal(t, tc.want, machine.YieldWait(ratelimit.Limit{Rate: tc.rate, Burst: 1}, tc.share), "rate %v, share %d", tc.rate, tc.share)
	}
}

// TestAppPhases: the phases whose machines are of one app, whose launches
// take from one bucket.
func TestAppPhases(t *testing.T) {
	t.Parallel()
	cfg := machine.Config{Phases: map[phases.Name]machine.Phase{
		phases.TIFFConversion: {App: "images"}, phases.ImageProcessing: {App: "images"}, phases.PDFPages: {App: "pdf"},
	}}
	require.Equal(t, []string{string(phases.ImageProcessing), string(phases.TIFFConversion)}, cfg.AppPhases("images"))
	require.Equal(t, []string{string(phases.PDFPages)}, cfg.AppPhases("pdf"))
	require.Empty(t, cfg.AppPhases("other"))
}
