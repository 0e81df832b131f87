package main

import (
	"bufio"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/arke-institute/orchestrator/blob"
	"github.com/arke-institute/orchestrator/internal/fakes/fakefly"
	"github.com/arke-institute/orchestrator/internal/fakes/ocrfixture"
	"github.com/arke-institute/orchestrator/internal/harness/dbtest"
	"github.com/arke-institute/orchestrator/internal/harness/eventually"
	"github.com/arke-institute/orchestrator/internal/harness/pgcluster"
)

func TestParseOptions(t *testing.T) {
	o, err := parseOptions([]string{"-short", "-files", "7", "-seed", "3"})
	require.NoError(t, err)
	require.Equal(t, 4, o.batches, "-short sets the short form")
	require.Equal(t, 7, o.files, "a flag given explicitly wins over -short")
	require.Equal(t, uint64(3), o.seed)
	require.Equal(t, driverFaults, o.kinds)

	require.Equal(t, 5*time.Second, o.pgDownMin(), "5-10 s in the short form")
	o, err = parseOptions([]string{"-pg-down", "150s", "-pg-down-min", "150s"})
	require.NoError(t, err)
	require.Equal(t, 150*time.Second, o.pgDownMin())

	_, err = parseOptions([]string{"-faults", "kill,meteor"})
	require.ErrorContains(t, err, `no fault "meteor"`)
	_, err = parseOptions([]string{"-batches", "0"})
	require.Error(t, err)
}

// TestUpgradeOptions: -upgrade takes the release from UPGRADE_FROM, else
// scripts/upgrade-from (a commit), and sets the upgrade test's load: no
// faults, no fault-free run, pools; flags given win.
func TestUpgradeOptions(t *testing.T) {
	rev, err := readUpgradeFrom(filepath.Join("..", "..", upgradeFromFile))
	require.NoError(t, err)
	require.Regexp(t, `^[0-9a-f]{40}$`, rev, "the release's full commit hash")

	t.Setenv("UPGRADE_FROM", "v1.2.3")
	o, err := parseOptions([]string{"-upgrade", "-files", "9"})
	require.NoError(t, err)
	require.Equal(t, "v1.2.3", o.upgradeFrom)
	require.Equal(t, []any{6, 9, "pool", true, 0}, []any{o.batches, o.files, o.executor, o.skipBaseline, len(o.kinds)})
	o, err = parseOptions([]string{"-upgrade-from", "abc123", "-executor", "machine"})
	require.NoError(t, err)
	require.Equal(t, []any{"abc123", "machine"}, []any{o.upgradeFrom, o.executor})
	o, err = parseOptions(nil)
	require.NoError(t, err)
	require.Empty(t, o.upgradeFrom, "the chaos test")
}

