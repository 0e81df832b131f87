package main

// The priority figures (issue 32): a batch of priorityFiles files at
// priorityLevel, once on the idle orchestrator just before the first run
// of the largest end-to-end batch (the baseline), once submitted while
// that batch, at the default priority, is halfway through its last phase.
// The target is loaded <= 2 x idle + 1 s.

import (
	"context"
	"fmt"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/oklog/ulid/v2"

	"github.com/arke-institute/orchestrator/client"
	"github.com/arke-institute/orchestrator/phases"
)

const (
	priorityFiles = 20
	priorityLevel = 5
	// priorityTasks are a probe's tasks: its TIFFs (every tenth file)
	// and all its JPEGs (e2eGroups).
	priorityTasks = priorityFiles + priorityFiles/10
)

// priorityProbe is what the probes of one run measured.
type priorityProbe struct {
	idle, loaded time.Duration // POST -> DONE
	// bigDone is how far the big batch's last phase was when the loaded
	// probe was submitted (completed / total).
	bigDone float64
	// queued is how many callbacks the fake Machines API had yet to post
	// when the loaded probe was submitted.
	queued int
	ids    []string
}

// runProbe takes one probe batch through run and returns its wall time.
func (env *e2eEnv) runProbe(ctx context.Context, run *orchestratorRun) (string, time.Duration, error) {
	id := ulid.Make().String()
	msg, err := env.uploadManifest(ctx, id, e2eGroups("staging/"+id+"/", priorityFiles))
	if err != nil {
		return id, 0, err
	}
	msg.Priority = priorityLevel
	_, wall, err := run.process(ctx, env, msg, 2*time.Minute, int64(priorityTasks), nil)
	return id, wall, err
}

// loadedProbe submits a probe once the big batch's last phase is half
// done, from the big batch's status polls; wait returns its outcome.
type loadedProbe struct {
	env   *e2eEnv
	run   *orchestratorRun
	probe *priorityProbe
	once  sync.Once
	done  chan error
}

func newLoadedProbe(env *e2eEnv, run *orchestratorRun, probe *priorityProbe) *loadedProbe {
	return &loadedProbe{env: env, run: run, probe: probe, done: make(chan error, 1)}
}

// onPoll is the big batch's status poll: halfway through IMAGE_PROCESSING,
// the probe starts, in the background, so the big batch's polls go on.
func (l *loadedProbe) onPoll(ctx context.Context, st client.Status) {
	if st.Status != string(phases.ImageProcessing) || st.Progress.TasksTotal == 0 ||
		2*st.Progress.TasksCompleted < st.Progress.TasksTotal {
		return
	}
	l.once.Do(func() {
		l.probe.bigDone = float64(st.Progress.TasksCompleted) / float64(st.Progress.TasksTotal)
		l.probe.queued = l.run.fly.Counts().CallbacksPending
		go func() {
			id, wall, err := l.env.runProbe(ctx, l.run)
			l.probe.ids = append(l.probe.ids, id)
			l.probe.loaded = wall
			l.done <- err
		}()
	})
}

// wait returns the loaded probe's outcome; an error if it never started.
func (l *loadedProbe) wait(ctx context.Context) error {
	l.once.Do(func() {}) // from now on, no probe starts
	if l.probe.bigDone == 0 {
		return fmt.Errorf("the priority probe never started: the big batch was never seen halfway through %s", phases.ImageProcessing)
	}
	select {
	case err := <-l.done:
		return err
	case <-ctx.Done():
		return ctx.Err()
	}
}

// probeTasks counts the tasks of the probes' batches, for the checks of
// the big batch's launches, which the fake Machines API counts with
// theirs.
func probeTasks(ctx context.Context, dbURL string, ids []string) (int, error) {
	conn, err := pgx.Connect(ctx, dbURL)
	if err != nil {
		return 0, err
	}
	defer conn.Close(ctx)
	var n int
	err = conn.QueryRow(ctx, `SELECT count(*) FROM tasks WHERE batch_id = ANY($1)`, ids).Scan(&n)
	return n, err
}

// priorityTable renders the probes' figures of the runs that have them.
func priorityTable(sizes []e2eSize) string {
	var b strings.Builder
	for _, s := range sizes {
		for _, r := range s.runs {
			p := r.priority
			if p == nil {
				continue
			}
			target := 2*p.idle + time.Second
			met := "met"
			if p.loaded > target {
				met = "MISSED"
			}
			name := fmt.Sprintf("%spriority: %d files at %d", s.label, priorityFiles, priorityLevel)
			fmt.Fprintf(&b, "%-*s %14s\n", e2eWidth, name+", idle: POST -> DONE", p.idle.Round(time.Millisecond))
			fmt.Fprintf(&b, "%-*s %14s\n", e2eWidth, fmt.Sprintf("%s, during %d files at 0", name, s.files), p.loaded.Round(time.Millisecond))
			fmt.Fprintf(&b, "%-*s %13.2fx\n", e2eWidth, s.label+"priority: during / idle", float64(p.loaded)/float64(p.idle))
			fmt.Fprintf(&b, "%-*s %14s\n", e2eWidth, fmt.Sprintf("%spriority: target 2 x idle + 1 s (%s)", s.label, met), target.Round(time.Millisecond))
			fmt.Fprintf(&b, "%-*s %13.0f%%\n", e2eWidth, s.label+"priority: big batch's last phase done at submit", 100*p.bigDone)
		}
	}
	return b.String()
}

// priorityMarkdown describes the priority part.
func priorityMarkdown() string {
	return fmt.Sprintf(`- **Priority**: in the first run of the largest end-to-end batch only (run 1
  of that size above, marked; of each binary in an A/B comparison), on the same
  orchestrator process and settings (launches unlimited), a batch of %d files
  (%d tasks) at priority %d goes through first on the idle system (the baseline,
  *idle*), then again submitted when the big batch, at the default priority 0,
  has half of its IMAGE_PROCESSING tasks completed (*during*). Both are POST ->
  DONE as the end-to-end figures. The big batch's checks leave the probes'
  launches and callbacks out of its counts; its figures stay in the size's
  medians and maxima, although the probes share its process and may slow it
  (its wall time is listed beside the other runs'). The target is *during* <=
  2 x *idle* + 1 s.
`, priorityFiles, priorityTasks, priorityLevel)
}

// probeTimeline prints when each step of a probe batch happened, from its
// creation: its events, grouped by type and phase (first and last).
func probeTimeline(ctx context.Context, dbURL, id string) error {
	conn, err := pgx.Connect(ctx, dbURL)
	if err != nil {
		return err
	}
	defer conn.Close(ctx)
	rows, err := conn.Query(ctx, `SELECT e.type, coalesce(e.phase, ''), count(*),
		(extract(epoch FROM min(e.created_at) - b.started_at) * 1000)::bigint,
		(extract(epoch FROM max(e.created_at) - b.started_at) * 1000)::bigint
		FROM batch_events e JOIN batches b ON b.id = e.batch_id WHERE e.batch_id = $1
		GROUP BY 1, 2, b.started_at ORDER BY 4`, id)
	if err != nil {
		return err
	}
	var parts []string
	for rows.Next() {
		var typ, phase string
		var n, first, last int64
		if err := rows.Scan(&typ, &phase, &n, &first, &last); err != nil {
			return err
		}
		parts = append(parts, fmt.Sprintf("%s %s x%d %d..%d ms", typ, phase, n, first, last))
	}
	if err := rows.Err(); err != nil {
		return err
	}
	fmt.Fprintf(os.Stderr, "e2e: priority probe timeline: %s\n", strings.Join(parts, "; "))
	return nil
}
