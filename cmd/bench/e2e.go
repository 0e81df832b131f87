package main

// The end-to-end figures (issue 5): whole batches through `orchestrator
// serve` as a separate process, so that its peak RSS is its own.
//
// Around it, in this process: a real S3 server (versitygw, as in tests)
// holding the manifest, the fake Fly Machines API (internal/fakes/fakefly, reached
// through the orchestrator's real fly-go client) whose machines call back at
// once with the bodies real workers send, and a fake ingest service that
// receives the final manifest. Launches are unlimited (FLY_LAUNCH_RATE and
// FLY_LAUNCH_BURST far above what is launched).

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/oklog/ulid/v2"

	"github.com/arke-institute/orchestrator/blob"
	"github.com/arke-institute/orchestrator/client"
	"github.com/arke-institute/orchestrator/internal/fakes/fakefly"
	"github.com/arke-institute/orchestrator/locals3"
	"github.com/arke-institute/orchestrator/manifest"
	"github.com/arke-institute/orchestrator/phases"
)

// e2eOptions configure the end-to-end part.
type e2eOptions struct {
	sizes        []int  // files per batch
	runs         int    // runs of each size (and binary)
	orchestrator string // the binary
	profileDir   string // "" or where to write profiles
	// settings override e2eSettings (-e2e-env), e.g. to measure spec 000's
	// launch pacing.
	settings map[string]string
}

// e2eSettings are what the bench sets in the orchestrator's environment
// beyond addresses and credentials, as an operator of a Fly account without
// a launch limit would: no rate limit to speak of, and a launch round that
// takes every pending task (BATCH_SIZE), so the alarm delay between rounds
// (ALARM_DELAY, spec 000's 5 s) never comes into play.
var e2eSettings = func() map[string]string {
	s := map[string]string{
		"FLY_LAUNCH_RATE":  "1000000",
		"FLY_LAUNCH_BURST": "1000000",
		"LOG_LEVEL":        "warn",
		"LOG_FORMAT":       "json",
		"CDN_PUBLIC_URL":   "https://cdn.bench.invalid",
		"ADMIN_TOKEN":      "bench-admin-token",
		"READ_TOKEN":       "bench-read-token",
		"INGEST_TOKEN":     "bench-ingest-token",
		"R2_BUCKET":        benchStaging,
		"ARCHIVE_BUCKET":   "bench-archive",
		"CDN_BUCKET":       "bench-cdn",
	}
	for _, p := range phases.All() {
		spec := p.Spec()
		s["BATCH_SIZE_"+string(spec.Name)] = "1000000"
		s["FLY_"+spec.Short+"_APP_NAME"] = "bench-" + spec.Worker + "-worker"
	}
	maps.Copy(s, perTaskMachines())
	return s
}()

// perTaskMachines are the settings that run every phase with a worker
// program on a machine per task (the parts that measure the launcher and
// the callback path of per-task machines; the pools part compares).
func perTaskMachines() map[string]string {
	s := map[string]string{}
	for _, p := range phases.All() {
		if spec := p.Spec(); spec.Worker != "" {
			s["EXECUTOR_"+string(spec.Name)] = "machine"
		}
	}
	return s
}

const (
	benchStaging  = "bench-staging"
	benchFlyToken = "bench-fly-token"
	e2eFileSize   = 200_000 // bytes per file in the manifest; the files do not exist
	e2eDirFiles   = 1000    // files per manifest directory
)

// e2eRun is one batch end to end.
type e2eRun struct {
	files, tasks int
	// wall is from just before POST /batches to the first GET /status that
	// answers DONE (polled every e2ePoll).
	wall time.Duration
	// launches is every launch request the fake Machines API answered.
	launches int
	// imageLaunchSpan is from the first to the last claim of an
	// IMAGE_PROCESSING task (the big phase): the launcher's own pace.
	imageLaunchSpan time.Duration
	imageTasks      int
	// transitions: the last callback of a phase (its tasks' max
	// finished_at) to the first launch of the next (min launched_at, set
	// when the launcher claims the task just before its launch request), or
	// to the batch's DONE (completed_at) after the last phase.
	transitions []time.Duration
	// firstLaunch is from POST /batches to the first task's launch.
	firstLaunch time.Duration
	// peakRSS is the orchestrator's VmHWM at the end, in bytes.
	peakRSS int64
	// cpu is how busy the machine was from POST /batches to DONE, and
	// who kept it busy.
	cpu cpuUse
	// timeline says when each step happened, from POST /batches.
	timeline string
	// priority is the priority probes' figures, in the first run of the
	// largest batch (priority.go); nil in every other run.
	priority *priorityProbe
}

// e2eSize is every run of one batch size.
type e2eSize struct {
	files int
	label string // which binary, in an A/B comparison
	runs  []e2eRun
}

// e2ePoll is how often the bench asks GET /status while a batch runs: as
// a client would, and rarely enough not to load the server it measures.
const e2ePoll = 50 * time.Millisecond

