package main

import (
	"bufio"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"sort"
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
	"github.com/arke-institute/orchestrator/internal/fakes/fakeocr"
	"github.com/arke-institute/orchestrator/internal/fakes/ocrfixture"
	"github.com/arke-institute/orchestrator/manifest"
	"github.com/arke-institute/orchestrator/phases"
)

// The orchestrators' credentials.
const (
	adminToken  = "chaos-admin-token-0123456789"
	readToken   = "chaos-read-token-0123456789"
	ingestToken = "chaos-ingest-token-0123456789"
)

// proc is one `orchestrator serve`, which the driver may kill and start
// again with the same settings.
type proc struct {
	name    string
	bin     string
	env     []string
	logPath string
	url     string
	metrics string

	mu   sync.Mutex
	cmd  *exec.Cmd
	done chan struct{}
}

func (p *proc) start() error {
	f, err := os.OpenFile(p.logPath, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		return err
	}
	p.mu.Lock()
	bin := p.bin
	p.mu.Unlock()
	cmd := exec.Command(bin, "serve")
	cmd.Env = append(os.Environ(), p.env...)
	cmd.Stdout, cmd.Stderr = f, f
	if err := cmd.Start(); err != nil {
		f.Close()
		return fmt.Errorf("starting %s: %w", p.name, err)
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); f.Close(); close(done) }()
	p.mu.Lock()
	p.cmd, p.done = cmd, done
	p.mu.Unlock()
	return nil
}

// kill is kill -9: no shutdown at all.
func (p *proc) kill() {
	p.mu.Lock()
	cmd, done := p.cmd, p.done
	p.mu.Unlock()
	_ = cmd.Process.Kill()
	<-done
}

// stop asks for a clean shutdown, then kills after 30 s.
func (p *proc) stop() {
	p.mu.Lock()
	cmd, done := p.cmd, p.done
	p.mu.Unlock()
	if cmd == nil {
		return
	}
	_ = cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		_ = cmd.Process.Kill()
		<-done
	}
}

// awaitHealthy waits for GET /healthz to answer 200.
func (p *proc) awaitHealthy(ctx context.Context, limit time.Duration) error {
	return retry(ctx, limit, func() error {
		resp, err := http.Get(p.url + "/healthz")
		if err != nil {
			return err
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("%s: /healthz answered %d", p.name, resp.StatusCode)
		}
		return nil
	})
}

// goroutines reads go_goroutines from the process's metrics.
func (p *proc) goroutines() (int, error) {
	resp, err := http.Get("http://" + p.metrics + "/metrics")
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "go_goroutines "); ok {
			f, err := strconv.ParseFloat(v, 64)
			return int(f), err
		}
	}
	return 0, fmt.Errorf("%s: no go_goroutines in its metrics", p.name)
}

// loadRun is one run's moving parts.
type loadRun struct {
	w           *world
	label       string
	chaos       bool
	dbURL       string
	fly         childInfo
	flyCmd      *exec.Cmd
	provider    childInfo
	providerCmd *exec.Cmd
	procs       [2]*proc
	ids         []string
	// batches are what was submitted of each batch, by id.
	batches map[string]*submitted
	rng     *rng
	res     *runResult
	// upgrade is the rolling upgrade test's run: its orchestrators start
	// on the previous release (world.release).
	upgrade bool
	// started is when the first batch was submitted.
	started time.Time
}

// submitted is what the driver put in one batch's manifest.
type submitted struct {
	files, bytes int64
	// paths are the logical paths of its files.
	paths []string
	// describe is its directory with OCR and description on, "" if none.
	describe string
}

