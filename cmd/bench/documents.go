package main

// The documents figures (issue 18's benchmark), in this process, on fresh
// databases:
//
//   - steps: -doc-count documents of about -doc-chunks chunks each, in the
//     real S3 server, asked for through the service (as POST /documents
//     does) and taken through every step by the River workers, against a
//     fake OpenAI-compatible provider of -doc-capacity requests/s that
//     answers at once (internal/fakes/fakeai, over HTTP, through the real
//     clients and the shared rate limiter with its default settings): how
//     fast documents go, and how much of the provider they use.
//   - search: -search-chunks chunks stored (documents of 20 chunks, their
//     vectors from the local embedder), searched through the HTTP API
//     (GET /documents/search, k = 10) one query at a time.

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"maps"
	"math/rand/v2"
	"net/http"
	"net/url"
	"os"
	"runtime/pprof"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/arke-institute/orchestrator/api"
	"github.com/arke-institute/orchestrator/config"
	"github.com/arke-institute/orchestrator/db"
	"github.com/arke-institute/orchestrator/docindex"
	"github.com/arke-institute/orchestrator/executor"
	"github.com/arke-institute/orchestrator/internal/fakes/fakeai"
	"github.com/arke-institute/orchestrator/jobs"
	"github.com/arke-institute/orchestrator/metrics"
	"github.com/arke-institute/orchestrator/search"
)

// documentsOptions configure the documents part.
type documentsOptions struct {
	docs         int               // documents taken through the steps
	chunks       int               // chunks a document makes, about
	capacity     float64           // the fake provider's requests/s, both roles together
	settings     map[string]string // extra settings of the steps (-doc-env)
	searchChunks int               // chunks stored for search
	searches     int               // searches timed
	// profile, when set, is where a CPU profile of this process (the
	// orchestrator's workers, the fake provider and the S3 server) during
	// the steps is written.
	profile string
}

// documentSteps are the steps, in order.
var documentSteps = []string{"download", "embeddings", "tags", "store"}

// documentsRun is the documents part's figures.
type documentsRun struct {
	// The steps: documents and their chunks; wall, from the first step's
	// start to the last document's completion (the database's times);
	// each document's own time, first step to completion, p50 and p99.
	docs, sections, chunks int
	wall                   time.Duration
	docP50, docP99         time.Duration
	runs                   map[string]int           // step runs that committed, by step
	runTime                map[string]time.Duration // their summed time, by step
	waited                 int                      // runs that found no token of the limiter
	retried                int                      // runs to be retried (a 429)
	providerRequests       int
	// capacity is the provider's requests/s; providerOK and limited its
	// answers 200 and 429.
	capacity            float64
	providerOK, limited int

	// Search: the chunks stored, the first search (which loads their
	// vectors), then the timed ones' p50 and p99.
	searchChunks         int
	searches             int
	firstSearch          time.Duration
	searchP50, searchP99 time.Duration
}

// totalRuns is every step run that committed.
func (r documentsRun) totalRuns() int {
	n := 0
	for _, c := range r.runs {
		n += c
	}
	return n
}

// perStep is the wall time per step run: with the provider instant, what
// a step costs the machine.
func (r documentsRun) perStep() time.Duration {
	if r.totalRuns() == 0 {
		return 0
	}
	return r.wall / time.Duration(r.totalRuns())
}

// documentsSearchGoal is the goal for search over 100,000 chunks.
const documentsSearchGoal = 100 * time.Millisecond

func benchDocuments(ctx context.Context, admin *pgx.Conn, base string, opts documentsOptions) (documentsRun, error) {
	r := documentsRun{docs: opts.docs, sections: opts.chunks, searchChunks: opts.searchChunks, searches: opts.searches, capacity: opts.capacity}
	env, err := newE2EEnv(ctx, admin, base, e2eOptions{})
	if err != nil {
		return r, err
	}
	defer env.close()
	fmt.Fprintf(os.Stderr, "documents: %d documents of about %d chunks through every step...\n", opts.docs, opts.chunks)
	if err := env.documentSteps(ctx, opts, &r); err != nil {
		return r, fmt.Errorf("steps: %w", err)
	}
	fmt.Fprintf(os.Stderr, "documents: %s for %d documents (%d chunks), %d step runs, %.2f ms a run\n",
		r.wall.Round(time.Millisecond), r.docs, r.chunks, r.totalRuns(), ms(r.perStep()))
	fmt.Fprintf(os.Stderr, "documents: search over %d chunks, %d searches...\n", opts.searchChunks, opts.searches)
	if err := env.documentSearch(ctx, opts, &r); err != nil {
		return r, fmt.Errorf("search: %w", err)
	}
	fmt.Fprintf(os.Stderr, "documents: search p50 %s, p99 %s (first %s)\n", r.searchP50.Round(10*time.Microsecond),
		r.searchP99.Round(10*time.Microsecond), r.firstSearch.Round(time.Millisecond))
	return r, nil
}