// buildOrchestrator builds cmd/orchestrator into a temporary directory.
func buildOrchestrator(ctx context.Context) (string, func(), error) {
	dir, err := os.MkdirTemp("", "bench-orchestrator-")
	if err != nil {
		return "", nil, err
	}
	bin := filepath.Join(dir, "orchestrator")
	out, err := exec.CommandContext(ctx, "go", "build", "-o", bin, "./cmd/orchestrator").CombinedOutput()
	if err != nil {
		os.RemoveAll(dir)
		return "", nil, fmt.Errorf("building the orchestrator (run the bench from the repository root): %v: %s", err, out)
	}
	return bin, func() { os.RemoveAll(dir) }, nil
}

// e2eEnv is what every run shares: the S3 server and the fake ingest.
type e2eEnv struct {
	opts   e2eOptions
	admin  *pgx.Conn
	base   string
	s3     blob.S3Config
	store  *blob.S3
	ingest *fakeIngest
	tmp    string
	stopS3 context.CancelFunc
}

// newE2EEnv starts the S3 server, with the bench's buckets, and the fake
// ingest; close stops them.
func newE2EEnv(ctx context.Context, admin *pgx.Conn, base string, opts e2eOptions) (env *e2eEnv, err error) {
	tmp, err := os.MkdirTemp("", "bench-e2e-")
	if err != nil {
		return nil, err
	}
	s3ctx, stopS3 := context.WithCancel(ctx)
	env = &e2eEnv{opts: opts, admin: admin, base: base, tmp: tmp, stopS3: stopS3}
	defer func() {
		if err != nil {
			env.close()
		}
	}()
	srv, err := locals3.Start(s3ctx, locals3.Options{Dir: filepath.Join(tmp, "s3"), Addr: "127.0.0.1:0", AccessKey: "bench", SecretKey: "bench-secret"})
	if err != nil {
		return nil, err
	}
	env.s3 = srv.Config()
	if env.store, err = blob.NewS3(env.s3); err != nil {
		return nil, err
	}
	for _, b := range []string{benchStaging, "bench-archive", e2eSettings["CDN_BUCKET"]} {
		if err := env.store.EnsureBucket(ctx, b); err != nil {
			return nil, err
		}
	}
	env.ingest = newFakeIngest()
	return env, nil
}

func (env *e2eEnv) close() {
	if env.ingest != nil {
		env.ingest.close()
	}
	env.stopS3()
	os.RemoveAll(env.tmp)
}

// endToEnd runs every size and returns the figures.
func endToEnd(ctx context.Context, admin *pgx.Conn, base string, opts e2eOptions) ([]e2eSize, error) {
	env, err := newE2EEnv(ctx, admin, base, opts)
	if err != nil {
		return nil, err
	}
	defer env.close()

	bins := strings.Split(opts.orchestrator, ",")
	runs := max(1, opts.runs)
	var out []e2eSize
	for _, n := range opts.sizes {
		// The priority probes ride on the first run of the largest size
		// only: they would triple its cost in every run, and the other
		// runs stay free of them.
		probe := n >= 10000 && n == slices.Max(opts.sizes)
		sizes := make([]e2eSize, len(bins))
		for i := range runs {
			// With several binaries (an A/B comparison), they take turns,
			// so that both meet the same noise.
			for j, bin := range bins {
				fmt.Fprintf(os.Stderr, "e2e: %d files, run %d of %d, %s...\n", n, i+1, runs, bin)
				r, err := env.runOnce(ctx, bin, n, i*len(bins)+j, probe && i == 0)
				if err != nil {
					return nil, fmt.Errorf("%d files, run %d: %w", n, i+1, err)
				}
				fmt.Fprintf(os.Stderr, "e2e: %d files: %s to DONE, %d launches, transitions %v, peak RSS %.0f MB\n",
					n, r.wall.Round(time.Millisecond), r.launches, roundAll(r.transitions), float64(r.peakRSS)/1e6)
				fmt.Fprintf(os.Stderr, "e2e: %s\n", r.timeline)
				sizes[j].files = n
				if len(bins) > 1 {
					sizes[j].label = fmt.Sprintf("[%c] ", 'A'+j)
				}
				sizes[j].runs = append(sizes[j].runs, r)
			}
		}
		out = append(out, sizes...)
	}
	return out, nil
}

// orchestratorRun is one `orchestrator serve` on a fresh database, with the
// fake Machines API it launches on.
type orchestratorRun struct {
	dbURL     string
	fly       *fakefly.Server
	tb        *benchTB // the fake's; err reports what it saw go wrong
	proc      *orchestratorProc
	api       *client.Client
	pprofAddr string // "" unless -profile
	label     string // names its log and profiles
	cleanups  []func()
	// settings and logDir are proc's, for the processes addProcess starts.
	settings map[string]string
	logDir   string
}