// run takes the load through a fresh database, a fresh fake Machines API
// and two fresh orchestrators, with faults when chaos is set.
func (w *world) run(ctx context.Context, label string, chaos bool) (*runResult, error) {
	l := &loadRun{w: w, label: label, chaos: chaos, rng: newRNG(w.opts.seed), res: newRunResult(label, w.opts), batches: map[string]*submitted{},
		upgrade: w.release != ""}
	var err error
	if l.dbURL, err = w.createDatabase(ctx, "chaos_"+label); err != nil {
		return nil, err
	}
	flyArgs := []string{"-seed", strconv.FormatUint(w.opts.seed, 10), "-late-by", (w.opts.taskTimeout + 10*time.Second).String(),
		"-delay", w.opts.workerDelay.String()}
	if chaos {
		flyArgs = append(flyArgs, "-hang", fmt.Sprint(w.opts.hang), "-crash", fmt.Sprint(w.opts.crash), "-late", fmt.Sprint(w.opts.late))
	}
	if l.flyCmd, l.fly, err = w.startChild(ctx, "fly-"+label, "fly", flyArgs...); err != nil {
		return nil, err
	}
	defer stopChild(l.flyCmd)
	if l.providerCmd, l.provider, err = w.startChild(ctx, "provider-"+label, "provider"); err != nil {
		return nil, err
	}
	defer stopChild(l.providerCmd)
	if err := l.startProcs(ctx); err != nil {
		return nil, err
	}
	defer func() {
		for _, p := range l.procs {
			p.stop()
		}
	}()
	if err := l.upload(ctx); err != nil {
		return nil, err
	}

	start := time.Now()
	l.started = start
	injectCtx, stopInjecting := context.WithCancel(ctx)
	injected, firstRound, allSubmitted := make(chan struct{}), make(chan struct{}), make(chan struct{})
	go func() {
		defer close(injected)
		switch {
		case l.upgrade:
			l.upgradeProcs(injectCtx, firstRound, allSubmitted)
		case chaos:
			l.inject(injectCtx, firstRound)
		default:
			close(firstRound)
		}
	}()
	if err := l.submit(ctx); err != nil {
		stopInjecting()
		return nil, err
	}
	close(allSubmitted)
	// Faults stop a while after the last submission, once each kind was
	// injected: a fault injected for ever would keep a batch waiting out
	// its backoff for ever.
	go func() {
		select {
		case <-injectCtx.Done():
		case <-time.After(l.w.opts.faultsAfter):
			select {
			case <-injectCtx.Done():
			case <-firstRound:
				l.w.logf("%s: no more faults", l.label)
				stopInjecting()
			}
		}
	}()
	waitErr := l.awaitEnded(ctx, start)
	if waitErr == nil {
		// Every kind of fault is injected at least once, even if the
		// batches ended first.
		<-firstRound
	}
	l.res.elapsed = time.Since(start)
	stopInjecting()
	<-injected
	if waitErr != nil {
		l.res.check("every batch ended within -timeout", false, waitErr.Error())
	}
	// Every fault is over: both processes serve, Postgres is up.
	for _, p := range l.procs {
		if err := p.awaitHealthy(ctx, 2*time.Minute); err != nil {
			return nil, err
		}
	}
	if err := l.collect(ctx); err != nil {
		return nil, err
	}
	return l.res, nil
}

// createDatabase makes a fresh database on the cluster and returns its URL.
func (w *world) createDatabase(ctx context.Context, name string) (string, error) {
	conn, err := pgx.Connect(ctx, w.cluster.URL)
	if err != nil {
		return "", err
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, "DROP DATABASE IF EXISTS "+name+" WITH (FORCE)"); err != nil {
		return "", err
	}
	if _, err := conn.Exec(ctx, "CREATE DATABASE "+name); err != nil {
		return "", err
	}
	return strings.Replace(w.cluster.URL, "/postgres?", "/"+name+"?", 1), nil
}

// proxiedURL is the run's database through the partition proxy.
func (l *loadRun) proxiedURL() (string, error) {
	u, err := url.Parse(l.dbURL)
	if err != nil {
		return "", err
	}
	return "postgres://postgres@" + l.w.proxy.Addr() + u.Path + "?sslmode=disable", nil
}

