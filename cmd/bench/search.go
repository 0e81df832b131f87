package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"maps"
	"math/rand/v2"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/arke-institute/orchestrator/client"
	"github.com/arke-institute/orchestrator/embedding"
	"github.com/arke-institute/orchestrator/internal/fakes/fakefly"
	"github.com/arke-institute/orchestrator/search"
)

// The search part's flags.
var (
	searchSizesFlag   = flag.String("search-sizes", "100000,1000000", "search: chunks loaded into Postgres for each run")
	searchQueriesFlag = flag.Int("search-queries", 800, "search: searches timed in each of a run's two windows, spread over the clients")
	searchClientsFlag = flag.Int("search-clients", 8, "search: concurrent clients")
)

// The search goals (issue 30).
const (
	searchP50Goal   = 100 * time.Millisecond
	searchP99Goal   = 300 * time.Millisecond
	searchFirstGoal = time.Second
)

// searchDims is the vectors' size: the local embedder at EMBEDDINGS_DIMENSIONS'
// default.
const searchDims = 512

// searchRun is one run of the search part: n chunks.
type searchRun struct {
	chunks  int
	clients int
	load    time.Duration // loading the chunks into Postgres (COPY, indexes, VACUUM ANALYZE)
	// first is the first search after the orchestrator started, its
	// in-memory index not loaded; indexLoad how long loading it took (the
	// process's log).
	first, indexLoad time.Duration
	// coldP50 and coldP99 are over the first window of searches after
	// the index loaded; p50, p99 and max over the next (steady).
	coldP50, coldP99 time.Duration
	p50, p99, max    time.Duration
	perSecond        float64
	// rssIdle is the process's RSS after start, before any search; rss its
	// RSS after the searches, peakRSS its VmHWM.
	rssIdle, rss, peakRSS int64
	// indexBytes is what the index reports it holds.
	indexBytes int64
	textOnly   int // searches that answered from full-text alone (none expected)
}

// benchSearch loads each size of chunks into a database of its own,
// starts `orchestrator serve` on it and times searches through the API.
func benchSearch(ctx context.Context, admin *pgx.Conn, base, bin string, e2eOpts e2eOptions) ([]searchRun, error) {
	var sizes []int
	for _, v := range strings.Split(*searchSizesFlag, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(v))
		if err != nil || n < 1000 {
			return nil, fmt.Errorf("-search-sizes: %q is not a number of chunks of at least 1000", v)
		}
		sizes = append(sizes, n)
	}
	if *searchQueriesFlag < *searchClientsFlag || *searchClientsFlag < 1 {
		return nil, errors.New("-search-queries must be at least -search-clients, which must be positive")
	}
	env, err := newE2EEnv(ctx, admin, base, e2eOpts)
	if err != nil {
		return nil, err
	}
	defer env.close()
	var runs []searchRun
	for _, n := range sizes {
		fmt.Fprintf(os.Stderr, "search: %d chunks...\n", n)
		r, err := env.searchOnce(ctx, bin, n)
		if err != nil {
			return nil, fmt.Errorf("%d chunks: %w", n, err)
		}
		fmt.Fprintf(os.Stderr, "search: %d chunks: load %s, first %s, index load %s, p50 %s, p99 %s, RSS %.0f MB\n", n, r.load.Round(time.Second),
			r.first.Round(time.Millisecond), r.indexLoad.Round(time.Millisecond), r.p50.Round(time.Millisecond), r.p99.Round(time.Millisecond), float64(r.rss)/1e6)
		runs = append(runs, r)
	}
	return runs, nil
}

