package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"os"
	"path/filepath"
	"runtime/pprof"
	"strings"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/arke-institute/orchestrator/blob"
	"github.com/arke-institute/orchestrator/compute"
	"github.com/arke-institute/orchestrator/compute/flycompute"
	"github.com/arke-institute/orchestrator/config"
	"github.com/arke-institute/orchestrator/db"
	"github.com/arke-institute/orchestrator/executor"
	"github.com/arke-institute/orchestrator/executor/machine"
	"github.com/arke-institute/orchestrator/internal/fakes/fakefly"
	"github.com/arke-institute/orchestrator/jobs"
	"github.com/arke-institute/orchestrator/phases"
)

// The launch part measures what presigning the machines' URLs costs a
// launch: one image phase of -launch-tasks pending tasks (the phase that
// presigns the most, six URLs a machine: INPUT_URL in full, five outputs in
// OUTPUT_URLS's compact lines) launched in one round, with three
// presigners in rotating order:
//
//   - unsigned: bare URLs, no query, so lines without a signature (the
//     baseline: the launch path with neither the signing nor the longer
//     environment it makes);
//   - padded: unsigned URLs with a query and zero signatures as long as
//     signed ones (the environment's size alone);
//   - presigned: the real presigner.
//
// Two backends: the fake Fly Machines API over HTTP, as the e2e part
// launches (it runs in this process, so its JSON work on the larger
// environment, which Fly does in production, is timed too), and an
// in-process backend that accepts at once, where the orchestrator's own
// work alone is timed.

// The presigners of the launch part, in the order of a first round.
const (
	urlsUnsigned  = "unsigned"
	urlsPadded    = "padded"
	urlsPresigned = "presigned"
)

var urlModes = []string{urlsUnsigned, urlsPadded, urlsPresigned}

// launchRun is one launch run's figures.
type launchRun struct {
	backend string // "fakefly" or "instant"
	urls    string // a urlModes entry
	tasks   int
	elapsed time.Duration // from the first launch request to the last machine recorded
	// envBytes is the size of a machine's environment (names and values).
	envBytes int
}

// launchBackends are the backends the launch part measures, in order
// (-launch-backends).
var launchBackends = []string{"fakefly", "instant"}

// benchLaunch runs rounds of one run per presigner and backend, the order
// rotating each round.
// With profileDir set, each run writes a CPU profile of the bench process
// while it launches, launch-BACKEND-MODE-ROUND.pprof.
func benchLaunch(ctx context.Context, admin *pgx.Conn, base string, tasks, rounds int, profileDir string) ([]launchRun, error) {
	var runs []launchRun
	for _, backend := range launchBackends {
		for i := range rounds {
			for j := range urlModes {
				mode := urlModes[(i+j)%len(urlModes)]
				fmt.Fprintf(os.Stderr, "launch %s %d/%d: %d machines, %s URLs...\n", backend, i+1, rounds, tasks, mode)
				profile := ""
				if profileDir != "" {
					profile = filepath.Join(profileDir, fmt.Sprintf("launch-%s-%s-%d.pprof", backend, mode, i+1))
				}
				run, err := launchOnce(ctx, admin, base, backend, mode, tasks, profile)
				if err != nil {
					return nil, fmt.Errorf("%s, %s URLs: %w", backend, mode, err)
				}
				fmt.Fprintf(os.Stderr, "  %s\n", run.elapsed.Round(time.Millisecond))
				runs = append(runs, run)
			}
		}
	}
	return runs, nil
}