// startProcs starts the two orchestrators, one after the other (the first
// applies the migrations).
func (l *loadRun) startProcs(ctx context.Context) error {
	timeout := strconv.FormatInt(l.w.opts.taskTimeout.Milliseconds(), 10)
	dbURL, err := l.proxiedURL()
	if err != nil {
		return err
	}
	for i := range l.procs {
		addr, err := freeAddr()
		if err != nil {
			return err
		}
		metricsAddr, err := freeAddr()
		if err != nil {
			return err
		}
		bin := l.w.bin
		if l.upgrade {
			bin = l.w.release
		}
		p := &proc{name: fmt.Sprintf("orchestrator-%c", 'A'+i), bin: bin, url: "http://" + addr, metrics: metricsAddr,
			logPath: filepath.Join(l.w.tmp, fmt.Sprintf("%s-orchestrator-%c.log", l.label, 'A'+i))}
		p.env = []string{
			"DATABASE_URL=" + dbURL, "DATABASE_MAX_CONNS=" + strconv.Itoa(l.w.opts.maxConns),
			"LISTEN_ADDR=" + addr, "ORCHESTRATOR_URL=" + p.url, "METRICS_ADDR=" + metricsAddr,
			"WORKER_URL=" + l.w.ingest.URL,
			"R2_ENDPOINT=" + l.w.s3.Endpoint, "R2_ACCESS_KEY_ID=" + s3Access, "R2_SECRET_ACCESS_KEY=" + s3Secret,
			"CDN_PUBLIC_URL=" + cdnPublicURL,
			"FLY_API_TOKEN=" + flyToken, "FLY_FLAPS_BASE_URL=" + l.fly.URL,
			"FLY_LAUNCH_RATE=1000", "FLY_LAUNCH_BURST=1000",
			"ADMIN_TOKEN=" + adminToken, "READ_TOKEN=" + readToken, "INGEST_TOKEN=" + ingestToken,
			"SWEEP_INTERVAL=1000", "TASK_MAX_ATTEMPTS=" + strconv.Itoa(taskMaxAttempts),
			// The fake makes machines faulty on purpose: a task whose every
			// machine was faulty rightly fails (the checker counts it), and
			// its batch must still end DONE, not ERROR past 1%.
			"INFRA_FAILURE_MAX=100%",
			"LOG_FORMAT=json", "LOG_LEVEL=warn",
			// The OCR and documents phases call chaos provider; its
			// buckets start roomier than the defaults, as a provider with
			// a known quota would be configured.
			"OCR_API_URL=" + l.provider.URL, "OCR_API_KEY=" + providerKey,
			"EMBEDDINGS_API_URL=" + l.provider.AI, "EMBEDDINGS_API_KEY=" + providerKey,
			"TAGS_API_URL=" + l.provider.AI, "TAGS_API_KEY=" + providerKey,
			"INITIAL_MAX_TOKENS=10", "INITIAL_REFILL_RATE=10", "MAX_MAX_TOKENS=30", "MAX_REFILL_RATE=30",
			"EMBEDDINGS_INITIAL_MAX_TOKENS=10", "EMBEDDINGS_INITIAL_REFILL_RATE=10", "EMBEDDINGS_MAX_MAX_TOKENS=30", "EMBEDDINGS_MAX_REFILL_RATE=30",
			"TAGS_INITIAL_MAX_TOKENS=10", "TAGS_INITIAL_REFILL_RATE=10", "TAGS_MAX_MAX_TOKENS=30", "TAGS_MAX_REFILL_RATE=30",
		}
		// Every machine phase runs on -executor (a machine per task, or
		// pools), launches quickly and times out soon.
		for _, ph := range phases.All() {
			if s := ph.Spec(); s.Worker != "" {
				p.env = append(p.env, "EXECUTOR_"+string(s.Name)+"="+l.w.opts.executor, "ALARM_DELAY_"+string(s.Name)+"=200", "TASK_TIMEOUT_"+string(s.Name)+"="+timeout)
			}
		}
		if err := p.start(); err != nil {
			return err
		}
		l.procs[i] = p
		if err := p.awaitHealthy(ctx, 2*time.Minute); err != nil {
			return fmt.Errorf("%s did not become healthy (log %s): %w", p.name, p.logPath, err)
		}
	}
	return nil
}