// searchOnce is one run: n chunks loaded while a first process idles, then
// a process started afresh on them (a restart) and searched.
func (env *e2eEnv) searchOnce(ctx context.Context, bin string, n int) (searchRun, error) {
	r := searchRun{chunks: n, clients: *searchClientsFlag}
	dbURL, err := freshDatabase(ctx, env.admin, env.base, "bench_search")
	if err != nil {
		return r, err
	}
	defer env.admin.Exec(context.WithoutCancel(ctx), "DROP DATABASE IF EXISTS bench_search WITH (FORCE)") //nolint:errcheck // a leftover database is dropped by the next run
	tb := &benchTB{}
	defer tb.close()
	fly := fakefly.New(tb, fakefly.Options{Token: benchFlyToken})
	addr, err := freePort()
	if err != nil {
		return r, err
	}
	settings := maps.Clone(e2eSettings)
	maps.Copy(settings, map[string]string{
		"DATABASE_URL": dbURL, "LISTEN_ADDR": addr, "ORCHESTRATOR_URL": "http://" + addr, "WORKER_URL": env.ingest.srv.URL,
		"R2_ENDPOINT": env.s3.Endpoint, "R2_ACCESS_KEY_ID": env.s3.AccessKeyID, "R2_SECRET_ACCESS_KEY": env.s3.SecretAccessKey,
		"FLY_API_TOKEN": benchFlyToken, "FLY_FLAPS_BASE_URL": fly.URL, "LOG_LEVEL": "info",
	})
	api, err := client.New(client.Config{URL: "http://" + addr, ReadToken: settings["READ_TOKEN"]})
	if err != nil {
		return r, err
	}
	serve := func(logFile string) (*orchestratorProc, error) {
		proc, err := startOrchestrator(ctx, bin, settings, logFile)
		if err != nil {
			return nil, err
		}
		if err := proc.awaitHealthy(ctx, api); err != nil {
			proc.stop() //nolint:errcheck // the health check's error says more
			return nil, err
		}
		return proc, nil
	}

	// A first process migrates the database and idles while the chunks
	// load; then it stops, and a new one starts on them (a restart).
	proc, err := serve(filepath.Join(env.tmp, fmt.Sprintf("orchestrator-search-%d.log", n)))
	if err != nil {
		return r, err
	}
	pool, err := pgxpool.New(ctx, dbURL)
	if err != nil {
		proc.stop() //nolint:errcheck // the pool's error says more
		return r, err
	}
	defer pool.Close()
	start := time.Now()
	err = loadSearchChunks(ctx, pool, n, searchDims)
	r.load = time.Since(start)
	if stopErr := proc.stop(); err == nil {
		err = stopErr
	}
	if err != nil {
		return r, fmt.Errorf("loading the chunks: %w", err)
	}
	logFile := filepath.Join(env.tmp, fmt.Sprintf("orchestrator-search-%d-restarted.log", n))
	if proc, err = serve(logFile); err != nil {
		return r, err
	}
	defer proc.stop() //nolint:errcheck // the run's figures are taken by then
	if r.rssIdle, err = processRSS(proc.cmd.Process.Pid, "VmRSS:"); err != nil {
		return r, err
	}
	apiURL, token := "http://"+addr, settings["READ_TOKEN"]
	rng := rand.New(rand.NewPCG(2, 3))
	query := func(rng *rand.Rand) string { return strings.Join(words(rng, 3+rng.IntN(4)), " ") }

	var textOnly int
	var mu sync.Mutex
	do := func(q string) (time.Duration, error) {
		took, mode, err := searchOnceHTTP(ctx, apiURL, token, q)
		if mode == search.TextOnly {
			mu.Lock()
			textOnly++
			mu.Unlock()
		}
		return took, err
	}
	if r.first, err = do(query(rng)); err != nil {
		return r, err
	}
	if r.indexLoad, err = awaitIndexLoaded(ctx, logFile); err != nil {
		return r, err
	}

	// Two windows of the same searches' size: the first after the restart
	// (Postgres's buffers and the process's connections still cold),
	// reported apart, then the steady one the goals are of.
	window := func(seed uint64) (p50, p99, longest time.Duration, perSecond float64, err error) {
		latencies := make([]time.Duration, *searchQueriesFlag)
		each := len(latencies) / r.clients
		latencies = latencies[:each*r.clients]
		var wg sync.WaitGroup
		errs := make(chan error, r.clients)
		start := time.Now()
		for c := range r.clients {
			rng := rand.New(rand.NewPCG(uint64(c), seed))
			wg.Go(func() {
				for i := range each {
					took, err := do(query(rng))
					if err != nil {
						errs <- err
						return
					}
					latencies[c*each+i] = took
				}
			})
		}
		wg.Wait()
		wall := time.Since(start)
		close(errs)
		if err := <-errs; err != nil {
			return 0, 0, 0, 0, err
		}
		slices.Sort(latencies)
		return latencies[len(latencies)/2], latencies[min(len(latencies)-1, len(latencies)*99/100)], latencies[len(latencies)-1],
			float64(len(latencies)) / wall.Seconds(), nil
	}
	if r.coldP50, r.coldP99, _, _, err = window(9); err != nil {
		return r, err
	}
	if r.p50, r.p99, r.max, r.perSecond, err = window(10); err != nil {
		return r, err
	}
	r.textOnly = textOnly
	if r.rss, err = processRSS(proc.cmd.Process.Pid, "VmRSS:"); err != nil {
		return r, err
	}
	if r.peakRSS, err = proc.peakRSS(); err != nil {
		return r, err
	}
	r.indexBytes = indexBytes(logFile)
	return r, nil
}

