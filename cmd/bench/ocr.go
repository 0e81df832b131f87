package main

// The OCR figures: for each provider capacity C, one batch of image refs
// through IMAGE_PROCESSING into the OCR phase, run by two orchestrator
// processes on one database against a fake OpenAI-compatible provider of
// C requests/s (internal/fakes/fakeocr, a token bucket answering 429 with
// Retry-After above it), with the default limiter settings: a fresh
// database and provider per capacity. The image phase's fake machines write
// each image's variants and ref (internal/fakes/ocrfixture), so the OCR
// phase reads and writes real objects.

import (
	"context"
	"fmt"
	"maps"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/oklog/ulid/v2"

	"github.com/arke-institute/orchestrator/client"
	"github.com/arke-institute/orchestrator/config"
	"github.com/arke-institute/orchestrator/internal/fakes/fakefly"
	"github.com/arke-institute/orchestrator/internal/fakes/fakeocr"
	"github.com/arke-institute/orchestrator/internal/fakes/ocrfixture"
	"github.com/arke-institute/orchestrator/manifest"
	"github.com/arke-institute/orchestrator/phases"
	"github.com/arke-institute/orchestrator/ratelimit"
)

// ocrOptions configure the OCR part.
type ocrOptions struct {
	capacities []float64 // the fake provider's requests/s (C), one run each
	burst      int       // its bucket's size; 0 is C rounded up
	seconds    float64   // each run's batch holds C times this many refs
	dirFiles   int       // JPEGs per directory
	processes  int       // orchestrator processes sharing the database
	// settings are extra orchestrator settings (-ocr-env).
	settings map[string]string
}

// refs is how many JPEGs the batch of capacity c holds: seconds' worth at
// c, at least 100.
func (o ocrOptions) refs(c float64) int { return max(100, int(c*o.seconds)) }

// dirs is how many directories a batch of n refs has.
func (o ocrOptions) dirs(n int) int { return (n + o.dirFiles - 1) / o.dirFiles }

// chunks is how many chunks the OCR phase packs n refs into, with the
// default chunk size (phases.OCRChunks on the batch's shape).
func (o ocrOptions) chunks(n int) int {
	var files []phases.File
	for i := range n {
		dir := fmt.Sprintf("/dir%05d", i/o.dirFiles)
		files = append(files, phases.File{ID: int64(i + 1), DirectoryPath: dir, LogicalPath: dir + "/x.jpg", FileName: "x.jpg.ref.json",
			Tags: []string{phases.TagImageProcessor}, ProcessingConfig: phases.ProcessingConfig{OCR: true}})
	}
	return len(phases.OCRChunks(files, phases.DefaultOCRChunkSize))
}

// limit is the limiter's shape: the defaults, unless -ocr-env changes it.
func (o ocrOptions) limit() (ratelimit.Adaptive, error) {
	cfg, err := config.Load(func(k string) (string, bool) { v, ok := o.settings[k]; return v, ok })
	if err != nil {
		return ratelimit.Adaptive{}, err
	}
	return cfg.Executors.OCRLimit, nil
}

// ocrRun is one capacity's figures.
type ocrRun struct {
	capacity float64
	refs     int
	// counts are the provider's answers over the run; only the OCR phase
	// calls it.
	counts fakeocr.Counts
	// phase is from the OCR phase's phase.started to its phase.completed.
	phase    time.Duration
	chunks   int
	refsDone int
	// limitChanges counts rate_limit.changed events, slowDowns those after
	// a 429.
	limitChanges, slowDowns int
	// peakRate is the highest refill rate the bucket reached (its initial
	// one without a change), peakAfter when it first did, from the phase's
	// start.
	peakRate  float64
	peakAfter time.Duration
	// reached is when the provider's successful answers first came at 0.8
	// of C over ocrWindow, from the phase's start (-1: never); okAfter its
	// successful answers a second from then to the phase's end.
	reached time.Duration
	okAfter float64
}

// ocrWindow is the span over which the time to 0.8 of C is measured.
const ocrWindow = 2 * time.Second

