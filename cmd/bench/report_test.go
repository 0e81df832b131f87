package main

import (
	"math"
	"strings"
	"testing"
	"time"
)

const milli = time.Millisecond

// e2eRunOf is a run of n files with the given wall time, transitions and
// peak RSS; its image phase launches its n tasks over a tenth of the wall.
func e2eRunOf(n int, wall time.Duration, rss int64, transitions ...time.Duration) e2eRun {
	return e2eRun{files: n, tasks: n + n/10, launches: n + n/10, wall: wall, peakRSS: rss,
		imageTasks: n, imageLaunchSpan: wall / 10, transitions: transitions}
}

func TestE2ESummary(t *testing.T) {
	s := e2eSize{files: 1000, runs: []e2eRun{
		e2eRunOf(1000, 5*time.Second, 80e6, 100*milli, 300*milli),
		e2eRunOf(1000, 3*time.Second, 120e6, 200*milli, 900*milli),
		e2eRunOf(1000, 4*time.Second, 90e6, 150*milli, 250*milli),
	}}
	got := s.summary()
	if got.runs != 3 || got.wall != 4*time.Second {
		t.Errorf("runs %d, wall %s; want 3 runs, the median 4s", got.runs, got.wall)
	}
	if got.peakRSS != 120e6 {
		t.Errorf("peak RSS %d, want the largest, 120e6", got.peakRSS)
	}
	// 100 150 200 250 300 900: the mean of the middle two, not the lower.
	if len(got.transitions) != 6 || got.transitionP50 != 225*milli || got.transitionMax != 900*milli {
		t.Errorf("transitions %v, p50 %s, max %s; want 6, 225ms, 900ms", got.transitions, got.transitionP50, got.transitionMax)
	}
	// 1100 launches over 5, 3 and 4 s: the median rate is 4 s's.
	if math.Abs(got.launchRate-275) > 1e-9 || math.Abs(got.imageRate-2500) > 1e-9 {
		t.Errorf("launches/s %v, image launches/s %v; want 275, 2500", got.launchRate, got.imageRate)
	}

	two := e2eSize{files: 1000, runs: []e2eRun{e2eRunOf(1000, 2*time.Second, 1, milli, milli), e2eRunOf(1000, 4*time.Second, 1, milli, milli)}}
	if w := two.summary().wall; w != 3*time.Second {
		t.Errorf("two runs' wall %s, want their mean 3s", w)
	}
}

func TestE2ETable(t *testing.T) {
	probed := e2eRunOf(100000, 30*time.Second, 100e6, 100*milli, 200*milli)
	probed.priority = &priorityProbe{idle: time.Second, loaded: 2 * time.Second, bigDone: 0.5}
	table := e2eTable([]e2eSize{
		{files: 10000, runs: []e2eRun{e2eRunOf(10000, 3*time.Second, 1, milli, milli)}},
		{files: 100000, runs: []e2eRun{probed, e2eRunOf(100000, 28*time.Second, 1, milli, milli), e2eRunOf(100000, 29*time.Second, 1, milli, milli)}},
	})
	for _, want := range []string{
		"e2e 10000 files: POST -> DONE ",
		"e2e 10000 files: transition p50 (median of 2) ",
		"e2e 100000 files: POST -> DONE (median of 3)",
		"  run 1 (with the priority probes)",
		"  run 2 ",
		"e2e 100000 files: transition p50 (median of 6)",
		"e2e 100000 files: transition max (of 6)",
		"e2e 100000 files: orchestrator peak RSS (max of 3)",
		"e2e scaling t(100k)/t(10k) (medians)",
	} {
		if !strings.Contains(table, want) {
			t.Errorf("no %q in the table:\n%s", want, table)
		}
	}
	if strings.Contains(table, "10000 files: POST -> DONE (median") || strings.Contains(table, "run 2 (with") {
		t.Errorf("a single run called a median, or the probe in a second run:\n%s", table)
	}
	// 29 s / 3 s, the median runs' walls.
	if !strings.Contains(table, "9.67x") {
		t.Errorf("scaling is not 29s / 3s:\n%s", table)
	}
}

// targetRows reads the targets table into figure -> [this run, verdict].
func targetRows(t *testing.T, md string) map[string][2]string {
	t.Helper()
	rows := map[string][2]string{}
	for line := range strings.SplitSeq(md, "\n") {
		cells := strings.Split(strings.Trim(line, "| "), " | ")
		if len(cells) == 4 && cells[0] != "figure" && cells[0] != "---" {
			rows[cells[0]] = [2]string{cells[2], cells[3]}
		}
	}
	return rows
}