// searchClient keeps a connection for each of the clients, as a search
// page or a service calling the API would (net/http's default client keeps
// two a host: the others would connect anew for each search).
var searchClient = &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 64}}

// searchOnceHTTP runs one search through the API (k = 10) and times it.
func searchOnceHTTP(ctx context.Context, addr, token, q string) (time.Duration, search.Mode, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, addr+"/documents/search?k=10&q="+url.QueryEscape(q), nil)
	if err != nil {
		return 0, "", err
	}
	req.Header.Set("Authorization", "Bearer "+token)
	start := time.Now()
	resp, err := searchClient.Do(req)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	var body search.Answer
	err = json.NewDecoder(resp.Body).Decode(&body)
	// Read to the end, so that the connection is kept for the next search.
	io.Copy(io.Discard, resp.Body) //nolint:errcheck // the answer is read already
	took := time.Since(start)
	switch {
	case err != nil:
		return 0, "", err
	case resp.StatusCode != http.StatusOK:
		return 0, "", fmt.Errorf("search answered %d", resp.StatusCode)
	case len(body.Results) != 10:
		return 0, "", fmt.Errorf("search for %q found %d chunks, want 10 (%s)", q, len(body.Results), body.Notice)
	}
	return took, body.Mode, nil
}

// awaitIndexLoaded waits for the process's log to say its search index
// loaded and returns how long that took, by the log.
func awaitIndexLoaded(ctx context.Context, logFile string) (time.Duration, error) {
	deadline := time.Now().Add(5 * time.Minute)
	for {
		if line, ok := logLine(logFile, "search index loaded"); ok {
			return time.Duration(line["took_ms"].(float64)) * time.Millisecond, nil
		}
		if line, ok := logLine(logFile, "search index load failed"); ok {
			return 0, fmt.Errorf("the search index did not load: %v", line["error"])
		}
		if time.Now().After(deadline) {
			return 0, errors.New("the search index did not load within 5 minutes")
		}
		select {
		case <-ctx.Done():
			return 0, ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// indexBytes is the size the process logged its index to take, 0 if none.
func indexBytes(logFile string) int64 {
	if line, ok := logLine(logFile, "search index loaded"); ok {
		if b, ok := line["bytes"].(float64); ok {
			return int64(b)
		}
	}
	return 0
}

// logLine is the first JSON line of the log whose message is msg.
func logLine(logFile, msg string) (map[string]any, bool) {
	data, err := os.ReadFile(logFile)
	if err != nil {
		return nil, false
	}
	for _, l := range strings.Split(string(data), "\n") {
		var line map[string]any
		if json.Unmarshal([]byte(l), &line) == nil && line["msg"] == msg {
			return line, true
		}
	}
	return nil, false
}

// processRSS reads a field of /proc/PID/status in bytes (VmRSS:, VmHWM:).
func processRSS(pid int, field string) (int64, error) {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, err
	}
	for _, line := range strings.Split(string(data), "\n") {
		if rest, ok := strings.CutPrefix(line, field); ok {
			kb, err := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(rest), "kB")), 10, 64)
			return kb << 10, err
		}
	}
	return 0, fmt.Errorf("no %s in /proc/%d/status", field, pid)
}