// throughput is the successful requests a second over the OCR phase.
func (r ocrRun) throughput() float64 { return float64(r.counts.OK) / r.phase.Seconds() }

// limitedShare is the share of requests answered 429.
func (r ocrRun) limitedShare() float64 {
	if r.counts.Requests == 0 {
		return 0
	}
	return float64(r.counts.RateLimited) / float64(r.counts.Requests)
}

// ocrSample is the provider's counts at one moment.
type ocrSample struct {
	at     time.Time
	counts fakeocr.Counts
}

// benchOCR runs every capacity, on orchestrator binary bin.
func benchOCR(ctx context.Context, admin *pgx.Conn, base, bin string, e2eOpts e2eOptions, opts ocrOptions) ([]ocrRun, error) {
	if _, err := opts.limit(); err != nil {
		return nil, fmt.Errorf("-ocr-env: %w", err)
	}
	env, err := newE2EEnv(ctx, admin, base, e2eOpts)
	if err != nil {
		return nil, err
	}
	defer env.close()
	var out []ocrRun
	for _, c := range opts.capacities {
		n := opts.refs(c)
		fmt.Fprintf(os.Stderr, "ocr C=%g/s: %d refs in %d directories (%d chunks), %d processes...\n", c, n, opts.dirs(n), opts.chunks(n), opts.processes)
		r, err := env.ocrOnce(ctx, bin, c, opts)
		if err != nil {
			return nil, fmt.Errorf("capacity %g/s: %w", c, err)
		}
		fmt.Fprintf(os.Stderr, "ocr C=%g/s: OCR phase %s, %.2f OK/s (%.2f C), %d requests, %d answered 429 (%.1f%%), 0.8 C after %s, %d limit changes\n",
			c, r.phase.Round(time.Millisecond), r.throughput(), r.throughput()/c, r.counts.Requests,
			r.counts.RateLimited, 100*r.limitedShare(), r.reachedText(), r.limitChanges)
		out = append(out, r)
	}
	return out, nil
}

// ocrProgressEvery is how often a run prints its progress.
const ocrProgressEvery = 15 * time.Second

// ocrOnce takes one batch through a fresh database and provider of
// capacity c, and opts.processes orchestrator processes.
func (env *e2eEnv) ocrOnce(ctx context.Context, bin string, c float64, opts ocrOptions) (ocrRun, error) {
	n := opts.refs(c)
	r := ocrRun{capacity: c, refs: n}
	tb := &benchTB{}
	defer tb.close()
	fake := fakeocr.New(tb, fakeocr.Options{Rate: c, Burst: opts.burst, ImageLimit: 1})
	behave := ocrfixture.ImageWorker(ocrfixture.Stores{Store: env.store, StagingBucket: benchStaging,
		CDNBucket: e2eSettings["CDN_BUCKET"], CDNPublicURL: e2eSettings["CDN_PUBLIC_URL"]})
	settings := map[string]string{"OCR_API_URL": fake.URL, "OCR_API_KEY": fake.Key}
	maps.Copy(settings, opts.settings)
	label := fmt.Sprintf("ocr-%g", c)
	run, err := env.startRun(ctx, bin, "bench_"+strings.ReplaceAll(label, "-", "_"), label, fakefly.Options{Behave: behave}, settings)
	if err != nil {
		return r, err
	}
	defer run.close()
	for range opts.processes - 1 {
		if err := run.addProcess(ctx, bin); err != nil {
			return r, err
		}
	}

	batchID := ulid.Make().String()
	msg, err := env.uploadManifest(ctx, batchID, ocrGroups("staging/"+batchID+"/", n, opts.dirFiles))
	if err != nil {
		return r, err
	}
	var samples []ocrSample
	lastPrint := time.Now()
	onPoll := func(st client.Status) {
		now := time.Now()
		counts := fake.Counts()
		samples = append(samples, ocrSample{at: now, counts: counts})
		if now.Sub(lastPrint) >= ocrProgressEvery {
			lastPrint = now
			fmt.Fprintf(os.Stderr, "ocr C=%g/s: %s, batch %s, provider: %d of %d refs answered, %d 429s of %d requests\n",
				c, now.Sub(samples[0].at).Round(time.Second), st.Status, counts.OK, n, counts.RateLimited, counts.Requests)
		}
	}
	// Slow enough for a provider at a quarter of its capacity.
	timeout := 3*time.Minute + time.Duration(4*float64(n)/c*float64(time.Second))
	// Each JPEG's ref is replaced by its OCR'd one.
	if _, _, err := run.process(ctx, env, msg, timeout, int64(n), onPoll); err != nil {
		return r, err
	}
	if _, err := run.finish(ctx, env); err != nil {
		return r, err
	}
	r.counts = fake.Counts()
	if err := collectOCR(ctx, run.dbURL, batchID, opts, samples, &r); err != nil {
		return r, err
	}
	return r, nil
}