// startRun creates database dbName afresh and starts bin on it, against a
// fake Machines API of fly's options (its token is the bench's). Its
// settings are the bench's addresses and credentials, e2eSettings, then
// settings.
func (env *e2eEnv) startRun(ctx context.Context, bin, dbName, label string, fly fakefly.Options,
	settings map[string]string) (r *orchestratorRun, err error) {
	r = &orchestratorRun{label: label}
	defer func() {
		if err != nil {
			r.close()
		}
	}()
	if r.dbURL, err = freshDatabase(ctx, env.admin, env.base, dbName); err != nil {
		return r, err
	}
	r.cleanups = append(r.cleanups, func() {
		env.admin.Exec(context.WithoutCancel(ctx), "DROP DATABASE IF EXISTS "+dbName+" WITH (FORCE)") //nolint:errcheck // a leftover database is dropped by the next run
	})
	r.tb = &benchTB{}
	r.cleanups = append(r.cleanups, r.tb.close)
	fly.Token, fly.DetailLimit = benchFlyToken, 1
	r.fly = fakefly.New(r.tb, fly)

	addr, err := freePort()
	if err != nil {
		return r, err
	}
	all := map[string]string{
		"DATABASE_URL":         r.dbURL,
		"LISTEN_ADDR":          addr,
		"ORCHESTRATOR_URL":     "http://" + addr,
		"WORKER_URL":           env.ingest.srv.URL,
		"R2_ENDPOINT":          env.s3.Endpoint,
		"R2_ACCESS_KEY_ID":     env.s3.AccessKeyID,
		"R2_SECRET_ACCESS_KEY": env.s3.SecretAccessKey,
		"FLY_API_TOKEN":        benchFlyToken,
		"FLY_FLAPS_BASE_URL":   r.fly.URL,
	}
	maps.Copy(all, e2eSettings)
	maps.Copy(all, settings)
	if env.opts.profileDir != "" {
		if err := os.MkdirAll(env.opts.profileDir, 0o755); err != nil {
			return r, err
		}
		if r.pprofAddr, err = freePort(); err != nil {
			return r, err
		}
		all["PPROF_ADDR"] = r.pprofAddr
		all["CPU_PROFILE"] = filepath.Join(env.opts.profileDir, "cpu-"+label+".pprof")
	}
	logDir := env.tmp
	if env.opts.profileDir != "" {
		logDir = env.opts.profileDir // kept for reading beside the profiles
	}
	r.settings, r.logDir = all, logDir
	if r.proc, err = startOrchestrator(ctx, bin, all, filepath.Join(logDir, "orchestrator-"+label+".log")); err != nil {
		return r, err
	}
	r.cleanups = append(r.cleanups, func() { r.proc.stop() }) //nolint:errcheck // a failed stop is reported by the run's own checks
	if r.api, err = client.New(client.Config{URL: "http://" + addr, AdminToken: all["ADMIN_TOKEN"], ReadToken: all["READ_TOKEN"], IngestToken: all["INGEST_TOKEN"]}); err != nil {
		return r, err
	}
	return r, r.proc.awaitHealthy(ctx, r.api)
}

// addProcess starts one more process of bin on r's database, a second
// orchestrator of the fleet: r's settings, an address of its own, no
// profiles.
func (r *orchestratorRun) addProcess(ctx context.Context, bin string) error {
	addr, err := freePort()
	if err != nil {
		return err
	}
	all := maps.Clone(r.settings)
	all["LISTEN_ADDR"], all["ORCHESTRATOR_URL"] = addr, "http://"+addr
	delete(all, "PPROF_ADDR")
	delete(all, "CPU_PROFILE")
	n := len(r.cleanups)
	proc, err := startOrchestrator(ctx, bin, all, filepath.Join(r.logDir, fmt.Sprintf("orchestrator-%s-%d.log", r.label, n)))
	if err != nil {
		return err
	}
	r.cleanups = append(r.cleanups, func() { proc.stop() }) //nolint:errcheck // as the first process's
	api, err := client.New(client.Config{URL: "http://" + addr, AdminToken: all["ADMIN_TOKEN"], ReadToken: all["READ_TOKEN"], IngestToken: all["INGEST_TOKEN"]})
	if err != nil {
		return err
	}
	return proc.awaitHealthy(ctx, api)
}

// close stops the process and the fake and drops the database.
func (r *orchestratorRun) close() {
	for i := len(r.cleanups) - 1; i >= 0; i-- {
		r.cleanups[i]()
	}
	r.cleanups = nil
}

// process submits msg and waits until its batch is DONE and its final
// manifest, listing wantFiles files, has been delivered to ingest. wall is
// from just before POST /batches to the first GET /status that answers
// DONE; onPoll, when not nil, sees every status read until then.
func (r *orchestratorRun) process(ctx context.Context, env *e2eEnv, msg manifest.QueueMessage, timeout time.Duration,
	wantFiles int64, onPoll func(client.Status)) (start time.Time, wall time.Duration, err error) {
	batchID := msg.BatchID
	delivered := env.ingest.expect(batchID)
	start = time.Now()
	acc, err := r.api.Submit(ctx, msg)
	if err != nil {
		return start, 0, err
	}
	if !acc.Created {
		return start, 0, fmt.Errorf("POST /batches answered 200: batch %s was known already (status %s)", batchID, acc.Status)
	}
	waitCtx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	st, err := r.api.Await(waitCtx, batchID, e2ePoll, func(st client.Status) bool {
		if onPoll != nil {
			onPoll(st)
		}
		return st.Ended()
	})
	switch {
	case err != nil && ctx.Err() == nil && waitCtx.Err() != nil:
		return start, 0, fmt.Errorf("batch %s not DONE after %s (status %s); orchestrator log: %s", batchID, timeout, st.Status, r.proc.logTail())
	case err != nil:
		return start, 0, err
	case st.Status == client.StatusError:
		return start, 0, fmt.Errorf("batch %s ended in ERROR; orchestrator log: %s", batchID, r.proc.logTail())
	}
	wall = time.Since(start)
	var files int64
	select {
	case files = <-delivered:
	case <-time.After(2 * time.Minute):
		return start, wall, fmt.Errorf("the final manifest of %s never reached ingest; orchestrator log: %s", batchID, r.proc.logTail())
	}
	if files != wantFiles {
		return start, wall, fmt.Errorf("ingest received %d files, want %d", files, wantFiles)
	}
	// The delivery is recorded after ingest answered: wait for it, so that
	// stopping the process interrupts nothing.
	st, err = r.api.Await(waitCtx, batchID, e2ePoll, func(st client.Status) bool { return st.Ingest.Status == client.IngestDelivered })
	switch {
	case err != nil && ctx.Err() == nil && waitCtx.Err() != nil:
		return start, wall, fmt.Errorf("the delivery of %s was never recorded (ingest status %q)", batchID, st.Ingest.Status)
	case err != nil:
		return start, wall, err
	}
	return start, wall, nil
}