// describeOn is the processing of a directory with OCR and description
// on (testenv.DescribeOn).
var describeOn = manifest.ProcessingConfig{OCR: true, Describe: true, Pinax: true}

// textDocs are the text documents of a directory with description on:
// name and content type.
var textDocs = [][2]string{{"notes.md", "text/markdown"}, {"minutes.txt", "text/plain"}}

// describeDir is batch i's directory with OCR and description on, ""
// for none: every other batch's second directory of 25 TIFFs (its first
// if it has one), which also gets the text documents (textDocs).
func (o options) describeDir(i int) string {
	if i%2 == 0 {
		return ""
	}
	return fmt.Sprintf("/box%02d", min(1, (o.filesOf(i)-1)/25))
}

// isTextDoc is a text document's key or path.
func isTextDoc(key string) bool {
	return strings.HasSuffix(key, ".md") || strings.HasSuffix(key, ".txt")
}

// textContent is what the driver uploads at a text document's key.
func textContent(key string) string {
	return "# Chaos notes\n\nThe harbour ledger kept at " + key + ", written by the chaos driver.\n"
}

// upload writes every batch's manifest and files (inputContent: the fake
// workers read them, and the driver finds them in the final manifests;
// textContent for the text documents).
func (l *loadRun) upload(ctx context.Context) error {
	for i := range l.w.opts.batches {
		id := ulid.Make().String()
		prefix := "staging/" + id + "/"
		sub := &submitted{describe: l.w.opts.describeDir(i)}
		var groups []manifest.DirectoryGroup
		for j := range l.w.opts.filesOf(i) {
			dir := fmt.Sprintf("/box%02d", j/25)
			logical := fmt.Sprintf("%s/scan%04d.tif", dir, j)
			cfg := manifest.ProcessingConfig{Pinax: true}
			if dir == sub.describe {
				cfg = describeOn
			}
			groups = append(groups, manifest.DirectoryGroup{DirectoryPath: dir, ProcessingConfig: cfg,
				Files: []manifest.FileInfo{{R2Key: prefix + logical[1:], LogicalPath: logical, FileName: filepath.Base(logical), FileSize: 1000 + int64(j), ContentType: "image/tiff"}}})
		}
		if sub.describe != "" {
			for _, d := range textDocs {
				logical := sub.describe + "/" + d[0]
				key := prefix + logical[1:]
				groups = append(groups, manifest.DirectoryGroup{DirectoryPath: sub.describe, ProcessingConfig: describeOn,
					Files: []manifest.FileInfo{{R2Key: key, LogicalPath: logical, FileName: d[0], FileSize: int64(len(textContent(key))), ContentType: d[1]}}})
			}
		}
		m := manifest.Build(id, groups)
		body, err := json.Marshal(m)
		if err != nil {
			return err
		}
		if err := l.w.store.Put(ctx, "arke-staging", prefix+"_manifest.json", strings.NewReader(string(body)), int64(len(body)), "application/json"); err != nil {
			return fmt.Errorf("uploading the manifest of batch %d: %w", i, err)
		}
		var files []manifest.FileInfo
		for _, g := range m.Directories {
			files = append(files, g.Files...)
		}
		keys := make([]string, len(files))
		types := map[string]string{}
		for k, f := range files {
			keys[k], types[f.R2Key] = f.R2Key, f.ContentType
			sub.paths = append(sub.paths, f.LogicalPath)
		}
		if err := parallel(ctx, keys, func(key string) error {
			c := inputContent(key)
			if isTextDoc(key) {
				c = textContent(key)
			}
			return l.w.store.Put(ctx, "arke-staging", key, strings.NewReader(c), int64(len(c)), types[key])
		}); err != nil {
			return fmt.Errorf("uploading the files of batch %d: %w", i, err)
		}
		sub.files, sub.bytes = m.TotalFiles, m.TotalBytes
		l.ids = append(l.ids, id)
		l.batches[id] = sub
		l.res.files += int(m.TotalFiles)
		if sub.describe != "" {
			l.res.describeBatches++
		}
	}
	l.res.batches = len(l.ids)
	return nil
}

