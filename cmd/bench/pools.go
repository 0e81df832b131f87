package main

// The pools part (issue 27): batches through `orchestrator serve` against
// the fake Machines API enforcing Fly's documented creation limit (1
// machine a second per app, bursts of 3), with workers whose tasks take
// poolTaskTime on the machine. The orchestrator's own launch limiter is at
// its defaults, which are Fly's. The same files run on a machine per task
// and on pools (POOL_SIZE 20, the default). A machine per task needs about
// one second per task whatever else is fast, so that run is a shorter
// batch and its time is projected to the pooled batch's tasks (its pace is
// the creation limit's, linear in the tasks).

import (
	"context"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/oklog/ulid/v2"

	"github.com/arke-institute/orchestrator/internal/fakes/fakefly"
	"github.com/arke-institute/orchestrator/phases"
)

// poolsOptions configure the pools part.
type poolsOptions struct {
	perTaskFiles int   // files of the per-task run
	pooledFiles  []int // files of each pooled run; the first is compared
}

// poolTaskTime is how long a task takes on its machine.
const poolTaskTime = 2 * time.Second

// Fly's documented creation limit, per app.
const (
	flyCreateRate  = 1
	flyCreateBurst = 3
)

// poolsRun is one batch of the pools part.
type poolsRun struct {
	mode         string // "per-task" or "pooled"
	files, tasks int
	wall         time.Duration
	machines     int // machines created
	limited      int // creations the fake answered 429
	// busy and live are the pool machines' machine-seconds busy with a
	// task and from each one's creation to the end of its phase's last
	// task (or its own end, if sooner): efficiency is busy / live.
	busy, live float64
	peakRSS    int64
}

func (r poolsRun) efficiency() float64 {
	if r.live == 0 {
		return 0
	}
	return r.busy / r.live
}

// benchPools runs the per-task batch, then each pooled one.
func benchPools(ctx context.Context, admin *pgx.Conn, base, bin string, e2e e2eOptions, opts poolsOptions) ([]poolsRun, error) {
	env, err := newE2EEnv(ctx, admin, base, e2e)
	if err != nil {
		return nil, err
	}
	defer env.close()
	var out []poolsRun
	if opts.perTaskFiles > 0 {
		r, err := env.poolsOnce(ctx, bin, "per-task", opts.perTaskFiles)
		if err != nil {
			return nil, fmt.Errorf("per-task, %d files: %w", opts.perTaskFiles, err)
		}
		out = append(out, r)
	}
	for _, n := range opts.pooledFiles {
		r, err := env.poolsOnce(ctx, bin, "pooled", n)
		if err != nil {
			return nil, fmt.Errorf("pooled, %d files: %w", n, err)
		}
		out = append(out, r)
	}
	return out, nil
}