// finish fetches the profiles (with -profile), reads the peak RSS, stops
// the process and reports what the fake Machines API saw go wrong.
func (r *orchestratorRun) finish(ctx context.Context, env *e2eEnv) (peakRSS int64, err error) {
	if r.pprofAddr != "" {
		for _, p := range []string{"heap", "allocs", "mutex", "block", "goroutine"} {
			if err := fetchProfile(ctx, "http://"+r.pprofAddr+"/debug/pprof/"+p, filepath.Join(env.opts.profileDir, p+"-"+r.label+".pprof")); err != nil {
				return 0, err
			}
		}
	}
	if peakRSS, err = r.proc.peakRSS(); err != nil {
		return 0, err
	}
	if err := r.proc.stop(); err != nil {
		return 0, err
	}
	return peakRSS, r.tb.err()
}

// runOnce takes one batch of n files through a fresh database and a fresh
// orchestrator process; with probe, the priority probes too.
func (env *e2eEnv) runOnce(ctx context.Context, bin string, n, i int, probe bool) (e2eRun, error) {
	r := e2eRun{files: n}
	run, err := env.startRun(ctx, bin, fmt.Sprintf("bench_e2e_%d_%d", n, i), fmt.Sprintf("%d-%d", n, i), fakefly.Options{Behave: fakefly.Succeed}, env.opts.settings)
	if err != nil {
		return r, err
	}
	defer run.close()

	batchID := ulid.Make().String()
	msg, err := env.uploadManifest(ctx, batchID, e2eGroups("staging/"+batchID+"/", n))
	if err != nil {
		return r, err
	}
	// The priority probes (priority.go): one on the idle process first,
	// one submitted halfway through the batch.
	var pp *priorityProbe
	var loaded *loadedProbe
	var onPoll func(client.Status)
	if probe {
		pp = &priorityProbe{}
		id, wall, err := env.runProbe(ctx, run)
		if err != nil {
			return r, fmt.Errorf("the priority probe on the idle system: %w", err)
		}
		pp.idle, pp.ids = wall, []string{id}
		loaded = newLoadedProbe(env, run, pp)
		onPoll = func(st client.Status) { loaded.onPoll(ctx, st) }
	}
	cpu0, err := sampleCPU(run.proc.cmd.Process.Pid)
	if err != nil {
		return r, err
	}
	// Every TIFF is kept beside its JPEG's ref.json.
	start, wall, err := run.process(ctx, env, msg, 2*time.Minute+time.Duration(n)*10*time.Millisecond, int64(n+n/10), onPoll)
	if err != nil {
		return r, err
	}
	r.wall = wall
	cpu1, err := sampleCPU(run.proc.cmd.Process.Pid)
	if err != nil {
		return r, err
	}
	r.cpu = cpu0.to(cpu1)
	counts := run.fly.Counts()
	if loaded != nil {
		if err := loaded.wait(ctx); err != nil {
			return r, fmt.Errorf("the priority probe during the batch: %w", err)
		}
		r.priority = pp
		fmt.Fprintf(os.Stderr, "e2e: priority probe: %s idle, %s during the %d-file batch (submitted at %.0f%% of its last phase, %d callbacks queued in the fake)\n",
			pp.idle.Round(time.Millisecond), pp.loaded.Round(time.Millisecond), n, 100*pp.bigDone, pp.queued)
		if err := probeTimeline(ctx, run.dbURL, pp.ids[len(pp.ids)-1]); err != nil {
			return r, err
		}
		// The Machines API counted the probes' launches with the big batch's.
		extra, err := probeTasks(ctx, run.dbURL, pp.ids)
		if err != nil {
			return r, err
		}
		counts = run.fly.Counts()
		counts.Launches, counts.Created, counts.Callbacks = counts.Launches-extra, counts.Created-extra, counts.Callbacks-extra
	}
	if r.peakRSS, err = run.finish(ctx, env); err != nil {
		return r, err
	}
	r.launches = counts.Launches
	if err := collect(ctx, run.dbURL, batchID, start, counts, &r); err != nil {
		return r, err
	}
	return r, nil
}