// collectOCR reads the OCR phase's figures from the database and checks
// the batch: DONE, every chunk DONE, every ref done, and a successful
// answer of the provider for each (samples are the provider's counts
// while the batch ran).
func collectOCR(ctx context.Context, dbURL, batchID string, opts ocrOptions, samples []ocrSample, r *ocrRun) error {
	conn, err := pgx.Connect(ctx, dbURL)
	if err != nil {
		return err
	}
	defer conn.Close(ctx)
	var status string
	if err := conn.QueryRow(ctx, "SELECT status FROM batches WHERE id = $1", batchID).Scan(&status); err != nil {
		return err
	}
	if status != client.StatusDone {
		return fmt.Errorf("batch %s is %s", batchID, status)
	}
	var chunksDone, refs, failed, skipped int
	if err := conn.QueryRow(ctx, `SELECT count(*), count(*) FILTER (WHERE state = 'DONE'), coalesce(sum(total_refs), 0),
		coalesce(sum(completed), 0), coalesce(sum(failed), 0), coalesce(sum(skipped), 0)
		FROM chunks WHERE batch_id = $1 AND phase = $2`, batchID, string(phases.OCR)).Scan(
		&r.chunks, &chunksDone, &refs, &r.refsDone, &failed, &skipped); err != nil {
		return err
	}
	if want := opts.chunks(r.refs); r.chunks != want || chunksDone != r.chunks || refs != r.refs || r.refsDone != r.refs {
		return fmt.Errorf("%d chunks (want %d), %d DONE; %d refs (want %d): %d done, %d failed, %d skipped",
			r.chunks, want, chunksDone, refs, r.refs, r.refsDone, failed, skipped)
	}
	if c := r.counts; c.OK < r.refs || c.OK+c.RateLimited != c.Requests {
		return fmt.Errorf("the provider answered %d requests: %d OK, %d 429, by status %v; want an OK for each of %d refs and nothing but OK and 429",
			c.Requests, c.OK, c.RateLimited, c.ByStatus, r.refs)
	}

	var started, completed []time.Time
	rows, err := conn.Query(ctx, `SELECT type, created_at FROM batch_events
		WHERE batch_id = $1 AND phase = $2 AND type IN ('phase.started', 'phase.completed')`, batchID, string(phases.OCR))
	if err != nil {
		return err
	}
	for rows.Next() {
		var typ string
		var at time.Time
		if err := rows.Scan(&typ, &at); err != nil {
			return err
		}
		if typ == "phase.started" {
			started = append(started, at)
		} else {
			completed = append(completed, at)
		}
	}
	if err := rows.Err(); err != nil {
		return err
	}
	if len(started) != 1 || len(completed) != 1 {
		return fmt.Errorf("the OCR phase started %d and completed %d times, want once each", len(started), len(completed))
	}
	phaseStart, phaseEnd := started[0], completed[0]
	r.phase = phaseEnd.Sub(phaseStart)

	// The limiter's changes; the highest rate a bucket reached, and when.
	var firstPeak *time.Time
	if err := conn.QueryRow(ctx, `SELECT count(*), count(*) FILTER (WHERE data->>'cause' = 'rate_limited'),
		coalesce(max((data->>'rps')::float8), 0) FROM batch_events WHERE batch_id = $1 AND type = 'rate_limit.changed'`,
		batchID).Scan(&r.limitChanges, &r.slowDowns, &r.peakRate); err != nil {
		return err
	}
	if err := conn.QueryRow(ctx, `SELECT min(created_at) FROM batch_events
		WHERE batch_id = $1 AND type = 'rate_limit.changed' AND (data->>'rps')::float8 = $2`,
		batchID, r.peakRate).Scan(&firstPeak); err != nil {
		return err
	}
	limit, err := opts.limit()
	if err != nil {
		return err
	}
	if initial := limit.InitialRefillRate; r.peakRate <= initial || firstPeak == nil {
		r.peakRate, firstPeak = initial, &phaseStart
	}
	r.peakAfter = firstPeak.Sub(phaseStart)
	r.reached = -1
	for i, a := range samples {
		if a.at.Before(phaseStart) {
			continue
		}
		j, _ := slices.BinarySearchFunc(samples, a.at.Add(ocrWindow), func(s ocrSample, t time.Time) int { return s.at.Compare(t) })
		if j == len(samples) {
			break
		}
		b := samples[j]
		if float64(b.counts.OK-a.counts.OK)/b.at.Sub(a.at).Seconds() >= 0.8*r.capacity {
			r.reached = samples[i].at.Sub(phaseStart)
			r.okAfter = rateBetween(samples, a.at, phaseEnd)
			break
		}
	}
	return nil
}