// submit posts every batch, alternating between the two orchestrators,
// -spread apart, so that faults meet batches in every phase.
func (l *loadRun) submit(ctx context.Context) error {
	now := time.Now().UTC()
	for i, id := range l.ids {
		if i > 0 {
			time.Sleep(l.w.opts.spread)
		}
		p := l.procs[i%2]
		api, err := client.New(client.Config{URL: p.url, IngestToken: ingestToken, ReadToken: readToken, AdminToken: adminToken})
		if err != nil {
			return err
		}
		prefix := "staging/" + id + "/"
		sub := l.batches[id]
		msg := manifest.QueueMessage{BatchID: id, ManifestR2Key: prefix + "_manifest.json", R2Prefix: prefix,
			Uploader: "chaos@arke.institute", RootPath: "/chaos", ParentPI: "00000000000000000000000000",
			TotalFiles: sub.files, TotalBytes: sub.bytes, UploadedAt: now, FinalizedAt: now, Metadata: map[string]any{"run": l.label}}
		// Ingest retries a submission through an outage or a partition.
		if err := retry(ctx, 5*time.Minute, func() error { _, err := api.Submit(ctx, msg); return err }); err != nil {
			return fmt.Errorf("submitting %s to %s: %w", id, p.name, err)
		}
	}
	return nil
}

// awaitEnded waits until every batch is DONE or ERROR.
func (l *loadRun) awaitEnded(ctx context.Context, start time.Time) error {
	pool, err := dbPool(ctx, l.dbURL)
	if err != nil {
		return err
	}
	defer pool.Close()
	deadline := start.Add(l.w.opts.timeout)
	lastLog := time.Now()
	for {
		var ended, done int
		err := pool.QueryRow(ctx, `SELECT count(*) FILTER (WHERE status IN ('DONE', 'ERROR')), count(*) FILTER (WHERE status = 'DONE')
			FROM batches WHERE id = ANY($1)`, l.ids).Scan(&ended, &done)
		if err == nil && ended == len(l.ids) {
			return nil
		}
		if err == nil && time.Since(lastLog) > 15*time.Second {
			l.w.logf("%s: %d/%d batches ended (%d DONE) after %s", l.label, ended, len(l.ids), done, time.Since(start).Round(time.Second))
			lastLog = time.Now()
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%d of %d batches had not ended after %s", len(l.ids)-ended, len(l.ids), l.w.opts.timeout)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(500 * time.Millisecond):
		}
	}
}

// inject injects the driver's faults until ctx ends: each kind once, in
// a random order (then it closes firstRound), then at random.
func (l *loadRun) inject(ctx context.Context, firstRound chan<- struct{}) {
	kinds := l.w.opts.kinds
	if len(kinds) == 0 {
		close(firstRound)
		return
	}
	var order []string
	for _, i := range l.rng.perm(len(kinds)) {
		order = append(order, kinds[i])
	}
	gap := l.w.opts.faultGap
	for n := 0; ; n++ {
		select {
		case <-ctx.Done():
			return
		case <-time.After(l.rng.duration(gap/2, gap*3/2)):
		}
		kind := kinds[l.rng.intN(len(kinds))]
		if n < len(order) {
			kind = order[n]
		}
		if err := l.fault(ctx, kind); err != nil {
			l.w.logf("%s: fault %s: %v", l.label, kind, err)
		} else {
			l.res.addFault(kind)
		}
		if n == len(order)-1 {
			close(firstRound)
		}
	}
}