// documentsDB makes a fresh database, migrated, with a pool sized as
// serve's, and the configuration of settings on top of the bench's S3.
func (env *e2eEnv) documentsDB(ctx context.Context, name string, settings map[string]string) (*pgxpool.Pool, *config.Config, *slog.Logger, error) {
	dbURL, err := freshDatabase(ctx, env.admin, env.base, name)
	if err != nil {
		return nil, nil, nil, err
	}
	pcfg, err := pgxpool.ParseConfig(dbURL)
	if err != nil {
		return nil, nil, nil, err
	}
	pcfg.MaxConns = int32(config.DefaultDatabaseMaxConns)
	pool, err := pgxpool.NewWithConfig(ctx, pcfg)
	if err != nil {
		return nil, nil, nil, err
	}
	logger := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	if err := db.Migrate(ctx, pool, logger); err != nil {
		pool.Close()
		return nil, nil, nil, err
	}
	all := map[string]string{
		"R2_ENDPOINT": env.s3.Endpoint, "R2_ACCESS_KEY_ID": env.s3.AccessKeyID, "R2_SECRET_ACCESS_KEY": env.s3.SecretAccessKey,
		"R2_BUCKET": benchStaging, "READ_TOKEN": benchReadToken,
	}
	for k, v := range settings {
		all[k] = v
	}
	cfg, err := config.Load(func(k string) (string, bool) { v, ok := all[k]; return v, ok })
	if err != nil {
		pool.Close()
		return nil, nil, nil, err
	}
	return pool, cfg, logger, nil
}

// benchReadToken opens the search route of the bench's API.
const benchReadToken = "bench-read-token-0123456789"