// rateBetween is the successful answers a second between from and to, by
// the samples nearest after each; 0 when fewer than 5 s apart.
func rateBetween(samples []ocrSample, from, to time.Time) float64 {
	at := func(t time.Time) (ocrSample, bool) {
		i, _ := slices.BinarySearchFunc(samples, t, func(s ocrSample, t time.Time) int { return s.at.Compare(t) })
		if i == len(samples) {
			return ocrSample{}, false
		}
		return samples[i], true
	}
	a, okA := at(from)
	b, okB := at(to)
	if !okA || !okB || b.at.Sub(a.at) < 5*time.Second {
		return 0
	}
	return float64(b.counts.OK-a.counts.OK) / b.at.Sub(a.at).Seconds()
}

// ocrGroups are the directories of a manifest of n JPEGs under prefix,
// dirFiles per directory, all with OCR on.
func ocrGroups(prefix string, n, dirFiles int) []manifest.DirectoryGroup {
	return manifestGroups(prefix, n, dirFiles, manifest.ProcessingConfig{OCR: true, Pinax: true}, func(i int) (string, string) {
		return fmt.Sprintf("img%06d.jpg", i), "image/jpeg"
	})
}

// The OCR issue's goals.
const (
	ocrGoalThroughput   = 0.8 // OK requests/s over C from the time it is reached
	ocrGoalReached      = 30 * time.Second
	ocrGoalLimitedShare = 0.05 // requests answered 429
)

// reachedText is when 0.8 of C was reached, or "never".
func (r ocrRun) reachedText() string {
	if r.reached < 0 {
		return "never"
	}
	return r.reached.Round(100 * time.Millisecond).String()
}

func ocrTable(runs []ocrRun, opts ocrOptions) string {
	var b strings.Builder
	row := func(figure, value string) { fmt.Fprintf(&b, "%-44s %14s\n", figure, value) }
	for _, r := range runs {
		p := fmt.Sprintf("ocr C=%g/s: ", r.capacity)
		row(p+fmt.Sprintf("OCR phase (%d refs)", r.refs), r.phase.Round(time.Millisecond).String())
		row(p+"OK requests/s", fmt.Sprintf("%.2f", r.throughput()))
		row(p+"OK requests/s / C", fmt.Sprintf("%.2f", r.throughput()/r.capacity))
		row(p+"0.8 C reached after", r.reachedText())
		if r.okAfter > 0 {
			row(p+"OK requests/s / C from then on", fmt.Sprintf("%.2f", r.okAfter/r.capacity))
		}
		row(p+"requests / answered 429", fmt.Sprintf("%d / %d", r.counts.Requests, r.counts.RateLimited))
		row(p+"429 share", fmt.Sprintf("%.1f%%", 100*r.limitedShare()))
		row(p+"rate_limit.changed (after a 429)", fmt.Sprintf("%d (%d)", r.limitChanges, r.slowDowns))
		row(p+"limiter peak rate, reached after", fmt.Sprintf("%.1f/s, %s", r.peakRate, r.peakAfter.Round(100*time.Millisecond)))
	}
	return b.String()
}