// collect reads the figures from the database and checks the batch: DONE,
// every task completed, one machine per task, and no launch more than tasks.
func collect(ctx context.Context, dbURL, batchID string, start time.Time, counts fakefly.Counts, r *e2eRun) error {
	conn, err := pgx.Connect(ctx, dbURL)
	if err != nil {
		return err
	}
	defer conn.Close(ctx)
	var status string
	var completedAt time.Time
	if err := conn.QueryRow(ctx, "SELECT status, completed_at FROM batches WHERE id = $1", batchID).Scan(&status, &completedAt); err != nil {
		return err
	}
	if status != client.StatusDone {
		return fmt.Errorf("batch %s is %s", batchID, status)
	}
	rows, err := conn.Query(ctx, `SELECT phase, count(*), count(*) FILTER (WHERE status = 'completed'),
		count(DISTINCT machine_id), count(*) FILTER (WHERE attempt <> 1),
		min(launched_at), max(launched_at), max(finished_at)
		FROM tasks WHERE batch_id = $1 GROUP BY phase`, batchID)
	if err != nil {
		return err
	}
	type phaseRow struct {
		tasks, completed, machines, relaunched int
		firstLaunch, lastLaunch, lastEnd       time.Time
	}
	byPhase := map[string]phaseRow{}
	for rows.Next() {
		var name string
		var p phaseRow
		if err := rows.Scan(&name, &p.tasks, &p.completed, &p.machines, &p.relaunched, &p.firstLaunch, &p.lastLaunch, &p.lastEnd); err != nil {
			return err
		}
		byPhase[name] = p
	}
	if err := rows.Err(); err != nil {
		return err
	}
	tiff, image := byPhase[string(phases.TIFFConversion)], byPhase[string(phases.ImageProcessing)]
	wantTIFF := r.files / 10
	if tiff.tasks != wantTIFF || image.tasks != r.files || len(byPhase) != 2 {
		return fmt.Errorf("tasks per phase %v, want %d %s and %d %s", byPhase, wantTIFF, phases.TIFFConversion, r.files, phases.ImageProcessing)
	}
	for name, p := range byPhase {
		if p.completed != p.tasks || p.machines != p.tasks || p.relaunched != 0 {
			return fmt.Errorf("%s: %d tasks, %d completed, %d distinct machines, %d relaunched", name, p.tasks, p.completed, p.machines, p.relaunched)
		}
	}
	r.tasks = tiff.tasks + image.tasks
	if counts.Launches != r.tasks || counts.Created != r.tasks || counts.Callbacks != r.tasks {
		return fmt.Errorf("the Machines API saw %d launches, created %d machines and posted %d callbacks for %d tasks",
			counts.Launches, counts.Created, counts.Callbacks, r.tasks)
	}
	r.firstLaunch = tiff.firstLaunch.Sub(start)
	r.transitions = []time.Duration{image.firstLaunch.Sub(tiff.lastEnd), completedAt.Sub(image.lastEnd)}
	r.imageLaunchSpan = image.lastLaunch.Sub(image.firstLaunch)
	r.imageTasks = image.tasks
	// How the fan-in and the callbacks' group commit behaved: each fan-in
	// check is a job, which runs once and once more per snooze (waiting out
	// an open phase), and the callbacks of one group share their
	// transaction's timestamp.
	var checks, checkRuns, groups int
	var groupAvg float64
	if err := conn.QueryRow(ctx, `SELECT (SELECT count(*) FROM river_job WHERE kind = 'phase_check'),
		(SELECT coalesce(sum(1 + coalesce((metadata->>'snoozes')::int, 0)), 0) FROM river_job WHERE kind = 'phase_check'),
		count(*), coalesce(avg(n), 0) FROM (SELECT count(*) AS n FROM batch_events
		WHERE batch_id = $1 AND type = 'task.completed' GROUP BY created_at) g`, batchID).Scan(&checks, &checkRuns, &groups, &groupAvg); err != nil {
		return err
	}
	at := func(t time.Time) string { return t.Sub(start).Round(time.Millisecond).String() }
	r.timeline = fmt.Sprintf("TIFF launches %s..%s, last callback %s; IMAGE launches %s..%s, last callback %s; DONE %s",
		at(tiff.firstLaunch), at(tiff.lastLaunch), at(tiff.lastEnd), at(image.firstLaunch), at(image.lastLaunch), at(image.lastEnd), at(completedAt)) +
		fmt.Sprintf("; %d fan-in checks (%d runs); callbacks committed in %d groups of %.1f on average", checks, checkRuns, groups, groupAvg)
	return nil
}

// e2eGroups are the directories of a manifest of n files under prefix:
// every tenth a TIFF, the rest JPEGs, e2eDirFiles per directory.
func e2eGroups(prefix string, n int) []manifest.DirectoryGroup {
	return manifestGroups(prefix, n, e2eDirFiles, manifest.ProcessingConfig{Pinax: true}, func(i int) (string, string) {
		if i%10 == 0 {
			return fmt.Sprintf("scan%06d.tif", i), "image/tiff"
		}
		return fmt.Sprintf("img%06d.jpg", i), "image/jpeg"
	})
}