// TestEvaluate: the checks see a lost success, an invented one and a
// duplicate, and pass a clean run.
func TestEvaluate(t *testing.T) {
	var okKey, errKey string
	for i := 0; okKey == "" || errKey == ""; i++ {
		k := fmt.Sprintf("staging/B/k%d.tif", i)
		if intendedSuccess(k) {
			okKey = k
		} else {
			errKey = k
		}
	}
	in := &ingest{calls: map[string][]delivery{"B": {{IdempotencyKey: "k1"}, {IdempotencyKey: "k1"}}}}
	clean := dbSnapshot{
		batches: map[string]string{"B": "DONE"},
		tasks: []taskRow{
			{id: "t1", batchID: "B", status: "completed", inputKey: okKey},
			{id: "t2", batchID: "B", status: "failed", err: "chaos: the input is corrupt", inputKey: errKey},
		},
		completedN: map[string]int{"t1": 1},
	}
	report := fakefly.Report{Callbacks: []fakefly.CallbackSummary{{TaskID: "t1", Outcome: "success", Status: 200}}}
	r := newRunResult("clean", options{resumeLimit: time.Minute})
	r.evaluate(clean, report, in, []string{"B"})
	require.Empty(t, r.failed())

	bad := clean
	bad.tasks = []taskRow{
		{id: "t1", batchID: "B", status: "failed", err: "Task timed out after 15.2s", inputKey: okKey},
		{id: "t2", batchID: "B", status: "completed", inputKey: errKey},
	}
	bad.completedN = map[string]int{"t2": 2}
	in.calls["B"] = append(in.calls["B"], delivery{IdempotencyKey: "k2"})
	r = newRunResult("bad", options{resumeLimit: time.Minute})
	r.evaluate(bad, report, in, []string{"B"})
	require.Equal(t, []string{
		"every task has its worker's outcome: lost = 0",
		"no outcome invented",
		"repeated deliveries carry one idempotency key",
		"duplicates = 0",
	}, r.failed())
	require.Equal(t, map[string]int{"Task timed out after Ns": 1}, r.lostReasons)

	// A task that timed out on every attempt is lost unless every one of
	// its machines was made faulty: then no worker gave it an outcome.
	timedOut := clean
	timedOut.tasks = []taskRow{{id: "t1", batchID: "B", status: "failed", err: "Task timed out after 15.2s", inputKey: okKey}}
	in.calls["B"] = in.calls["B"][:2]
	launches := fakefly.Report{Launches: map[string][]string{"t1": {"m1", "m2", "m3"}}}
	r = newRunResult("faulty", options{resumeLimit: time.Minute})
	r.faultedLaunches = map[string][]string{"t1": {"1:hang", "3:late"}}
	r.evaluate(timedOut, launches, in, []string{"B"})
	require.Equal(t, []any{1, 0}, []any{r.lost, r.allFaulty}, "one of its machines was sound")
	require.Equal(t, []string{"t1"}, []string{r.suspects[0].id})
	r = newRunResult("faulty", options{resumeLimit: time.Minute})
	r.faultedLaunches = map[string][]string{"t1": {"1:hang", "2:crash", "3:late"}}
	r.evaluate(timedOut, launches, in, []string{"B"})
	require.Equal(t, []any{0, 1}, []any{r.lost, r.allFaulty}, "every machine was faulty")
	require.Empty(t, r.failed())
	// Launches that made no machine are no attempts: a task that failed
	// with one machine, faulty, was not out of attempts.
	oneMachine := fakefly.Report{Launches: map[string][]string{"t1": {"m3"}}}
	r = newRunResult("faulty", options{resumeLimit: time.Minute})
	r.faultedLaunches = map[string][]string{"t1": {"3:hang"}}
	r.evaluate(timedOut, oneMachine, in, []string{"B"})
	require.Equal(t, []any{1, 0}, []any{r.lost, r.allFaulty}, "fewer machines than attempts")
}

// inProcess runs a child of the driver in this process until the test
// ends, and returns the context it runs in and what it said of itself.
func inProcess(t *testing.T, run func(ctx context.Context, w io.Writer) error) (context.Context, childInfo) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	pr, pw := io.Pipe()
	done := make(chan error, 1)
	go func() { done <- run(ctx, pw) }()
	t.Cleanup(func() {
		cancel()
		require.NoError(t, <-done)
	})
	line, err := bufio.NewReader(pr).ReadString('\n')
	require.NoError(t, err)
	var info childInfo
	require.NoError(t, json.Unmarshal([]byte(line), &info))
	return ctx, info
}