// fault injects one fault; kills and Postgres outages are over when it
// returns.
func (l *loadRun) fault(ctx context.Context, kind string) error {
	secs := strconv.FormatFloat(l.w.opts.outage.Seconds(), 'f', -1, 64)
	switch kind {
	case faultKill:
		p := l.procs[l.rng.intN(2)]
		at := time.Now()
		l.note("kill -9 %s", p.name)
		p.kill()
		time.Sleep(l.rng.duration(time.Second, 3*time.Second))
		if err := p.start(); err != nil {
			return err
		}
		l.note("%s started again", p.name)
		go l.measureResume(context.WithoutCancel(ctx), at)
	case faultPostgres:
		down := l.rng.duration(l.w.opts.pgDownMin(), l.w.opts.pgDown)
		l.note("Postgres stopped (immediate) for %s", down.Round(100*time.Millisecond))
		stopped := time.Now()
		if err := l.w.cluster.StopServer(ctx, "immediate"); err != nil {
			return err
		}
		stop := l.res.addPostgresDown(stopped, stopped.Add(down))
		time.Sleep(down)
		// Started whatever ctx says: the run needs its database back.
		err := l.w.cluster.StartServer(context.WithoutCancel(ctx))
		l.res.endPostgresDown(stop, time.Now())
		l.note("Postgres started again")
		return err
	case faultPartition:
		d := l.w.opts.partition
		l.note("partition: the orchestrators are cut off Postgres (up) for %s", d)
		cut := time.Now()
		l.w.proxy.cut(d)
		// Nothing can be rescued without a database: counted as Postgres
		// down for the resume measure.
		stop := l.res.addPostgresDown(cut, cut.Add(d))
		time.Sleep(d)
		l.res.endPostgresDown(stop, time.Now())
		l.note("partition healed")
	case faultFly503:
		l.note("Machines API answers 503 for %ss", secs)
		return control(ctx, l.fly.Control, "/fail?status=503&seconds="+secs)
	case faultFlyCreate:
		l.note("Machines API creates machines, then answers 503, for %ss", secs)
		return control(ctx, l.fly.Control, "/create-then-fail?seconds="+secs)
	case faultS3503:
		l.note("S3 answers 503 for %ss", secs)
		return control(ctx, l.w.s3.Control, "/fail?status=503&seconds="+secs)
	case faultProvider:
		// From the providers' next request: the OCR and documents work
		// comes in bursts, at the end of a batch.
		l.note("the OCR and documents providers will answer 429, then 503, for %ss from their next request", secs)
		return control(ctx, l.provider.Control, "/fail?from=next&seconds="+secs)
	}
	return nil
}

// measureResume records how long the jobs a killed process was running
// (running since before the kill) took to run again: River rescues them.
func (l *loadRun) measureResume(ctx context.Context, killedAt time.Time) {
	pool, err := dbPool(ctx, l.dbURL)
	if err != nil {
		l.res.addResume(-1)
		return
	}
	defer pool.Close()
	limit := 2 * l.w.opts.resumeLimit
	counted := false
	// Nothing can be rescued while Postgres is down: a stop that overlaps
	// the wait is not counted against it.
	waited := func() time.Duration { return time.Since(killedAt) - l.res.postgresDownBetween(killedAt, time.Now()) }
	for waited() < limit {
		var stuck int
		err := pool.QueryRow(ctx, `SELECT count(*) FROM river_job WHERE state = 'running' AND attempted_at < $1`, killedAt).Scan(&stuck)
		if err == nil && !counted && time.Since(killedAt) > 5*time.Second {
			// The survivor's jobs take well under 5 s: those left were
			// the killed process's.
			l.res.addStranded(stuck)
			counted = true
		}
		if err == nil && stuck == 0 {
			l.res.addResume(waited())
			return
		}
		time.Sleep(time.Second)
	}
	l.res.addResume(limit)
}