// documentSteps takes opts.docs documents through every step.
func (env *e2eEnv) documentSteps(ctx context.Context, opts documentsOptions, r *documentsRun) error {
	tb := &benchTB{}
	defer tb.close()
	fake := fakeai.New(tb, fakeai.Options{Rate: opts.capacity})
	// The limiter's default settings: its buckets, one per role, find the
	// provider's capacity.
	settings := map[string]string{
		"EMBEDDINGS_API_URL": fake.URL, "EMBEDDINGS_API_KEY": fake.Key, "TAGS_API_URL": fake.URL, "TAGS_API_KEY": fake.Key,
	}
	maps.Copy(settings, opts.settings)
	pool, cfg, logger, err := env.documentsDB(ctx, "bench_documents", settings)
	if err != nil {
		return err
	}
	defer pool.Close()
	m := metrics.New(metrics.Config{})
	deps, err := executor.Register(jobs.Deps{Pool: pool, Store: env.store, Compute: instantBackend{}, Settings: cfg.Jobs(), Logger: logger, Metrics: m}, cfg.Executors, executor.Options{})
	if err != nil {
		return err
	}
	client, err := jobs.NewClient(deps, jobs.ClientConfig{FetchPollInterval: 100 * time.Millisecond, NoSweep: true})
	if err != nil {
		return err
	}

	// The documents, stored 8 at a time, then asked for.
	keys := make([]string, opts.docs)
	work := make(chan int)
	errs := make(chan error, 8)
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for i := range work {
				text := documentText(i, opts.chunks)
				if err := env.store.Put(ctx, benchStaging, keys[i], strings.NewReader(text), int64(len(text)), "text/markdown"); err != nil {
					errs <- err
					return
				}
			}
		})
	}
	for i := range keys {
		keys[i] = fmt.Sprintf("documents/bench/doc%05d.md", i)
	}
	for i := range keys {
		work <- i
	}
	close(work)
	wg.Wait()
	close(errs)
	if err := <-errs; err != nil {
		return err
	}
	docs := docindex.NewDocuments(pool, client, env.store, cfg.R2Bucket, cfg.Executors.Documents.Prefix, logger)
	for _, key := range keys {
		if _, created, err := docs.Create(ctx, key); err != nil || !created {
			return fmt.Errorf("asking for %s: created %v, %v", key, created, err)
		}
	}

	if opts.profile != "" {
		f, err := os.Create(opts.profile)
		if err != nil {
			return err
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			return err
		}
		defer pprof.StopCPUProfile()
	}
	if err := client.Start(ctx); err != nil {
		return err
	}
	defer client.Stop(context.WithoutCancel(ctx)) //nolint:errcheck // the run is over; a slow stop changes no figure
	deadline := time.Now().Add(10*time.Minute + time.Duration(opts.docs*opts.chunks)*10*time.Millisecond)
	for {
		var completed, failed int
		if err := pool.QueryRow(ctx, `SELECT count(*) FILTER (WHERE status = 'completed'), count(*) FILTER (WHERE status = 'failed')
			FROM documents`).Scan(&completed, &failed); err != nil {
			return err
		}
		if failed > 0 {
			var errs string
			_ = pool.QueryRow(ctx, `SELECT errors::text FROM documents WHERE status = 'failed' LIMIT 1`).Scan(&errs)
			return fmt.Errorf("%d documents failed, e.g. %s", failed, errs)
		}
		if completed == opts.docs {
			break
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%d of %d documents completed before the deadline", completed, opts.docs)
		}
		time.Sleep(100 * time.Millisecond)
	}
	pprof.StopCPUProfile() // the steps only (a no-op without a profile)
	var wall, p50, p99 float64
	if err := pool.QueryRow(ctx, `SELECT extract(epoch FROM max(completed_at) - min(started_at))::float8,
			percentile_cont(0.5) WITHIN GROUP (ORDER BY extract(epoch FROM completed_at - started_at)),
			percentile_cont(0.99) WITHIN GROUP (ORDER BY extract(epoch FROM completed_at - started_at)),
			sum(total_chunks)
		FROM documents`).Scan(&wall, &p50, &p99, &r.chunks); err != nil {
		return err
	}
	r.wall, r.docP50, r.docP99 = seconds(wall), seconds(p50), seconds(p99)
	if err := r.readStepMetrics(m.Registry()); err != nil {
		return err
	}

	// Checked: one run per batch of chunks (and one to move on) and no
	// other; every chunk embedded and tagged once, each answered 200.
	var wantRuns int
	rows, err := pool.Query(ctx, `SELECT total_chunks FROM documents`)
	if err != nil {
		return err
	}
	counts, err := pgx.CollectRows(rows, pgx.RowTo[int32])
	if err != nil {
		return err
	}
	for _, n := range counts {
		wantRuns += documentRuns(int(n))
	}
	c := fake.Counts()
	r.providerRequests, r.providerOK, r.limited = c.Requests, c.OK, c.RateLimited
	switch {
	case r.totalRuns() != wantRuns:
		return fmt.Errorf("%d step runs, want %d", r.totalRuns(), wantRuns)
	case c.OK+c.RateLimited != c.Requests || c.Inputs != r.chunks:
		return fmt.Errorf("the provider answered %d requests, %d OK, %d 429, embedding %d texts; want nothing but 200 and 429, and %d texts", c.Requests, c.OK, c.RateLimited, c.Inputs, r.chunks)
	}
	return tb.err()
}

// documentRuns is how many runs of its steps a document of n chunks takes:
// download, a run per EmbeddingsBatch chunks and one that finds none left,
// a run per TagsBatch chunks and one for the document's tags, store.
func documentRuns(n int) int {
	return 1 + (n+docindex.EmbeddingsBatch-1)/docindex.EmbeddingsBatch + 1 + (n+docindex.TagsBatch-1)/docindex.TagsBatch + 1 + 1
}

// readStepMetrics reads the step runs and their time from the
// orchestrator's metrics; a run that did not commit fails the part.
func (r *documentsRun) readStepMetrics(g prometheus.Gatherer) error {
	families, err := g.Gather()
	if err != nil {
		return err
	}
	r.runs, r.runTime = map[string]int{}, map[string]time.Duration{}
	for _, f := range families {
		for _, m := range f.GetMetric() {
			labels := map[string]string{}
			for _, l := range m.GetLabel() {
				labels[l.GetName()] = l.GetValue()
			}
			switch f.GetName() {
			case "orchestrator_document_steps_total":
				n := int(m.GetCounter().GetValue())
				switch labels["outcome"] {
				case metrics.StepDone:
					r.runs[labels["step"]] += n
				case metrics.StepWaited:
					r.waited += n
				case metrics.StepRetried:
					r.retried += n
				default:
					return fmt.Errorf("%d runs of %s ended %s", n, labels["step"], labels["outcome"])
				}
			case "orchestrator_document_step_duration_seconds":
				r.runTime[labels["step"]] = seconds(m.GetHistogram().GetSampleSum())
			}
		}
	}
	return nil
}