// poolsOnce takes a batch of n files (every tenth a TIFF) through a fresh
// database and orchestrator, its machine phases on mode's executor.
func (env *e2eEnv) poolsOnce(ctx context.Context, bin, mode string, n int) (poolsRun, error) {
	r := poolsRun{mode: mode, files: n}
	fmt.Fprintf(os.Stderr, "pools: %d files, %s, tasks of %s under Fly's creation limit...\n", n, mode, poolTaskTime)
	settings := map[string]string{"FLY_LAUNCH_RATE": fmt.Sprint(flyCreateRate), "FLY_LAUNCH_BURST": fmt.Sprint(flyCreateBurst)}
	if mode == "pooled" {
		for _, p := range phases.All() {
			if spec := p.Spec(); spec.Worker != "" {
				settings["EXECUTOR_"+string(spec.Name)] = "pool"
			}
		}
	}
	behave := func(l fakefly.Launch) fakefly.Behavior {
		b := fakefly.Succeed(l)
		b.Delay = poolTaskTime
		return b
	}
	run, err := env.startRun(ctx, bin, fmt.Sprintf("bench_pools_%s_%d", strings.ReplaceAll(mode, "-", "_"), n), fmt.Sprintf("pools-%s-%d", mode, n),
		fakefly.Options{Behave: behave, CreateRate: flyCreateRate, CreateBurst: flyCreateBurst}, settings)
	if err != nil {
		return r, err
	}
	defer run.close()

	batchID := ulid.Make().String()
	msg, err := env.uploadManifest(ctx, batchID, e2eGroups("staging/"+batchID+"/", n))
	if err != nil {
		return r, err
	}
	// At worst a task a second, and more for the pool's start.
	timeout := 5*time.Minute + time.Duration(n+n/10)*time.Second
	done := make(chan struct{})
	go func() { // progress, for a run that takes minutes
		t := time.NewTicker(30 * time.Second)
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-t.C:
				c := run.fly.Counts()
				fmt.Fprintf(os.Stderr, "pools: %d machines created, %d callbacks, %d creations answered 429\n", c.Created, c.Callbacks, c.CreateLimited)
			}
		}
	}()
	_, wall, err := run.process(ctx, env, msg, timeout, int64(n+n/10), nil)
	close(done)
	if err != nil {
		return r, err
	}
	r.wall = wall
	if r.peakRSS, err = run.finish(ctx, env); err != nil {
		return r, err
	}
	counts := run.fly.Counts()
	r.machines, r.limited = counts.Created, counts.CreateLimited
	if err := poolsCollect(ctx, run.dbURL, batchID, &r); err != nil {
		return r, err
	}
	fmt.Fprintf(os.Stderr, "pools: %d files, %s: %s to DONE, %d machines, efficiency %.2f, peak RSS %.0f MB\n",
		n, mode, wall.Round(time.Millisecond), r.machines, r.efficiency(), float64(r.peakRSS)/1e6)
	return r, nil
}

// poolsCollect checks the batch (every task completed, each in one
// attempt) and reads the pools' machine-seconds.
func poolsCollect(ctx context.Context, dbURL, batchID string, r *poolsRun) error {
	conn, err := pgx.Connect(ctx, dbURL)
	if err != nil {
		return err
	}
	defer conn.Close(ctx)
	var tasks, completed, retried int
	if err := conn.QueryRow(ctx, `SELECT count(*), count(*) FILTER (WHERE status = 'completed'), count(*) FILTER (WHERE attempt <> 1)
		FROM tasks WHERE batch_id = $1`, batchID).Scan(&tasks, &completed, &retried); err != nil {
		return err
	}
	if want := r.files + r.files/10; tasks != want || completed != tasks || retried != 0 {
		return fmt.Errorf("%d tasks (want %d), %d completed, %d retried", tasks, want, completed, retried)
	}
	r.tasks = tasks
	if r.mode != "pooled" {
		return nil
	}
	var machines int
	if err := conn.QueryRow(ctx, `WITH ends AS (
			SELECT phase, max(finished_at) AS last FROM tasks WHERE batch_id = $1 GROUP BY phase)
		SELECT count(*), coalesce(sum(m.busy_ms), 0) / 1000.0,
			coalesce(sum(extract(epoch FROM least(coalesce(m.ended_at, e.last), e.last) - m.created_at)), 0)::float8
		FROM pool_machines m JOIN pools p ON p.id = m.pool_id JOIN ends e ON e.phase = p.phase
		WHERE p.batch_id = $1 AND m.machine_id IS NOT NULL`, batchID).Scan(&machines, &r.busy, &r.live); err != nil {
		return err
	}
	// A launch answered 429 made no machine, and its row has no id.
	if machines != r.machines {
		return fmt.Errorf("the pools recorded %d launched machines, the Machines API created %d", machines, r.machines)
	}
	return nil
}

// poolsProjection is the per-task run's time projected to tasks: its pace
// is the creation limit's, a task a second, so its time is linear in the
// tasks.
func poolsProjection(perTask poolsRun, tasks int) time.Duration {
	return time.Duration(float64(perTask.wall) * float64(tasks) / float64(perTask.tasks))
}

