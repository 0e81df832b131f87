// Package metricstest reads metrics back in tests: the value of one series
// of a registry, and a wait for a series to reach a value.
package metricstest

import (
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/arke-institute/orchestrator/internal/harness/eventually"
)

// Value is the value of name's series with exactly labels (nil for none): a
// counter's or gauge's value, or a histogram's count of observations; 0 for
// a series that does not exist yet.
func Value(tb testing.TB, reg prometheus.Gatherer, name string, labels map[string]string) float64 {
	tb.Helper()
	families, err := reg.Gather()
	require.NoError(tb, err)
	for _, f := range families {
		if f.GetName() != name {
			continue
		}
	series:
		for _, m := range f.GetMetric() {
			if len(m.GetLabel()) != len(labels) {
				continue
			}
			for _, l := range m.GetLabel() {
				if v, ok := labels[l.GetName()]; !ok || v != l.GetValue() {
					continue series
				}
			}
			switch {
			case m.GetCounter() != nil:
				return m.GetCounter().GetValue()
			case m.GetGauge() != nil:
				return m.GetGauge().GetValue()
			case m.GetHistogram() != nil:
				return float64(m.GetHistogram().GetSampleCount())
			}
		}
	}
	return 0
}

// Count is how many series name has.
func Count(tb testing.TB, reg prometheus.Gatherer, name string) int {
	tb.Helper()
	families, err := reg.Gather()
	require.NoError(tb, err)
	for _, f := range families {
		if f.GetName() == name {
			return len(f.GetMetric())
		}
	}
	return 0
}

// Series is one series and the value a test expects of it.
type Series struct {
	Name   string
	Labels map[string]string
	Value  float64
}

// S is the Series name{labels...} = value, labels given as name, value
// pairs: S("orchestrator_tasks_finished_total", 4, "phase", "IMAGE_PROCESSING", "outcome", "completed").
func S(name string, value float64, labels ...string) Series {
	var m map[string]string
	if len(labels) > 0 {
		m = make(map[string]string, len(labels)/2)
		for i := 0; i+1 < len(labels); i += 2 {
			m[labels[i]] = labels[i+1]
		}
	}
	return Series{Name: name, Labels: m, Value: value}
}

// Await waits until every series has its value, all in one pass, and
// fails after 30 s: some are counted just after what a test can see (a
// commit, an answer), and a counter must not have gone past its value
// while another caught up.
func Await(tb testing.TB, reg prometheus.Gatherer, want ...Series) {
	tb.Helper()
	var miss Series
	var got float64
	if !eventually.Within(30*time.Second, func() bool {
		for _, w := range want {
			if got = Value(tb, reg, w.Name, w.Labels); got != w.Value {
				miss = w
				return false
			}
		}
		return true
	}) {
		tb.Fatalf("%s%v is %v, want %v", miss.Name, miss.Labels, got, miss.Value)
	}
}