// ocrTargets are the OCR issue's goals as rows of the targets table.
func ocrTargets(runs []ocrRun, row func(figure, target, got string, met bool)) {
	for _, r := range runs {
		p := fmt.Sprintf("OCR, C=%g/s: ", r.capacity)
		row(p+"time to 0.8 of capacity", fmt.Sprintf("<= %s", ocrGoalReached), r.reachedText(), r.reached >= 0 && r.reached <= ocrGoalReached)
		held := r.okAfter / r.capacity
		row(p+"OK requests/s / capacity from then on", fmt.Sprintf(">= %.1f", ocrGoalThroughput), fmt.Sprintf("%.2f", held), held >= ocrGoalThroughput)
		s := r.limitedShare()
		row(p+"requests answered 429", fmt.Sprintf("<= %.0f%%", 100*ocrGoalLimitedShare), fmt.Sprintf("%.1f%%", 100*s), s <= ocrGoalLimitedShare)
	}
}

// ocrMarkdown describes the OCR part.
func ocrMarkdown(opts ocrOptions) string {
	extra := "none"
	if len(opts.settings) > 0 {
		var kv []string
		for k, v := range opts.settings {
			kv = append(kv, k+"="+v)
		}
		slices.Sort(kv)
		extra = strings.Join(kv, ", ")
	}
	var caps []string
	for _, c := range opts.capacities {
		n := opts.refs(c)
		caps = append(caps, fmt.Sprintf("C = %g/s: %d JPEGs, %d chunks", c, n, opts.chunks(n)))
	}
	burst := "C rounded up"
	if opts.burst > 0 {
		burst = fmt.Sprint(opts.burst)
	}
	// ¬ stands for a backquote.
	return strings.ReplaceAll(fmt.Sprintf(`- **OCR**: for each provider capacity C, one batch of C x %g JPEGs (at least
  100) in directories of %d, all with ¬ocr: true¬, through %d ¬orchestrator serve¬
  processes on one database, against a fake OpenAI-compatible provider
  (¬internal/fakes/fakeocr¬, through the real client) whose capacity is a token
  bucket of C requests/s and a burst of %s, answering 429 with Retry-After
  (whole seconds) above it; a fresh database and provider each time (%s).
  The chunks hold OCR_CHUNK_REFS %d refs (OCR_CHUNK_SIZE %d directories),
  so each directory is split across chunks. The image phase's fake machines
  write each image's variants and ref (¬internal/fakes/ocrfixture¬), so OCR
  reads and writes real objects. The limiter keeps its defaults
  (docs/operations.md, "The OCR rate limiter"); other settings: %s.
  - *OCR phase*: from its ¬phase.started¬ to its ¬phase.completed¬ event.
    *OK requests/s*: the provider's successful answers over it (only the OCR
    phase calls the provider), and over C; *429 share*: the provider's 429s
    over every request it received.
  - *0.8 C reached after*: from the phase's start to the first moment the
    provider's successful answers over the next %s came at 0.8 C or more
    (its counts sampled every %s); *from then on*: its successful answers a
    second from that moment to the phase's end.
  - *limiter peak rate*: the highest refill rate the bucket reached
    (¬rate_limit.changed¬ events), and when it first did.
  - Checked every run: the batch ends DONE, every chunk DONE, every ref done
    with a successful answer each, the provider answered nothing but 200 and
    429, and ingest received the final manifest with every ref.
`, opts.seconds, opts.dirFiles, opts.processes, burst, strings.Join(caps, "; "),
		phases.DefaultOCRChunkSize.Refs, phases.DefaultOCRChunkSize.Groups, extra, ocrWindow, e2ePoll), "¬", "`")
}