// loadSearchChunks stores n chunks straight into Postgres (COPY), in
// completed current documents of 20, as the document steps leave them:
// 40 words of text each, its full-text vector ('simple'), the local
// embedder's vector of dims, its signature and its quantised form.
func loadSearchChunks(ctx context.Context, pool *pgxpool.Pool, n, dims int) error {
	const perDoc = 20
	docs := (n + perDoc - 1) / perDoc
	if _, err := pool.Exec(ctx, `INSERT INTO documents (r2_key, version, status, current_step, total_chunks, processed_chunks,
			current, started_at, completed_at, search_xid)
		SELECT 'documents/search/doc' || lpad(i::text, 7, '0') || '.md', 1, 'completed', 'store', $2, $2, true, now(), now(), pg_current_xact_id()
		FROM generate_series(1, $1) i`, docs, perDoc); err != nil {
		return err
	}
	rows, err := pool.Query(ctx, `SELECT id FROM documents ORDER BY id`)
	if err != nil {
		return err
	}
	ids, err := pgx.CollectRows(rows, pgx.RowTo[int64])
	if err != nil {
		return err
	}
	embedder := embedding.NewLocal(dims)
	model := embedder.Model()
	rng := rand.New(rand.NewPCG(1, 2))
	sigs := make([]pgtype.Bits, n)
	quantised := make([][]byte, n)
	err = copyRows(ctx, pool, "document_chunks", []string{"document_id", "chunk_index", "text", "heading", "tokens", "embedding", "tags", "status",
		"search_text", "text_config", "embedding_model", "embedding_dims"}, n, func(i int) []any {
		ws := words(rng, 40)
		text := strings.Join(ws, " ") + "."
		v := embedder.Vector(text)
		sigs[i], quantised[i] = search.Signature(v), search.Quantise(v)
		return []any{ids[i/perDoc], int32(i % perDoc), text, "", int32(45), v, []string{}, "stored", simpleTSVector(ws), "simple", model, int32(dims)}
	})
	if err != nil {
		return err
	}
	err = copyRows(ctx, pool, "chunk_signatures", []string{"document_id", "chunk_index", "embedding_model", "embedding_dims", "signature"}, n,
		func(i int) []any { return []any{ids[i/perDoc], int32(i % perDoc), model, int32(dims), sigs[i]} })
	if err != nil {
		return err
	}
	err = copyRows(ctx, pool, "chunk_vectors", []string{"document_id", "chunk_index", "embedding_model", "embedding_dims", "quantised"}, n,
		func(i int) []any { return []any{ids[i/perDoc], int32(i % perDoc), model, int32(dims), quantised[i]} })
	if err != nil {
		return err
	}
	if _, err = pool.Exec(ctx, "VACUUM ANALYZE documents, document_chunks, chunk_signatures, chunk_vectors"); err != nil {
		return err
	}
	// Written out now, not by the checkpointer during the searches.
	_, err = pool.Exec(ctx, "CHECKPOINT")
	return err
}

// copyRows copies n rows into table's columns (COPY), row i as row(i)
// makes it, in order.
func copyRows(ctx context.Context, pool *pgxpool.Pool, table string, columns []string, n int, row func(i int) []any) error {
	i := 0
	_, err := pool.CopyFrom(ctx, pgx.Identifier{table}, columns, pgx.CopyFromFunc(func() ([]any, error) {
		if i == n {
			return nil, nil
		}
		i++
		return row(i - 1), nil
	}))
	return err
}

// simpleTSVector is what to_tsvector('simple', ...) makes of words (lower
// case already): each word once, with its positions from 1.
func simpleTSVector(ws []string) pgtype.TSVector {
	at := map[string][]pgtype.TSVectorPosition{}
	for i, w := range ws {
		at[w] = append(at[w], pgtype.TSVectorPosition{Position: uint16(i + 1)})
	}
	tsv := pgtype.TSVector{Valid: true}
	for _, w := range slices.Sorted(func(yield func(string) bool) {
		for w := range at {
			if !yield(w) {
				return
			}
		}
	}) {
		tsv.Lexemes = append(tsv.Lexemes, pgtype.TSVectorLexeme{Word: w, Positions: at[w]})
	}
	return tsv
}