// TestS3ChildOutage runs `chaos s3` in process: signed requests go
// through its proxy, and an outage set on its control listener answers
// 503 until it ends.
func TestS3ChildOutage(t *testing.T) {
	dir := t.TempDir()
	ctx, info := inProcess(t, func(ctx context.Context, w io.Writer) error { return runS3(ctx, []string{"-dir", dir}, w) })
	store, err := blob.NewS3(blob.S3Config{Endpoint: info.Endpoint, AccessKeyID: "chaos", SecretAccessKey: "chaossecret", Region: blob.DefaultRegion})
	require.NoError(t, err)
	require.NoError(t, store.EnsureBucket(ctx, "chaos-bucket"))
	put := func() error { return store.Put(ctx, "chaos-bucket", "k", strings.NewReader("x"), 1, "text/plain") }
	require.NoError(t, put())

	require.NoError(t, control(ctx, info.Control, "/fail?status=503&seconds=3600"))
	err = put()
	require.Error(t, err)
	require.Contains(t, err.Error(), "503")
	// A new outage replaces the one under way: this one ends at once.
	require.NoError(t, control(ctx, info.Control, "/fail?status=503&seconds=0.001"))
	require.Eventually(t, func() bool { return put() == nil }, 30*time.Second, 50*time.Millisecond, "S3 answers again once the outage is over")
	require.Error(t, control(ctx, info.Control, "/fail?status=200&seconds=1"), "only error statuses are injected")
}

// TestPostgresDownBetween: a wait after a kill is not charged for the time
// Postgres was down within it.
func TestPostgresDownBetween(t *testing.T) {
	r := newRunResult("x", options{})
	t0 := time.Date(2026, 11, 24, 12, 0, 0, 0, time.UTC)
	at := func(s int) time.Time { return t0.Add(time.Duration(s) * time.Second) }
	r.addPostgresDown(at(10), at(30))
	i := r.addPostgresDown(at(50), at(55))
	r.endPostgresDown(i, at(60))
	require.Equal(t, 20*time.Second, r.postgresDownBetween(at(0), at(40)))
	require.Equal(t, 17*time.Second, r.postgresDownBetween(at(15), at(52)), "15 s of the first stop, 2 s of the second")
	require.Equal(t, 30*time.Second, r.postgresDownBetween(at(0), at(100)))
	require.Zero(t, r.postgresDownBetween(at(31), at(49)))
}

// TestTimelines: a suspect task's timeline interleaves the fake's
// launches and callbacks, the orchestrator's events and the driver's
// faults in time order, and says how the task ended.
func TestTimelines(t *testing.T) {
	pool := dbtest.New(t)
	ctx := context.Background()
	t0 := time.Date(2026, 11, 24, 12, 0, 0, 0, time.UTC)
	at := func(s float64) time.Time { return t0.Add(time.Duration(s * float64(time.Second))) }
	_, err := pool.Exec(ctx, `INSERT INTO batches (id, uploader, queue_message) VALUES ('B', 'u', '{}')`)
	require.NoError(t, err)
	_, err = pool.Exec(ctx, `INSERT INTO batch_events (batch_id, type, task_id, data, created_at) VALUES
		('B', 'task.launched', 't1', '{"machine_id": "m1"}', $1), ('B', 'task.timed_out', 't1', '{}', $2)`, at(1), at(20))
	require.NoError(t, err)
	l := &loadRun{label: "chaos", w: &world{tmp: t.TempDir(), logf: t.Logf}, res: newRunResult("chaos", options{})}
	l.res.faultLog = []timelineLine{{at: at(5), what: "driver: Postgres stopped (immediate) for 10s"}, {at: at(300), what: "driver: far away"}}
	l.res.suspects = []taskRow{{id: "t1", batchID: "B", phase: "TIFF_CONVERSION", status: "failed", err: "Task timed out after 19.0s", inputKey: "k"}}
	l.res.faultedLaunches = map[string][]string{"t1": {"1:hang"}}
	report := fakefly.Report{
		LaunchLog: map[string][]fakefly.LaunchSummary{"t1": {{At: at(0.5), Attempt: 1, Status: 200, MachineID: "m1"}}},
		Callbacks: []fakefly.CallbackSummary{{TaskID: "t1", MachineID: "m1", Outcome: "success", Status: 409, Attempts: 3,
			Launched: at(0.5), Queued: at(4), Posted: at(4), Answered: at(21)}},
	}
	require.NoError(t, l.writeTimelines(ctx, pool, report))
	body, err := os.ReadFile(filepath.Join(l.w.tmp, "chaos-suspects.txt"))
	require.NoError(t, err)
	require.Equal(t, `task t1 (batch B, TIFF_CONVERSION, input k): failed "Task timed out after 19.0s"; faulty launches 1:hang
  12:00:00.500 fake: launch #1 answered 200 machine m1
  12:00:01.000 event task.launched {"machine_id": "m1"}
  12:00:04.000 fake: m1 ready to call back (3.5s after launch)
  12:00:05.000 driver: Postgres stopped (immediate) for 10s
  12:00:20.000 event task.timed_out {}
  12:00:21.000 fake: m1 callback (success) answered 409 after 3 posts, posting began 0s after ready 

`, string(body))
}