func launchOnce(ctx context.Context, admin *pgx.Conn, base, backend, mode string, tasks int, profile string) (launchRun, error) {
	run := launchRun{backend: backend, urls: mode, tasks: tasks}
	dbURL, err := freshDatabase(ctx, admin, base, "bench_launch")
	if err != nil {
		return run, err
	}
	pool, err := pgxpool.New(ctx, dbURL)
	if err != nil {
		return run, err
	}
	defer pool.Close()
	logger := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	if err := db.Migrate(ctx, pool, logger); err != nil {
		return run, err
	}

	tb := &benchTB{}
	defer tb.close()
	settings := map[string]string{
		"R2_ENDPOINT": "http://127.0.0.1:1", "R2_ACCESS_KEY_ID": "bench-key", "R2_SECRET_ACCESS_KEY": "bench-secret",
		"FLY_LAUNCH_RATE": "100000", "FLY_LAUNCH_BURST": "100000",
		"BATCH_SIZE_" + string(phases.ImageProcessing): fmt.Sprint(tasks), "CDN_PUBLIC_URL": "https://cdn.bench",
	}
	maps.Copy(settings, perTaskMachines())
	var backendImpl compute.Backend = instantBackend{}
	if backend == "fakefly" {
		fly := fakefly.New(tb, fakefly.Options{Token: benchFlyToken, DetailLimit: 1,
			Behave: func(fakefly.Launch) fakefly.Behavior { return fakefly.Behavior{Hang: true} }})
		settings["FLY_API_TOKEN"], settings["FLY_FLAPS_BASE_URL"] = benchFlyToken, fly.URL
	}
	cfg, err := config.Load(func(k string) (string, bool) { v, ok := settings[k]; return v, ok })
	if err != nil {
		return run, err
	}
	if backend == "fakefly" {
		if backendImpl, err = flycompute.New(ctx, flycompute.Config{APIToken: cfg.FlyAPIToken, BaseURL: cfg.FlyFlapsBaseURL, Logger: logger}); err != nil {
			return run, err
		}
	}
	store, err := blob.NewS3(blob.S3Config{Endpoint: cfg.R2Endpoint, AccessKeyID: cfg.R2AccessKeyID, SecretAccessKey: cfg.R2SecretAccessKey})
	if err != nil {
		return run, err
	}
	var presigner blob.Presigner = unsignedPresigner{}
	switch mode {
	case urlsPadded:
		presigner = unsignedPresigner{pad: true}
	case urlsPresigned:
		presigner = store
	}
	rec := &recordingBackend{Backend: backendImpl}
	deps, err := executor.Register(jobs.Deps{Pool: pool, Store: store, Compute: rec, Settings: cfg.Jobs(), Logger: logger}, cfg.Executors, executor.Options{Presigner: presigner})
	if err != nil {
		return run, err
	}
	client, err := jobs.NewClient(deps, jobs.ClientConfig{FetchPollInterval: 100 * time.Millisecond, NoSweep: true})
	if err != nil {
		return run, err
	}
	const batchID, phase = "BENCHLAUNCH", string(phases.ImageProcessing)
	if err := seedPending(ctx, pool, batchID, phase, tasks); err != nil {
		return run, err
	}
	if err := client.Start(ctx); err != nil {
		return run, err
	}
	defer client.Stop(context.WithoutCancel(ctx)) //nolint:errcheck // the run is over; a slow stop changes no figure

	if profile != "" {
		f, err := os.Create(profile)
		if err != nil {
			return run, err
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			return run, err
		}
		defer pprof.StopCPUProfile()
	}
	if _, err := client.Insert(ctx, machine.PhaseLaunchArgs{BatchID: batchID, Phase: phase}, nil); err != nil {
		return run, err
	}
	deadline := time.Now().Add(5 * time.Minute)
	for {
		var launched int
		if err := pool.QueryRow(ctx, `SELECT count(*) FROM tasks WHERE batch_id = $1 AND machine_id IS NOT NULL`, batchID).Scan(&launched); err != nil {
			return run, err
		}
		if launched == tasks {
			run.elapsed = time.Since(*rec.first.Load())
			pprof.StopCPUProfile() // the launches only (a no-op without a profile)
			break
		}
		if time.Now().After(deadline) {
			return run, fmt.Errorf("%d of %d machines launched after 5 minutes", launched, tasks)
		}
		time.Sleep(2 * time.Millisecond)
	}
	if err := tb.err(); err != nil {
		return run, err
	}
	// The env carried URLs, signed or not, and no storage key.
	spec := rec.last.Load()
	if spec == nil || spec.Env["OUTPUT_URLS"] == "" || spec.Env["R2_SECRET_ACCESS_KEY"] != "" ||
		strings.Contains(fmt.Sprint(spec.Env), cfg.R2SecretAccessKey) || (mode == urlsPresigned) != signed(spec.Env["INPUT_URL"]) {
		return run, errors.New("the machines' env is not what the run measures")
	}
	for k, v := range spec.Env {
		run.envBytes += len(k) + len(v)
	}
	return run, nil
}