func TestTargets(t *testing.T) {
	r := &results{parts: []string{"baseline", "ingest", "e2e", "workers"}, pairs: 5,
		baselines: []float64{1000, 1000, 1000, 1000, 1000},
		ingests:   []ingestRun{{rate: 1100}, {rate: 1300}, {rate: 1190}, {rate: 1250}, {rate: 1400}},
		e2e: []e2eSize{
			// p50 of 100 150 190 230 240 480 is 210 ms (the lower middle,
			// 190, would meet the goal); max 480 meets it.
			{files: 10000, runs: []e2eRun{
				e2eRunOf(10000, 2900*milli, 80e6, 150*milli, 230*milli),
				e2eRunOf(10000, 3200*milli, 80e6, 190*milli, 240*milli),
				e2eRunOf(10000, 2800*milli, 80e6, 100*milli, 480*milli),
			}},
			// The median RSS, 110 MB, would meet the goal; the max does not.
			{files: 100000, runs: []e2eRun{
				e2eRunOf(100000, 28*time.Second, 100e6, 100*milli, 150*milli),
				e2eRunOf(100000, 30*time.Second, 121e6, 120*milli, 600*milli),
				e2eRunOf(100000, 31*time.Second, 110e6, 130*milli, 160*milli),
			}},
		},
		workers: []workerFigure{
			{Name: "a", Ours: 90 * milli, VIPS: 100 * milli, VIPSStartup: 20 * milli}, // 1.12x without start-up, 0.90x with
			{Name: "b", Ours: 50 * milli, VIPS: 200 * milli, VIPSStartup: 50 * milli},
		},
	}
	md := r.markdown(r.table())
	rows := targetRows(t, md)
	for figure, want := range map[string][2]string{
		"callback ingest / baseline TPS (median of 5 pairs)":     {"1.25x", "met"},
		"10,000-file batch, end to end (median of 3 runs)":       {"2.9s", "met"},
		"scaling t(100k)/t(10k) (medians)":                       {"10.34", "missed"},
		"orchestrator peak RSS at 100,000 files (max of 3 runs)": {"121 MB", "missed"},
		"phase transition p50, 10000 files (median of 6)":        {"210ms", "missed"},
		"phase transition max, 10000 files (of 6)":               {"480ms", "met"},
		"phase transition p50, 100000 files (median of 6)":       {"140ms", "met"},
		"phase transition max, 100000 files (of 6)":              {"600ms", "missed"},
		"workers vs vips CLI without its start-up (worst input)": {"1.12x", "missed"},
	} {
		if got, ok := rows[figure]; !ok || got != want {
			t.Errorf("%s: got %v (present %v), want %v", figure, got, ok, want)
		}
	}
	if len(rows) != 9 {
		t.Errorf("%d target rows, want 9: %v", len(rows), rows)
	}
	targets := strings.Index(md, "## Against the targets")
	perf := strings.Index(md, "[docs/performance.md](docs/performance.md)")
	if targets < 0 || perf < targets {
		t.Errorf("no link to docs/performance.md after the targets:\n%s", md)
	}
}

func TestWorkersTable(t *testing.T) {
	f := workerFigure{Name: "TIFF", Ours: 90 * milli, VIPS: 100 * milli, VIPSStartup: 20 * milli}
	if got := f.vsWork(); math.Abs(got-1.125) > 1e-9 {
		t.Errorf("vsWork %v, want 1.125", got)
	}
	if got := f.vsCLI(); math.Abs(got-0.9) > 1e-9 {
		t.Errorf("vsCLI %v, want 0.9", got)
	}
	if got := (workerFigure{Ours: milli, VIPS: 10 * milli, VIPSStartup: 10 * milli}).vsWork(); !math.IsInf(got, 1) {
		t.Errorf("vsWork with no work left %v, want +Inf", got)
	}
	table := workersTable([]workerFigure{f})
	work := strings.Index(table, "worker / (vips CLI - start-up)")
	whole := strings.Index(table, "worker / vips CLI, incl. its start-up")
	if work < 0 || whole < work {
		t.Errorf("the ratio without start-up is not listed first:\n%s", table)
	}
	if !strings.Contains(table[work:whole], "1.12x") || !strings.Contains(table[whole:], "0.90x") {
		t.Errorf("ratios in the wrong rows:\n%s", table)
	}
}