// collect reads the outcome of the run and checks it.
func (l *loadRun) collect(ctx context.Context) error {
	// The deliveries of the last batches may still be on their way.
	_ = retry(ctx, 2*time.Minute, func() error {
		for _, id := range l.ids {
			if len(l.w.ingest.deliveries(id)) == 0 {
				return fmt.Errorf("batch %s not delivered yet", id)
			}
		}
		return nil
	})
	var report fakefly.Report
	if err := getJSON(ctx, l.fly.Control+"/report", &report); err != nil {
		return err
	}
	if err := getJSON(ctx, l.fly.Control+"/worker-faults", &l.res.workerFaults); err != nil {
		return err
	}
	if err := getJSON(ctx, l.fly.Control+"/faulted-tasks", &l.res.faultedLaunches); err != nil {
		return err
	}
	pool, err := dbPool(ctx, l.dbURL)
	if err != nil {
		return err
	}
	defer pool.Close()
	var snap dbSnapshot
	if err := retry(ctx, time.Minute, func() error { return snap.read(ctx, pool, l.ids) }); err != nil {
		return err
	}
	l.res.evaluate(snap, report, l.w.ingest, l.ids)
	if l.upgrade {
		l.res.evaluateProtocols(report, l.w.releaseProtocol)
	}
	describe := map[string]string{}
	for id, sub := range l.batches {
		describe[id] = sub.describe
	}
	l.res.evaluateDocuments(snap, l.w.ingest, l.ids, describe)
	if err := getJSON(ctx, l.provider.Control+"/report", &l.res.provider); err != nil {
		return err
	}
	if err := l.checkStorage(ctx, snap); err != nil {
		return err
	}
	if err := l.writeTimelines(ctx, pool, report); err != nil {
		l.w.logf("%s: writing the suspect tasks' timelines: %v", l.label, err)
	}
	// Leaks: once idle, connections and goroutines.
	time.Sleep(5 * time.Second)
	for _, p := range l.procs {
		n, err := p.goroutines()
		if err != nil {
			return err
		}
		l.res.goroutines += n
	}
	return pool.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND pid <> pg_backend_pid()`).Scan(&l.res.conns)
}

// parallel runs f on every item, 16 at a time, and returns the first error.
func parallel(ctx context.Context, items []string, f func(string) error) error {
	var (
		mu    sync.Mutex
		first error
		wg    sync.WaitGroup
		sem   = make(chan struct{}, 16)
	)
	for _, it := range items {
		if ctx.Err() != nil {
			break
		}
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer func() { <-sem; wg.Done() }()
			if err := f(it); err != nil {
				mu.Lock()
				if first == nil {
					first = err
				}
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	if first == nil {
		first = ctx.Err()
	}
	return first
}

// checkStorage checks what users care about, beyond statuses: every file
// of every DONE batch's final manifest (its last delivery) is in storage
// with the content its worker wrote, or the driver for an input; a ref is
// a JSON document whose variants are in the CDN bucket, and an OCR'd one
// carries the text the provider read; every submitted file is in it (the
// TIFFs are kept beside their JPEGs or refs); and every ref of an OCR-on
// directory is OCR'd.
func (l *loadRun) checkStorage(ctx context.Context, snap dbSnapshot) error {
	var (
		mu                        sync.Mutex
		missing, dropped, ocrLost []string
	)
	for _, id := range l.ids {
		ds := l.w.ingest.deliveries(id)
		if snap.batches[id] != "DONE" || len(ds) == 0 {
			continue
		}
		sub := l.batches[id]
		last := ds[len(ds)-1]
		pathOf := make(map[string]string, len(last.Keys))
		for i, k := range last.Keys {
			pathOf[k] = last.Paths[i]
		}
		err := parallel(ctx, last.Keys, func(key string) error {
			data, err := l.w.store.Get(ctx, "arke-staging", key)
			if err != nil && !errors.Is(err, blob.ErrNotFound) {
				return err
			}
			var problem string
			switch {
			case err != nil:
				problem = err.Error()
			case strings.HasSuffix(key, ".ref.json"):
				if problem, err = l.checkRef(ctx, key, data); err != nil {
					return err
				}
			case isTextDoc(key):
				if string(data) != textContent(key) {
					problem = fmt.Sprintf("holds %q", data)
				}
			case string(data) != inputContent(key) && string(data) != outputContent(key):
				problem = fmt.Sprintf("holds %q", data)
			}
			p := pathOf[key]
			ocrOn := sub.describe != "" && path.Dir(p) == sub.describe && strings.HasSuffix(p, ".ref.json")
			mu.Lock()
			defer mu.Unlock()
			if problem != "" {
				missing = append(missing, fmt.Sprintf("%s (%s)", key, problem))
			}
			if ocrOn {
				l.res.ocrRefs++
				if !strings.HasSuffix(key, ".ocr.ref.json") || problem != "" {
					ocrLost = append(ocrLost, fmt.Sprintf("%s %s: %s", id, p, cmp.Or(problem, "not OCR'd (its ref is "+key+")")))
				}
			}
			return nil
		})
		if err != nil {
			return fmt.Errorf("reading the files of batch %s: %w", id, err)
		}
		listed := map[string]bool{}
		for _, p := range last.Paths {
			listed[p] = true
		}
		for _, p := range sub.paths {
			if !listed[p] {
				dropped = append(dropped, id+" "+p)
			}
		}
	}
	sort.Strings(missing)
	sort.Strings(ocrLost)
	l.res.missingFiles, l.res.droppedFiles, l.res.ocrLost = len(missing), len(dropped), len(ocrLost)
	l.res.check("every file of the final manifests is in storage: missing = 0", len(missing) == 0, firstFew(missing))
	l.res.check("every submitted file reached ingest", len(dropped) == 0, firstFew(dropped))
	// A run whose OCR-on batches are DONE and have no ref at all checked
	// nothing.
	vacuous := l.res.ocrRefs == 0 && l.describeDone(snap)
	l.res.check("every OCR-on image's final ref has its OCR text: OCR lost = 0", len(ocrLost) == 0 && !vacuous,
		cmp.Or(firstFew(ocrLost), "no ref of an OCR-on directory in the final manifests"))
	return nil
}

// describeDone says whether a batch with OCR and description on is DONE.
func (l *loadRun) describeDone(snap dbSnapshot) bool {
	for id, sub := range l.batches {
		if sub.describe != "" && snap.batches[id] == "DONE" {
			return true
		}
	}
	return false
}

// ref is what the driver reads of a ref: the image worker's, and the OCR
// phase's text when it published one.
type ref struct {
	URL      string            `json:"url"`
	Variants map[string]string `json:"variants"`
	OCR      *struct {
		Text string `json:"text"`
	} `json:"ocr"`
}

// cdnPublicURL is the orchestrators' CDN_PUBLIC_URL.
const cdnPublicURL = "http://cdn.chaos.test"

// checkRef says what is wrong with the ref at key, "" if nothing: it is a
// ref whose variants are in the CDN bucket (promoted from the attempt that
// wrote them), and if it is an OCR'd ref (.ocr.ref.json) it carries the
// text the provider reads from its medium variant (fakeocr.TextFor). An
// error is a storage failure.
func (l *loadRun) checkRef(ctx context.Context, key string, data []byte) (string, error) {
	var r ref
	if err := json.Unmarshal(data, &r); err != nil {
		return fmt.Sprintf("not a ref: %q", data), nil
	}
	if r.URL == "" || len(r.Variants) == 0 {
		return fmt.Sprintf("a ref without url or variants: %s", data), nil
	}
	for _, name := range []string{"medium", "large"} {
		vk, ok := strings.CutPrefix(r.Variants[name], cdnPublicURL+"/")
		if !ok {
			return fmt.Sprintf("its %s variant %q is not under %s", name, r.Variants[name], cdnPublicURL), nil
		}
		found, err := l.w.store.Exists(ctx, "arke-cdn", vk)
		if err != nil {
			return "", err
		}
		if !found {
			return fmt.Sprintf("its %s variant %s is not in arke-cdn", name, vk), nil
		}
	}
	image, ocrd := strings.CutSuffix(key, ".ocr.ref.json")
	switch want := fakeocr.TextFor(ocrfixture.PageImage(image)); {
	case !ocrd && r.OCR != nil:
		return "a ref carrying OCR text under a key that is not an OCR'd ref's", nil
	case ocrd && (r.OCR == nil || r.OCR.Text == ""):
		return "an OCR'd ref without text", nil
	case ocrd && r.OCR.Text != want:
		return fmt.Sprintf("an OCR'd ref whose text is %q, not %q", r.OCR.Text, want), nil
	}
	return "", nil
}