// signed reports whether u has a real signature, not the padding's.
func signed(u string) bool {
	return strings.Contains(u, "X-Amz-Signature=") && !strings.HasSuffix(u, strings.Repeat("0", 64))
}

// seedPending makes a batch in phase with n image files and n pending tasks.
func seedPending(ctx context.Context, pool *pgxpool.Pool, batchID, phase string, n int) error {
	q := db.New(pool)
	if _, err := q.BatchInsert(ctx, db.BatchInsertParams{ID: batchID, Uploader: "bench", QueueMessage: []byte(`{}`)}); err != nil {
		return err
	}
	if _, err := q.BatchSetPhase(ctx, db.BatchSetPhaseParams{ID: batchID, Phase: phase}); err != nil {
		return err
	}
	files := make([]db.FileInsertManyParams, n)
	for i := range files {
		name := fmt.Sprintf("f%06d.jpg", i)
		files[i] = db.FileInsertManyParams{BatchID: batchID, Generation: 0, Ordinal: int32(i), DirectoryPath: "/photos",
			R2Key: "staging/" + batchID + "/photos/" + name, LogicalPath: "/photos/" + name, FileName: name, FileSize: 1000,
			ContentType: "image/jpeg", ProcessingConfig: []byte(`{"ocr":false,"describe":false,"pinax":true}`), PreprocessorTags: []string{}}
	}
	if _, err := q.FileInsertMany(ctx, files); err != nil {
		return err
	}
	stored, err := q.FileListByBatchGeneration(ctx, db.FileListByBatchGenerationParams{BatchID: batchID, Generation: 0})
	if err != nil {
		return err
	}
	rows := make([]db.TaskInsertManyParams, n)
	for i, f := range stored {
		rows[i] = db.TaskInsertManyParams{ID: fmt.Sprintf("image_bench%06d", i), BatchID: batchID, Phase: phase, FileID: f.ID}
	}
	if _, err := q.TaskInsertMany(ctx, rows); err != nil {
		return err
	}
	_, err = pool.Exec(ctx, "VACUUM ANALYZE tasks")
	return err
}

// recordingBackend notes when the first launch started, which starts the
// clock (the job's pickup is not timed), and keeps the last spec launched,
// to check the run's env.
type recordingBackend struct {
	compute.Backend
	first atomic.Pointer[time.Time]
	last  atomic.Pointer[compute.MachineSpec]
}

func (b *recordingBackend) Launch(ctx context.Context, s compute.MachineSpec) (compute.Machine, error) {
	now := time.Now()
	b.first.CompareAndSwap(nil, &now)
	b.last.Store(&s)
	return b.Backend.Launch(ctx, s)
}

// unsignedPresigner makes unsigned URLs at no cost: bare, or padded with a
// query as long as a signed URL's.
type unsignedPresigner struct{ pad bool }

// paddedQuery is as long as the shared query of the URLs the bench's store
// signs; paddedExpiry is when it says they expire.
const paddedQuery = "?X-Amz-Algorithm=AWS4-HMAC-SHA256&X-Amz-Credential=bench-key%2F20251029%2Fauto%2Fs3%2Faws4_request" +
	"&X-Amz-Date=20251029T193745Z&X-Amz-Expires=1020"

var paddedExpiry = time.Date(2025, 10, 29, 19, 54, 45, 0, time.UTC)

// PresignCompact writes the lines directly, as the real presigner does:
// with no signature, or a zero one (the bench's keys need no escaping).
func (u unsignedPresigner) PresignCompact(ctx context.Context, base blob.Object, objs []blob.Object, ttl time.Duration) (blob.Presigned, string, error) {
	urls, err := u.PresignAll(ctx, []blob.Object{base}, ttl)
	if err != nil {
		return blob.Presigned{}, "", err
	}
	var b strings.Builder
	for i, o := range objs {
		if i > 0 {
			b.WriteByte('\n')
		}
		b.WriteString(string(o.Method) + " " + o.Bucket + " " + o.Key)
		if u.pad {
			b.WriteString(" " + zeroSignature)
		}
	}
	return urls[0], b.String(), nil
}

// zeroSignature is 32 zero bytes in base64url, as a compact line has it.
var zeroSignature = strings.Repeat("A", 43)