// manifestGroups are the directories of a manifest of n files under
// prefix, dirFiles per directory (/box0000, /box0001, ...), each with cfg;
// file gives the i-th file's name and content type.
func manifestGroups(prefix string, n, dirFiles int, cfg manifest.ProcessingConfig, file func(i int) (name, contentType string)) []manifest.DirectoryGroup {
	var groups []manifest.DirectoryGroup
	for i := range n {
		if i%dirFiles == 0 {
			groups = append(groups, manifest.DirectoryGroup{DirectoryPath: fmt.Sprintf("/box%04d", i/dirFiles), ProcessingConfig: cfg})
		}
		g := &groups[len(groups)-1]
		name, ctype := file(i)
		logical := g.DirectoryPath + "/" + name
		g.Files = append(g.Files, manifest.FileInfo{
			R2Key: prefix + logical[1:], LogicalPath: logical, FileName: name, FileSize: e2eFileSize, ContentType: ctype,
		})
	}
	return groups
}

// uploadManifest puts a manifest of groups (whose files are under
// staging/<batchID>/) in the staging bucket and returns the queue message
// that names it.
func (env *e2eEnv) uploadManifest(ctx context.Context, batchID string, groups []manifest.DirectoryGroup) (manifest.QueueMessage, error) {
	prefix := "staging/" + batchID + "/"
	m := manifest.Build(batchID, groups)
	body, err := json.Marshal(m)
	if err != nil {
		return manifest.QueueMessage{}, err
	}
	if err := env.store.Put(ctx, benchStaging, prefix+"_manifest.json", bytes.NewReader(body), int64(len(body)), "application/json"); err != nil {
		return manifest.QueueMessage{}, err
	}
	now := time.Now().UTC()
	return manifest.QueueMessage{
		BatchID: batchID, ManifestR2Key: prefix + "_manifest.json", R2Prefix: prefix,
		Uploader: "bench@arke.institute", RootPath: "/bench", ParentPI: "00000000000000000000000000",
		TotalFiles: m.TotalFiles, TotalBytes: m.TotalBytes, UploadedAt: now, FinalizedAt: now,
		Metadata: map[string]any{"source": "cmd/bench"},
	}, nil
}

func fetchProfile(ctx context.Context, url, file string) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	f, err := os.Create(file)
	if err != nil {
		return err
	}
	if _, err := io.Copy(f, resp.Body); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

func freePort() (string, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer l.Close()
	return l.Addr().String(), nil
}

// orchestratorProc is a running `orchestrator serve`.
type orchestratorProc struct {
	cmd     *exec.Cmd
	logFile string
	done    chan error
	once    sync.Once
	stopErr error
}

func startOrchestrator(ctx context.Context, bin string, settings map[string]string, logFile string) (*orchestratorProc, error) {
	f, err := os.Create(logFile)
	if err != nil {
		return nil, err
	}
	cmd := exec.CommandContext(ctx, bin, "serve")
	cmd.Env = os.Environ()
	for k, v := range settings {
		cmd.Env = append(cmd.Env, k+"="+v)
	}
	cmd.Stdout, cmd.Stderr = f, f
	if err := cmd.Start(); err != nil {
		f.Close()
		return nil, fmt.Errorf("starting %s serve: %w", bin, err)
	}
	p := &orchestratorProc{cmd: cmd, logFile: logFile, done: make(chan error, 1)}
	go func() { p.done <- cmd.Wait(); f.Close() }()
	return p, nil
}