// TestPartitionProxy: the proxy carries connections to Postgres, and a
// cut drops them and refuses new ones, Postgres staying up, until it heals.
func TestPartitionProxy(t *testing.T) {
	t.Parallel()
	cluster, err := pgcluster.Start(t.Context(), pgcluster.Options{})
	require.NoError(t, err)
	t.Cleanup(func() { _ = cluster.Close() })
	p, err := startProxy(cluster.Socket())
	require.NoError(t, err)
	t.Cleanup(p.close)
	url := "postgres://postgres@" + p.Addr() + "/postgres?sslmode=disable&connect_timeout=2"
	conn, err := pgx.Connect(t.Context(), url)
	require.NoError(t, err)
	var one int
	require.NoError(t, conn.QueryRow(t.Context(), "SELECT 1").Scan(&one))

	p.cut(time.Second)
	require.Error(t, conn.QueryRow(t.Context(), "SELECT 1").Scan(&one), "the carried connection is dropped")
	_, err = pgx.Connect(t.Context(), url)
	require.Error(t, err, "new connections are refused")
	direct, err := pgx.Connect(t.Context(), cluster.URL)
	require.NoError(t, err, "Postgres itself is up")
	require.NoError(t, direct.Close(t.Context()))

	eventually.True(t, 10*time.Second, "the partition heals", func() bool {
		c, err := pgx.Connect(t.Context(), url)
		if err != nil {
			return false
		}
		defer c.Close(t.Context())
		return c.QueryRow(t.Context(), "SELECT 1").Scan(&one) == nil
	})
}

// TestProviderChildOutage runs `chaos provider` in process: both fakes
// answer, and an outage set on its control listener answers 429 with
// Retry-After for its first half, 503 for its second, then success again.
func TestProviderChildOutage(t *testing.T) {
	ctx, info := inProcess(t, func(ctx context.Context, w io.Writer) error { return runProvider(ctx, nil, w) })
	png := base64.StdEncoding.EncodeToString(ocrfixture.PageImage("k"))
	calls := map[string][2]string{
		"ocr": {info.URL + "/chat/completions", `{"model": "m", "messages": [{"role": "user", "content": [{"type": "text", "text": "read"},
			{"type": "image_url", "image_url": {"url": "data:image/png;base64,` + png + `"}}]}]}`},
		"embeddings": {info.AI + "/embeddings", `{"model": "m", "input": "the harbour ledger"}`},
		"tags":       {info.AI + "/chat/completions", `{"model": "m", "messages": [{"role": "user", "content": "{\"texts\": [\"the harbour ledger\"]}"}]}`},
	}
	post := func(name string) (int, string) {
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, calls[name][0], strings.NewReader(calls[name][1]))
		require.NoError(t, err)
		req.Header.Set("Authorization", "Bearer "+providerKey)
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return resp.StatusCode, resp.Header.Get("Retry-After")
	}
	for name := range calls {
		status, _ := post(name)
		require.Equal(t, http.StatusOK, status, name)
	}

	require.NoError(t, control(ctx, info.Control, "/fail?seconds=4"))
	for name := range calls {
		status, retryAfter := post(name)
		require.Equal(t, []any{http.StatusTooManyRequests, providerRetryAfter}, []any{status, retryAfter}, name)
	}
	time.Sleep(2100 * time.Millisecond)
	for name := range calls {
		status, _ := post(name)
		require.Equal(t, http.StatusServiceUnavailable, status, name)
	}
	require.Eventually(t, func() bool { s, _ := post("ocr"); return s == http.StatusOK }, 10*time.Second, 100*time.Millisecond)
	var report providerReport
	require.NoError(t, getJSON(ctx, info.Control+"/report", &report))
	require.Equal(t, 1, report.OCR.ByStatus[http.StatusTooManyRequests])
	require.Equal(t, 2, report.AI.ByStatus[http.StatusServiceUnavailable])
	require.Error(t, control(ctx, info.Control, "/fail?seconds=0"), "an outage lasts a while")
}

