package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/arke-institute/orchestrator/internal/fakes/fakefly"
)

// note logs a driver fault and keeps it, with its time, for the
// timelines of suspect tasks.
func (l *loadRun) note(format string, args ...any) {
	msg := fmt.Sprintf(format, args...)
	l.w.logf("%s: %s", l.label, msg)
	l.res.mu.Lock()
	defer l.res.mu.Unlock()
	l.res.faultLog = append(l.res.faultLog, timelineLine{at: time.Now(), what: "driver: " + msg})
}

// timelineLine is one line of a timeline.
type timelineLine struct {
	at   time.Time
	what string
}

// writeTimelines writes, for each suspect task (lost, or failed with every
// machine faulty), what happened to it in time order: the fake's launches
// and callbacks, the orchestrator's events, and the driver's faults
// around it. They go to <label>-suspects.txt in the run's folder, and the
// first one to the log, so a failed run says why without a replay.
func (l *loadRun) writeTimelines(ctx context.Context, pool *pgxpool.Pool, report fakefly.Report) error {
	suspects := l.res.suspects
	if len(suspects) == 0 {
		return nil
	}
	ids := make([]string, len(suspects))
	for i, t := range suspects {
		ids[i] = t.id
	}
	events := map[string][]timelineLine{}
	rows, err := pool.Query(ctx, `SELECT task_id, type, created_at, data::text FROM batch_events
		WHERE task_id = ANY($1) ORDER BY id`, ids)
	if err != nil {
		return err
	}
	for rows.Next() {
		var id, typ, data string
		var at time.Time
		if err := rows.Scan(&id, &typ, &at, &data); err != nil {
			return err
		}
		events[id] = append(events[id], timelineLine{at: at, what: "event " + typ + " " + data})
	}
	if err := rows.Err(); err != nil {
		return err
	}
	callbacks := map[string][]fakefly.CallbackSummary{}
	for _, c := range report.Callbacks {
		callbacks[c.TaskID] = append(callbacks[c.TaskID], c)
	}
	path := filepath.Join(l.w.tmp, l.label+"-suspects.txt")
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	defer f.Close()
	for i, t := range suspects {
		var lines []timelineLine
		for _, x := range report.LaunchLog[t.id] {
			what := fmt.Sprintf("fake: launch #%d answered %d", x.Attempt, x.Status)
			if x.MachineID != "" {
				what += " machine " + x.MachineID
			}
			lines = append(lines, timelineLine{at: x.At, what: what})
		}
		for _, c := range callbacks[t.id] {
			lines = append(lines, timelineLine{at: c.Queued, what: fmt.Sprintf("fake: %s ready to call back (%s after launch)", c.MachineID, c.Queued.Sub(c.Launched).Round(time.Millisecond))},
				timelineLine{at: c.Answered, what: fmt.Sprintf("fake: %s callback (%s) answered %d after %d posts, posting began %s after ready %s",
					c.MachineID, c.Outcome, c.Status, c.Attempts, c.Posted.Sub(c.Queued).Round(time.Millisecond), c.Err)})
		}
		lines = append(lines, events[t.id]...)
		first, last := timeSpan(lines)
		for _, x := range l.res.faultLog {
			if !x.at.Before(first.Add(-time.Minute)) && !x.at.After(last.Add(time.Minute)) {
				lines = append(lines, x)
			}
		}
		sort.SliceStable(lines, func(a, b int) bool { return lines[a].at.Before(lines[b].at) })
		var b strings.Builder
		fmt.Fprintf(&b, "task %s (batch %s, %s, input %s): %s %q; faulty launches %s\n", t.id, t.batchID, t.phase, t.inputKey,
			t.status, t.err, strings.Join(l.res.faultedLaunches[t.id], ", "))
		for _, x := range lines {
			fmt.Fprintf(&b, "  %s %s\n", x.at.UTC().Format("15:04:05.000"), x.what)
		}
		if _, err := io.WriteString(f, b.String()+"\n"); err != nil {
			return err
		}
		if i == 0 {
			l.w.logf("%s: %d suspect task(s), timelines in %s; the first:\n%s", l.label, len(suspects), path, b.String())
		}
	}
	return nil
}

// timeSpan is the first and last time among lines (zero times left out).
func timeSpan(lines []timelineLine) (first, last time.Time) {
	for _, x := range lines {
		if x.at.IsZero() {
			continue
		}
		if first.IsZero() || x.at.Before(first) {
			first = x.at
		}
		if x.at.After(last) {
			last = x.at
		}
	}
	return first, last
}