// awaitHealthy waits until /healthz answers 200 (migrations applied).
func (p *orchestratorProc) awaitHealthy(ctx context.Context, api *client.Client) error {
	deadline := time.Now().Add(60 * time.Second)
	for {
		if api.Health(ctx) == nil {
			return nil
		}
		select {
		case err := <-p.done:
			p.done <- err
			return fmt.Errorf("the orchestrator exited (%v); its log: %s", err, p.logTail())
		default:
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("the orchestrator did not become healthy; its log: %s", p.logTail())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// peakRSS reads the process's high-water mark of resident memory.
func (p *orchestratorProc) peakRSS() (int64, error) {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", p.cmd.Process.Pid))
	if err != nil {
		return 0, fmt.Errorf("reading the orchestrator's peak RSS: %w", err)
	}
	for _, line := range strings.Split(string(data), "\n") {
		if rest, ok := strings.CutPrefix(line, "VmHWM:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(rest), "kB")), 10, 64)
			if err != nil {
				return 0, err
			}
			return kb << 10, nil
		}
	}
	return 0, errors.New("no VmHWM in /proc/PID/status")
}

// stop sends SIGTERM and waits for a clean exit (the CPU profile is written
// then); after 30 s it kills.
func (p *orchestratorProc) stop() error {
	p.once.Do(func() {
		_ = p.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case err := <-p.done:
			if err != nil {
				p.stopErr = fmt.Errorf("the orchestrator exited with %v; its log: %s", err, p.logTail())
			}
		case <-time.After(30 * time.Second):
			_ = p.cmd.Process.Kill()
			<-p.done //nolint:errcheck // killed: its exit error says nothing new
			p.stopErr = errors.New("the orchestrator did not stop within 30 s of SIGTERM")
		}
	})
	return p.stopErr
}

func (p *orchestratorProc) logTail() string {
	data, _ := os.ReadFile(p.logFile)
	if len(data) > 4000 {
		data = data[len(data)-4000:]
	}
	return string(data)
}

// fakeIngest is the ingest service: it receives each batch's final
// manifest and reports how many files it listed.
type fakeIngest struct {
	srv     *httptest.Server
	mu      sync.Mutex
	waiters map[string]chan int64
}

func newFakeIngest() *fakeIngest {
	in := &fakeIngest{waiters: map[string]chan int64{}}
	in.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var body struct {
			BatchID  string `json:"batch_id"`
			Manifest struct {
				TotalFiles int64 `json:"total_files"`
			} `json:"manifest"`
		}
		if err := json.NewDecoder(r.Body).Decode(&body); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		in.mu.Lock()
		ch := in.waiters[body.BatchID]
		delete(in.waiters, body.BatchID)
		in.mu.Unlock()
		if ch != nil {
			ch <- body.Manifest.TotalFiles
		}
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"ok":true}`))
	}))
	return in
}

// expect returns a channel that receives the file count of the batch's
// final manifest when ingest receives it.
func (in *fakeIngest) expect(batchID string) <-chan int64 {
	ch := make(chan int64, 1)
	in.mu.Lock()
	in.waiters[batchID] = ch
	in.mu.Unlock()
	return ch
}

func (in *fakeIngest) close() { in.srv.Close() }

// benchTB lets the bench use fakefly, which is written for tests: it
// collects errors and runs cleanups when the run ends.
type benchTB struct {
	mu       sync.Mutex
	errs     []string
	cleanups []func()
}

func (*benchTB) Helper() {}

func (t *benchTB) Errorf(format string, args ...any) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.errs = append(t.errs, fmt.Sprintf(format, args...))
}

func (t *benchTB) Cleanup(f func()) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.cleanups = append(t.cleanups, f)
}

func (t *benchTB) err() error {
	t.mu.Lock()
	defer t.mu.Unlock()
	if len(t.errs) > 0 {
		return errors.New(strings.Join(t.errs, "; "))
	}
	return nil
}

func (t *benchTB) close() {
	t.mu.Lock()
	cs := t.cleanups
	t.cleanups = nil
	t.mu.Unlock()
	for i := len(cs) - 1; i >= 0; i-- {
		cs[i]()
	}
}

var _ fakefly.TB = (*benchTB)(nil)

func roundAll(ds []time.Duration) []time.Duration {
	out := make([]time.Duration, len(ds))
	for i, d := range ds {
		out[i] = d.Round(time.Millisecond)
	}
	return out
}

// e2eSummary is a size's figures over its runs.
type e2eSummary struct {
	runs int
	wall time.Duration // POST -> DONE, the median of the runs'
	// launchRate and imageRate are the medians of the runs' launches/s
	// and image launches/s.
	launchRate, imageRate float64
	// transitions are every run's phase transitions, sorted: two a run.
	transitions []time.Duration
	// transitionP50 is their median (the mean of the two middle ones for
	// an even count), transitionMax the longest.
	transitionP50, transitionMax time.Duration
	peakRSS                      int64  // the largest of the runs'
	cpu                          cpuUse // the medians of the runs'
}

func (s e2eSize) summary() e2eSummary {
	var walls, trans []time.Duration
	var rates, imageRates []float64
	var rss int64
	var busy, orch, pg []float64
	for _, r := range s.runs {
		busy, orch, pg = append(busy, r.cpu.busy), append(orch, r.cpu.orchestrator), append(pg, r.cpu.postgres)
		walls = append(walls, r.wall)
		trans = append(trans, r.transitions...)
		rates = append(rates, float64(r.launches)/r.wall.Seconds())
		if r.imageLaunchSpan > 0 {
			imageRates = append(imageRates, float64(r.imageTasks)/r.imageLaunchSpan.Seconds())
		}
		rss = max(rss, r.peakRSS)
	}
	slices.Sort(trans)
	sum := e2eSummary{runs: len(s.runs), wall: median(walls), launchRate: median(rates), imageRate: median(imageRates),
		transitions: trans, transitionP50: median(trans), peakRSS: rss,
		cpu: cpuUse{busy: median(busy), orchestrator: median(orch), postgres: median(pg)}}
	if len(trans) > 0 {
		sum.transitionMax = trans[len(trans)-1]
	}
	return sum
}

// e2eWidth is the width of the end-to-end and priority rows' labels.
const e2eWidth = 52

// e2eTable renders the end-to-end rows: per size the median wall time and
// each run's, the median launch rates, the phase transitions' median and
// maximum over every run of the size, and the highest peak RSS.
func e2eTable(sizes []e2eSize) string {
	var b strings.Builder
	row := func(label, value string) { fmt.Fprintf(&b, "%-*s %14s\n", e2eWidth, label, value) }
	wall := map[string]time.Duration{}
	for _, s := range sizes {
		var launches int
		for _, r := range s.runs {
			launches = r.launches // the same every run: one a task
		}
		sum := s.summary()
		key := s.label + strconv.Itoa(s.files)
		wall[key] = sum.wall
		name := fmt.Sprintf("%se2e %d files: ", s.label, s.files)
		of := ""
		if sum.runs > 1 {
			of = fmt.Sprintf(" (median of %d)", sum.runs)
		}
		row(name+"POST -> DONE"+of, sum.wall.Round(time.Millisecond).String())
		if sum.runs > 1 {
			for i, r := range s.runs {
				label := fmt.Sprintf("  run %d", i+1)
				if r.priority != nil {
					label += " (with the priority probes)"
				}
				row(label, r.wall.Round(time.Millisecond).String())
			}
		}
		row(fmt.Sprintf("%slaunches/s (%d / wall)", name, launches), fmt.Sprintf("%.0f", sum.launchRate))
		row(name+"image launches/s (claim span)", fmt.Sprintf("%.0f", sum.imageRate))
		row(fmt.Sprintf("%stransition p50 (median of %d)", name, len(sum.transitions)), sum.transitionP50.Round(time.Millisecond).String())
		row(fmt.Sprintf("%stransition max (of %d)", name, len(sum.transitions)), sum.transitionMax.Round(time.Millisecond).String())
		rss := name + "orchestrator peak RSS"
		if sum.runs > 1 {
			rss += fmt.Sprintf(" (max of %d)", sum.runs)
		}
		row(rss, fmt.Sprintf("%.0f MB", float64(sum.peakRSS)/1e6))
		row(name+"machine CPU busy (median)", fmt.Sprintf("%.0f%%", 100*sum.cpu.busy))
		row(name+"  of it orchestrator / PostgreSQL", fmt.Sprintf("%.0f%% / %.0f%%", 100*sum.cpu.orchestrator, 100*sum.cpu.postgres))
	}
	for _, label := range []string{"", "[A] ", "[B] ", "[C] "} {
		if t10, t100 := wall[label+"10000"], wall[label+"100000"]; t10 > 0 && t100 > 0 {
			fmt.Fprintf(&b, "%-*s %13.2fx\n", e2eWidth, label+"e2e scaling t(100k)/t(10k) (medians)", float64(t100)/float64(t10))
		}
	}
	return b.String()
}

// e2eMarkdown describes the end-to-end part.
func e2eMarkdown(opts e2eOptions) string {
	merged := maps.Clone(e2eSettings)
	maps.Copy(merged, opts.settings)
	var keys []string
	for k, v := range merged {
		if v != "" && (strings.HasPrefix(k, "BATCH_SIZE_") || strings.HasPrefix(k, "FLY_LAUNCH_") || strings.HasPrefix(k, "ALARM_DELAY_") ||
			k == "LAUNCH_CONCURRENCY" || k == "DATABASE_MAX_CONNS") {
			keys = append(keys, k+"="+v)
		}
	}
	slices.Sort(keys)
	runs := max(1, opts.runs)
	return fmt.Sprintf(`- **End to end**: batches of each size (%s files; 10%% TIFF, 90%% JPEG, so
  1.1 launches per file: the TIFFs' JPEGs are processed too), each size run %d
  times (`+"`-e2e-runs`"+`), every run through `+"`orchestrator serve`"+` as a separate
  process with a fresh database, against the fake Fly Machines API
  (`+"`internal/fakes/fakefly`"+`, through the real fly-go client; every machine calls
  back at once with a real worker's success body) and a real S3 server holding
  the manifest; a fake ingest service receives the final manifest. The bench,
  the fake API and Postgres share the machine with the orchestrator.
  - *POST -> DONE*: from just before `+"`POST /batches`"+` to the first `+"`GET /status`"+`
    (polled every %s) that answers DONE; the median of the size's runs, each
    run listed below it.
  - *launches/s*: launch requests over that wall time; *image launches/s*: the
    IMAGE_PROCESSING tasks over the span from their first to their last claim;
    each the median of the runs' figures.
  - *transition*: from the last callback of a phase (max `+"`tasks.finished_at`"+`) to
    the first launch of the next (min `+"`tasks.launched_at`"+`, stamped when the
    launcher claims the task right before its launch request), or to the batch's
    DONE (`+"`completed_at`"+`) after the last phase; two per run, pooled over the
    size's runs: *p50* is their median (the mean of the two middle ones for an
    even count), *max* the longest.
  - *peak RSS*: the orchestrator's VmHWM from /proc at the end of the run; the
    highest of the size's runs.
  - *machine CPU busy*: the machine's CPU time spent (all but idle and iowait,
    /proc/stat) over the CPU time there was, from POST to DONE; and the
    orchestrator's and PostgreSQL's shares of it (their processes' user and
    system time, with their reaped children's): medians of the size's runs.
    The rest is the bench itself, the fake Machines API and its workers, and
    the S3 server. A figure near 100%% says the machine, not a wait, bounds the
    batch.
  - Checked every run: the batch ends DONE; every task completed at its first
    attempt with a machine of its own; the API saw exactly one launch and one
    callback per task; ingest received the final manifest with every file.
  - Settings the bench gives the orchestrator as an operator of a Fly account
    without a launch limit would: %s. BATCH_SIZE this high makes one launch
    round take every pending task, so spec 000's ALARM_DELAY between rounds
    never applies; everything else is at its default.
`, strings.Trim(strings.Join(strings.Fields(fmt.Sprint(opts.sizes)), ", "), "[]"), runs, e2ePoll, strings.Join(keys, ", "))
}