// TestEvaluateDocuments: each text document and ref of a batch's
// directory with description on must name a completed document in its
// final manifest; other directories and batches need none.
func TestEvaluateDocuments(t *testing.T) {
	snap := dbSnapshot{
		batches:   map[string]string{"A": "DONE", "B": "DONE"},
		documents: map[int64]docRow{1: {status: "completed"}, 2: {status: "completed"}, 3: {status: "failed", errors: `[{"error": "quota"}]`}},
	}
	in := &ingest{calls: map[string][]delivery{
		"A": {{Paths: []string{"/box00/scan0000.tif", "/box01/scan0025.jpg.ref.json", "/box01/notes.md", "/box01/scan0025.tif"},
			DocIDs: []int64{0, 1, 2, 0}}},
		"B": {{Paths: []string{"/box00/scan0000.tif", "/box00/scan0000.jpg.ref.json"}}},
	}}
	describe := map[string]string{"A": "/box01"}
	r := newRunResult("clean", options{})
	r.evaluateDocuments(snap, in, []string{"A", "B"}, describe)
	require.Empty(t, r.failed())
	require.Equal(t, []int{2, 2, 1}, []int{r.documents, r.docsCompleted, r.docsOther})

	in.calls["A"] = append(in.calls["A"], delivery{Paths: []string{"/box01/scan0025.jpg.ref.json", "/box01/notes.md", "/box01/minutes.txt"},
		DocIDs: []int64{3, 2, 0}})
	r = newRunResult("lost", options{})
	r.evaluateDocuments(snap, in, []string{"A", "B"}, describe)
	require.Equal(t, []string{"every document of a describe-on file completed: documents lost = 0"}, r.failed())
	require.Equal(t, []int{3, 1}, []int{r.documents, r.docsCompleted})
	require.Contains(t, r.checks[0].detail, "A /box01/minutes.txt: no document_id")
	require.Contains(t, r.checks[0].detail, "A /box01/scan0025.jpg.ref.json: document 3 failed")

	// A DONE batch with description on whose final manifest names no
	// document checked nothing.
	in.calls["A"] = []delivery{{Paths: []string{"/box00/scan0000.tif"}}}
	r = newRunResult("vacuous", options{})
	r.evaluateDocuments(snap, in, []string{"A"}, describe)
	require.Len(t, r.failed(), 1)
}

// TestProviderOutageFromNext: an outage set to begin with the next
// request waits for it, then lasts its time.
func TestProviderOutageFromNext(t *testing.T) {
	var o providerOutage
	o.set(400*time.Millisecond, true)
	time.Sleep(500 * time.Millisecond)
	require.Equal(t, http.StatusTooManyRequests, o.status(), "it began with this request")
	time.Sleep(250 * time.Millisecond)
	require.Equal(t, http.StatusServiceUnavailable, o.status())
	time.Sleep(250 * time.Millisecond)
	require.Zero(t, o.status())
	o.set(time.Hour, false)
	require.Equal(t, http.StatusTooManyRequests, o.status())
	o.set(time.Hour, true)
	require.Equal(t, http.StatusTooManyRequests, o.status(), "a pending outage replaces the one under way, and begins with this request")
}