func (u unsignedPresigner) PresignAll(_ context.Context, objs []blob.Object, ttl time.Duration) ([]blob.Presigned, error) {
	expires := time.Now().Add(ttl)
	if u.pad {
		expires = paddedExpiry
	}
	out := make([]blob.Presigned, len(objs))
	for i, o := range objs {
		p := blob.Presigned{Object: o, URL: "http://127.0.0.1:1/" + o.Bucket + "/" + o.Key, Expires: expires}
		if u.pad {
			headers := "host"
			if o.Method == blob.MethodPutIfAbsent {
				headers += "%3Bif-none-match"
			}
			p.URL += paddedQuery + "&X-Amz-SignedHeaders=" + headers + "&X-Amz-Signature=" + strings.Repeat("0", 64)
		}
		if o.Method == blob.MethodPutIfAbsent {
			p.Header = map[string]string{"If-None-Match": "*"}
		}
		out[i] = p
	}
	return out, nil
}

// launchSummary is one backend's median time per presigner, and the
// median of each round's ratios to the unsigned run.
type launchSummary struct {
	backend string
	tasks   int
	rounds  int
	median  map[string]time.Duration
	ratio   map[string]float64 // padded and presigned over unsigned
	env     map[string]int     // a machine's environment, bytes
}

func summarizeLaunch(runs []launchRun) []launchSummary {
	var out []launchSummary
	for _, backend := range launchBackends {
		byMode := map[string][]time.Duration{}
		s := launchSummary{backend: backend, median: map[string]time.Duration{}, ratio: map[string]float64{}, env: map[string]int{}}
		for _, r := range runs {
			if r.backend == backend {
				s.tasks = r.tasks
				s.env[r.urls] = r.envBytes
				byMode[r.urls] = append(byMode[r.urls], r.elapsed)
			}
		}
		s.rounds = min(len(byMode[urlsUnsigned]), len(byMode[urlsPadded]), len(byMode[urlsPresigned]))
		if s.rounds == 0 {
			continue
		}
		for _, mode := range urlModes {
			s.median[mode] = median(byMode[mode])
			var ratios []float64
			for i := range s.rounds {
				ratios = append(ratios, float64(byMode[mode][i])/float64(byMode[urlsUnsigned][i]))
			}
			s.ratio[mode] = median(ratios)
		}
		out = append(out, s)
	}
	return out
}

func launchTable(runs []launchRun) string {
	var b strings.Builder
	for _, s := range summarizeLaunch(runs) {
		for _, mode := range urlModes {
			fmt.Fprintf(&b, "%-44s %14s\n", fmt.Sprintf("launch %d machines (%s), %s URLs", s.tasks, s.backend, mode), s.median[mode].Round(time.Millisecond))
		}
		fmt.Fprintf(&b, "%-44s %14s\n", "  machine env, bytes (un/padded/presigned)", fmt.Sprintf("%d/%d/%d", s.env[urlsUnsigned], s.env[urlsPadded], s.env[urlsPresigned]))
		fmt.Fprintf(&b, "%-44s %13.3fx\n", "  padded / unsigned time (median round)", s.ratio[urlsPadded])
		fmt.Fprintf(&b, "%-44s %13.3fx\n", "  presigned / unsigned time (median round)", s.ratio[urlsPresigned])
	}
	return b.String()
}

func launchMarkdown(tasks, rounds int) string {
	return fmt.Sprintf(`- **Launch**: one IMAGE_PROCESSING phase of %d pending tasks launched in one
  round (six presigned URLs a machine: the input's GET in INPUT_URL, and three
  variants, the archive copy and the ref.json as OUTPUT_URLS's compact lines, a
  signature each), from the first launch request to the last machine recorded
  in the database. Each backend runs %d rounds of three runs, in rotating order:
  unsigned URLs without a query, so lines without a signature (the baseline),
  unsigned URLs padded to a signed one's length (the larger environment alone),
  and presigned URLs; ratios are the median of the rounds' ratios to the
  unsigned run. "machine env" is the size of one machine's environment.
  "fakefly" launches through the fake Fly Machines API over HTTP, as the e2e
  part does; the fake runs in the bench's process, so its JSON work on each
  machine's config (decoding it, echoing it back, which Fly does in
  production) is timed too. "instant" is an in-process backend that accepts
  at once: the orchestrator's own work alone.
`, tasks, rounds)
}