// documentSearch stores opts.searchChunks chunks and times searches of
// them through the API.
func (env *e2eEnv) documentSearch(ctx context.Context, opts documentsOptions, r *documentsRun) error {
	pool, cfg, logger, err := env.documentsDB(ctx, "bench_documents_search", nil)
	if err != nil {
		return err
	}
	defer pool.Close()
	if err := seedSearchChunks(ctx, pool, opts.searchChunks, cfg.Executors.Documents.EmbeddingsDimensions); err != nil {
		return err
	}
	deps, err := executor.Register(jobs.Deps{Pool: pool, Store: env.store, Compute: instantBackend{}, Settings: cfg.Jobs(), Logger: logger}, cfg.Executors, executor.Options{})
	if err != nil {
		return err
	}
	client, err := jobs.NewClient(deps, jobs.ClientConfig{NoSweep: true})
	if err != nil {
		return err
	}
	ln, stop, err := serveAPI(ctx, cfg.API(), api.Parts{Pool: pool, River: client, Executors: deps.Executors, Store: env.store, Logger: logger})
	if err != nil {
		return err
	}
	defer stop()

	search := func(q string) (time.Duration, error) {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+ln.Addr().String()+"/documents/search?k=10&q="+url.QueryEscape(q), nil)
		if err != nil {
			return 0, err
		}
		req.Header.Set("Authorization", "Bearer "+benchReadToken)
		start := time.Now()
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return 0, err
		}
		defer resp.Body.Close()
		var body struct{ Results []search.Result }
		err = json.NewDecoder(resp.Body).Decode(&body)
		took := time.Since(start)
		switch {
		case err != nil:
			return 0, err
		case resp.StatusCode != http.StatusOK:
			return 0, fmt.Errorf("search answered %d", resp.StatusCode)
		case len(body.Results) != 10:
			return 0, fmt.Errorf("search found %d chunks, want 10", len(body.Results))
		}
		return took, nil
	}
	rng := rand.New(rand.NewPCG(2, 3))
	query := func() string { return strings.Join(words(rng, 3+rng.IntN(4)), " ") }
	if r.firstSearch, err = search(query()); err != nil {
		return err
	}
	latencies := make([]time.Duration, opts.searches)
	for i := range latencies {
		if latencies[i], err = search(query()); err != nil {
			return err
		}
	}
	slices.Sort(latencies)
	r.searchP50, r.searchP99 = latencies[len(latencies)/2], latencies[min(len(latencies)-1, len(latencies)*99/100)]
	return nil
}

// seedSearchChunks stores n chunks as the search part does
// (loadSearchChunks): documents of 20, each chunk with its text's
// full-text vector, the local embedder's vector and its signature.
func seedSearchChunks(ctx context.Context, pool *pgxpool.Pool, n, dims int) error {
	return loadSearchChunks(ctx, pool, n, dims)
}

// vocabulary is the made-up words the bench's texts are written in: 2,000
// of two or three syllables, a token each.
var vocabulary = func() []string {
	const consonants, vowels = "bdfgklmnprstvz", "aeiou"
	rng := rand.New(rand.NewPCG(7, 11))
	seen := map[string]bool{}
	var out []string
	for len(out) < 2000 {
		var b strings.Builder
		for range 2 + rng.IntN(2) {
			b.WriteByte(consonants[rng.IntN(len(consonants))])
			b.WriteByte(vowels[rng.IntN(len(vowels))])
		}
		if w := b.String(); !seen[w] {
			seen[w] = true
			out = append(out, w)
		}
	}
	return out
}()

// words are n words of the vocabulary, drawn with rng.
func words(rng *rand.Rand, n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = vocabulary[rng.IntN(len(vocabulary))]
	}
	return out
}

// documentText is document i of the steps: chunks sections, each a
// heading and a paragraph that make a chunk of about 450 tokens
// (DOCUMENT_CHUNK_TOKENS 500).
func documentText(i, chunks int) string {
	rng := rand.New(rand.NewPCG(uint64(i), 5))
	var b strings.Builder
	for s := range chunks {
		fmt.Fprintf(&b, "## Section %d of document %d\n\n", s+1, i)
		for range 40 {
			b.WriteString(strings.Join(words(rng, 10), " "))
			b.WriteString(". ")
		}
		b.WriteString("\n\n")
	}
	return b.String()
}

func seconds(s float64) time.Duration { return time.Duration(s * float64(time.Second)) }

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