// poolsSplit is the per-task run, if any, and the pooled runs.
func poolsSplit(runs []poolsRun) (perTask *poolsRun, pooled []poolsRun) {
	for i := range runs {
		if runs[i].mode == "per-task" {
			perTask = &runs[i]
		} else {
			pooled = append(pooled, runs[i])
		}
	}
	return perTask, pooled
}

func poolsTable(runs []poolsRun) string {
	var b strings.Builder
	perTask, pooled := poolsSplit(runs)
	if perTask != nil {
		fmt.Fprintf(&b, "%-44s %14s\n", fmt.Sprintf("pools: per-task, %d files (%d tasks)", perTask.files, perTask.tasks), perTask.wall.Round(100*time.Millisecond))
		fmt.Fprintf(&b, "%-44s %14d\n", "  machines created", perTask.machines)
	}
	for _, r := range pooled {
		fmt.Fprintf(&b, "%-44s %14s\n", fmt.Sprintf("pools: pooled, %d files (%d tasks)", r.files, r.tasks), r.wall.Round(100*time.Millisecond))
		fmt.Fprintf(&b, "%-44s %14d\n", "  machines created", r.machines)
		fmt.Fprintf(&b, "%-44s %14.2f\n", "  pool efficiency (busy / live machine-s)", r.efficiency())
		fmt.Fprintf(&b, "%-44s %14d\n", "  creations answered 429 by the fake", r.limited)
		fmt.Fprintf(&b, "%-44s %11.0f MB\n", "  orchestrator peak RSS", float64(r.peakRSS)/1e6)
		if perTask != nil {
			projected := poolsProjection(*perTask, r.tasks)
			fmt.Fprintf(&b, "%-44s %14s\n", fmt.Sprintf("  per-task, projected to %d tasks", r.tasks), projected.Round(time.Second))
			fmt.Fprintf(&b, "%-44s %13.1fx\n", "  per-task (projected) / pooled", float64(projected)/float64(r.wall))
		}
	}
	return b.String()
}

func poolsMarkdown(opts poolsOptions) string {
	return fmt.Sprintf(`- **Pools**: batches whose files are every tenth a TIFF (a TIFF task, then an
  image task for its JPEG) and the rest JPEGs, through `+"`orchestrator serve`"+`
  against the fake Machines API enforcing Fly's documented creation limit (%d
  machine a second per app, bursts of %d; the orchestrator's launch limiter at
  its defaults, which are the same), each task taking %s on its machine.
  Per-task: %d files on a machine per task; its time is projected linearly to
  the pooled batch's tasks (a machine per task goes at the creation limit's
  pace, a task a second), not run at that size. Pooled: the default pools
  (%s: 20 machines a phase). Pool efficiency is the pool machines' busy
  machine-seconds (lease to next lease request) over their machine-seconds
  from creation to the end of their phase's last task.
`, flyCreateRate, flyCreateBurst, poolTaskTime, opts.perTaskFiles, "`POOL_SIZE_<PHASE>`")
}

func poolsTargets(runs []poolsRun, row func(figure, target, got string, met bool)) {
	perTask, pooled := poolsSplit(runs)
	for i, r := range pooled {
		switch {
		case i == 0 && r.files == 1000:
			row("pooled, 1,000 files, Fly's creation limit", "<= 140 s", r.wall.Round(100*time.Millisecond).String(), r.wall <= 140*time.Second)
			if perTask != nil {
				ratio := float64(poolsProjection(*perTask, r.tasks)) / float64(r.wall)
				row("per-task (projected) / pooled, 1,000 files", ">= 7x", fmt.Sprintf("%.1fx", ratio), ratio >= 7)
			}
			row("pool efficiency, 1,000 files", ">= 0.85", fmt.Sprintf("%.2f", r.efficiency()), r.efficiency() >= 0.85)
		case r.files == 10000:
			row("pooled, 10,000 files, default settings", "<= 20 min", r.wall.Round(time.Second).String(), r.wall <= 20*time.Minute)
		}
	}
}