func searchTable(runs []searchRun) string {
	var b strings.Builder
	row := func(figure, value string) { fmt.Fprintf(&b, "%-44s %14s\n", figure, value) }
	for _, r := range runs {
		p := fmt.Sprintf("search %s chunks: ", thousands(r.chunks))
		row(p+"load (COPY, indexes)", r.load.Round(time.Second).String())
		row(p+"first after restart", r.first.Round(time.Millisecond).String())
		row(p+"index load (background)", r.indexLoad.Round(time.Millisecond).String())
		row(p+"first window p50 / p99", fmt.Sprintf("%s / %s", r.coldP50.Round(100*time.Microsecond), r.coldP99.Round(100*time.Microsecond)))
		row(p+fmt.Sprintf("p50, %d clients", r.clients), r.p50.Round(100*time.Microsecond).String())
		row(p+fmt.Sprintf("p99, %d clients", r.clients), r.p99.Round(100*time.Microsecond).String())
		row(p+"max", r.max.Round(time.Millisecond).String())
		row(p+"searches/s", fmt.Sprintf("%.0f", r.perSecond))
		row(p+"RSS idle / after / peak, MB", fmt.Sprintf("%.0f / %.0f / %.0f", float64(r.rssIdle)/1e6, float64(r.rss)/1e6, float64(r.peakRSS)/1e6))
		row(p+"in-memory index, MB", fmt.Sprintf("%.1f", float64(r.indexBytes)/1e6))
		if r.textOnly > 0 {
			row(p+"searches from full-text alone", strconv.Itoa(r.textOnly))
		}
	}
	return b.String()
}

// thousands writes n with thousands separators.
func thousands(n int) string {
	s := strconv.Itoa(n)
	for i := len(s) - 3; i > 0; i -= 3 {
		s = s[:i] + "," + s[i:]
	}
	return s
}

func searchTargets(runs []searchRun, row func(figure, target, got string, met bool)) {
	for _, r := range runs {
		n := thousands(r.chunks)
		row(fmt.Sprintf("search p50 over %s chunks, %d clients", n, r.clients), "<= 100 ms", r.p50.Round(100*time.Microsecond).String(), r.p50 <= searchP50Goal)
		row(fmt.Sprintf("search p99 over %s chunks, %d clients", n, r.clients), "<= 300 ms", r.p99.Round(100*time.Microsecond).String(), r.p99 <= searchP99Goal)
		row(fmt.Sprintf("first search after a restart, %s chunks", n), "<= 1 s", r.first.Round(time.Millisecond).String(), r.first <= searchFirstGoal)
	}
}

func searchMarkdown(runs []searchRun) string {
	sizes := make([]string, len(runs))
	for i, r := range runs {
		sizes[i] = thousands(r.chunks)
	}
	return fmt.Sprintf(`- **Search**: %s chunks loaded straight into Postgres (COPY: documents of
  20 chunks, 40 made-up words of a 2,000-word vocabulary each, their 'simple'
  tsvector, the local embedder's 512-dimension vector, its signature and its
  quantised form, as the document steps leave them, then a checkpoint),
  while a first `+"`orchestrator serve`"+` idles; then a new process is started
  on them (a restart) and searched through `+"`GET /documents/search`"+` (k = 10,
  queries of 3 to 6 words of the vocabulary, embedded by the local embedder
  in the process). *first after restart* is the
  first search, before the process's in-memory index of signatures is loaded
  (its vector candidates come from a scan of `+"`chunk_signatures`"+` in Postgres);
  *index load* is how long the background load took (the process's log); then
  two windows of %d searches by %d concurrent clients, each on a connection
  it keeps, the index loaded, each search required to answer 10 results: the
  first window after the restart (Postgres's buffers cold) is shown apart,
  the second is the steady state the p50, p99, max and searches/s are of.
  RSS is the serving process's (VmRSS idle after start, after the searches,
  and VmHWM); *in-memory index* is what the index reports it holds. The
  clients, the orchestrator and Postgres share the machine's cores.
`, strings.Join(sizes, " and "), *searchQueriesFlag, *searchClientsFlag)
}