func documentsTable(r documentsRun) string {
	var b strings.Builder
	row := func(figure, value string) { fmt.Fprintf(&b, "%-44s %14s\n", figure, value) }
	p := "documents: "
	row(p+fmt.Sprintf("%d docs, %d chunks, all steps", r.docs, r.chunks), r.wall.Round(time.Millisecond).String())
	row(p+"documents/s", fmt.Sprintf("%.1f", float64(r.docs)/r.wall.Seconds()))
	row(p+"chunks/s", fmt.Sprintf("%.0f", float64(r.chunks)/r.wall.Seconds()))
	row(p+"step runs a document", fmt.Sprintf("%.1f", float64(r.totalRuns())/float64(r.docs)))
	row(p+"step runs/s", fmt.Sprintf("%.0f", float64(r.totalRuns())/r.wall.Seconds()))
	row(p+"per-step overhead (wall / runs), ms", fmt.Sprintf("%.2f", ms(r.perStep())))
	for _, step := range documentSteps {
		if n := r.runs[step]; n > 0 {
			row(p+fmt.Sprintf("  %s: runs, mean run ms", step), fmt.Sprintf("%d, %.1f", n, ms(r.runTime[step])/float64(n)))
		}
	}
	row(p+"runs that waited for the limiter", fmt.Sprint(r.waited))
	row(p+"runs retried after a 429", fmt.Sprint(r.retried))
	row(p+fmt.Sprintf("provider OK requests/s / C (%g/s)", r.capacity), fmt.Sprintf("%.2f", r.utilisation()))
	row(p+"provider requests / answered 429", fmt.Sprintf("%d / %d", r.providerRequests, r.limited))
	row(p+"a document, first step to done, p50", r.docP50.Round(time.Millisecond).String())
	row(p+"a document, first step to done, p99", r.docP99.Round(time.Millisecond).String())
	row(p+fmt.Sprintf("search over %d chunks, first", r.searchChunks), r.firstSearch.Round(time.Millisecond).String())
	row(p+"search latency p50", r.searchP50.Round(10*time.Microsecond).String())
	row(p+"search latency p99", r.searchP99.Round(10*time.Microsecond).String())
	return b.String()
}

// utilisation is the provider's successful answers a second over the
// steps, over its capacity.
func (r documentsRun) utilisation() float64 {
	return float64(r.providerOK) / r.wall.Seconds() / r.capacity
}

func documentsTargets(r documentsRun, row func(figure, target, got string, met bool)) {
	if r.searchChunks >= 100000 {
		row(fmt.Sprintf("document search p50 over %d chunks", r.searchChunks), "< 100 ms",
			r.searchP50.Round(10*time.Microsecond).String(), r.searchP50 < documentsSearchGoal)
	}
}

func documentsMarkdown(r documentsRun) string {
	return fmt.Sprintf(`- **Documents**: *steps*: %d markdown documents of %d sections (%d chunks in
  all at DOCUMENT_CHUNK_TOKENS 500), stored in the S3 server and asked for
  through the service as `+"`POST /documents`"+` does, then taken through every step
  (download and chunk, embeddings 10 chunks a run, tags 5 a run and the
  document's, store) by the River workers of this process, against a fake
  OpenAI-compatible provider of C = %g requests/s for both roles together,
  answering 429 above it and at once below it (`+"`internal/fakes/fakeai`"+` over
  HTTP, through the real clients and the shared rate limiter with its default
  settings, a bucket per role: %d requests). *provider OK requests/s / C* is its
  successful answers a second over the steps' time: how much of the provider
  the documents use. A run is otherwise all overhead: the job's fetch, the
  document's read, the limiter's two transactions, the call, the run's
  transaction and its snooze; the fake and the S3 server share the 2 cores
  with them. Timed from the first step's
  start to the last document's completion (the database's times); *per-step
  overhead* is that time over the step runs (the machine's cost of a step, runs
  overlapping on 50 workers); *mean run* is one run's own time
  (`+"`orchestrator_document_step_duration_seconds`"+`). A document's own time
  includes spec 003's 100 ms between runs, and all documents are asked for at
  once, so their runs interleave. Checked:
  every document completed, one run per batch of chunks (and one to move on)
  and no other, every provider request answered 200 or 429. *search*: %d chunks
  stored (documents of 20, 40 words each, vectors of the local embedder, 512
  dimensions), then %d searches of 3 to 6 words through `+"`GET /documents/search`"+`
  (k = 10, over HTTP), one at a time; the first search, which starts the
  load of the process's index of signatures, is timed apart (see the search
  part for search at scale).
`, r.docs, r.sections, r.chunks, r.capacity, r.providerRequests, r.searchChunks, r.searches)
}
