package jobs_test

import (
	"bufio"
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/arke-institute/orchestrator/blob"
	"github.com/arke-institute/orchestrator/compute/flycompute"
	"github.com/arke-institute/orchestrator/config"
	"github.com/arke-institute/orchestrator/internal/fakeocr"
	"github.com/arke-institute/orchestrator/internal/testenv"
	"github.com/arke-institute/orchestrator/jobs"
	"github.com/arke-institute/orchestrator/service"
)

// childSettingsEnv carries a child orchestrator's settings (JSON) from a
// test to the test binary it starts again as that child; childQueuesEnv
// the queues it works, comma-separated ("ocr" if unset).
const (
	childSettingsEnv = "JOBS_TEST_CHILD_SETTINGS"
	childQueuesEnv   = "JOBS_TEST_CHILD_QUEUES"
)

// TestMain runs the test binary as a child orchestrator process when a
// test starts it so (runChild), and as the tests otherwise.
func TestMain(m *testing.M) {
	if s := os.Getenv(childSettingsEnv); s != "" {
		if err := runChild(s); err != nil {
			fmt.Fprintln(os.Stderr, "child:", err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// runChild is a second orchestrator process working only the "ocr" queue
// (or those of childQueuesEnv), configured as the parent test's: it prints
// "ready" once its River client has started and runs until it is killed.
func runChild(settingsJSON string) error {
	var settings map[string]string
	if err := json.Unmarshal([]byte(settingsJSON), &settings); err != nil {
		return err
	}
	cfg, err := config.Load(func(k string) (string, bool) { v, ok := settings[k]; return v, ok })
	if err != nil {
		return err
	}
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, cfg.DatabaseURL)
	if err != nil {
		return err
	}
	store, err := blob.NewS3(blob.S3Config{Endpoint: cfg.R2Endpoint, AccessKeyID: cfg.R2AccessKeyID, SecretAccessKey: cfg.R2SecretAccessKey})
	if err != nil {
		return err
	}
	logger := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	backend, err := flycompute.New(ctx, flycompute.Config{APIToken: cfg.FlyAPIToken, BaseURL: cfg.FlyFlapsBaseURL, Logger: logger})
	if err != nil {
		return err
	}
	client, err := jobs.NewClient(jobs.Deps{Pool: pool, Store: store, Compute: backend, Config: cfg, Logger: logger},
		jobs.ClientConfig{Queues: strings.Split(cmp.Or(os.Getenv(childQueuesEnv), "ocr"), ","), FetchPollInterval: 100 * time.Millisecond})
	if err != nil {
		return err
	}
	if err := client.Start(ctx); err != nil {
		return err
	}
	fmt.Println("ready")
	select {}
}

// startChild starts the test binary as a child orchestrator (runChild)
// on env's database, store and settings, working queues, and returns once
// its River client has started. It is killed when the test ends.
func startChild(t *testing.T, env *testenv.Env, queues string) *exec.Cmd {
	t.Helper()
	settings, err := json.Marshal(env.Settings())
	require.NoError(t, err)
	child := exec.Command(os.Args[0], "-test.run=^$")
	child.Env = append(os.Environ(), childSettingsEnv+"="+string(settings), childQueuesEnv+"="+queues)
	child.Stderr = testWriter{t}
	stdout, err := child.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, child.Start())
	t.Cleanup(func() { _ = child.Process.Kill(); _ = child.Wait() })
	line, err := bufio.NewReader(stdout).ReadString('\n')
	require.NoError(t, err)
	require.Equal(t, "ready", strings.TrimSpace(line))
	return child
}

// TestOCRKill9MidChunk kills (SIGKILL) the only process working a chunk
// while two of its items are at the provider. Another process picks the
// chunk up once River rescues its job: the items whose outcome was
// committed before the kill are never sent again, the two in flight are,
// and the batch finishes with every ref transcribed.
func TestOCRKill9MidChunk(t *testing.T) {
	if testing.Short() {
		t.Skip("waits for River to rescue a dead process's job: skipped by -short")
	}
	t.Parallel()
	const id = "OCR-KILL9"
	var (
		mu       sync.Mutex
		requests []string // texts, in order of arrival
		inFlight = make(chan struct{}, 2)
		killed   = make(chan struct{})
	)
	fake := fakeocr.New(t, fakeocr.Options{Behave: func(r fakeocr.Request) fakeocr.Behavior {
		mu.Lock()
		requests = append(requests, r.Text)
		n := len(requests)
		mu.Unlock()
		if n == 3 || n == 4 { // the second run's items: hold them until the child is dead
			inFlight <- struct{}{}
			<-killed
			return fakeocr.Behavior{Hangup: true}
		}
		return fakeocr.Behavior{}
	}})
	settings := ocrSettings(fake, map[string]string{"MAX_CONCURRENT_PER_ALARM": "2", "OCR_TIMEOUT_MS": "1000", "ALARM_INTERVAL_MS": "50"})
	// The test's own process works every queue but "ocr" until the kill.
	env := testenv.New(t, testenv.Options{ImageRefs: true, Settings: settings, Queues: []string{"default", jobs.BuildQueue}})

	child := startChild(t, env, "ocr")

	env.Submit(t, id, images("/a", 6, ocrOn))
	for range 2 {
		select {
		case <-inFlight:
		case <-time.After(60 * time.Second):
			t.Fatal("the child never sent its second run's items")
		}
	}
	require.NoError(t, child.Process.Signal(syscall.SIGKILL))
	_ = child.Wait()
	close(killed)
	mu.Lock()
	committed := append([]string(nil), requests[:2]...) // the first run's items, settled before the second run began
	inFlightTexts := append([]string(nil), requests[2:4]...)
	mu.Unlock()

	// Another process takes the "ocr" queue over.
	env.StartClient(t, jobs.ClientConfig{Queues: []string{"ocr"}})
	st := env.AwaitStatusWithin(t, id, 3*time.Minute, isDone)
	require.Equal(t, "DONE", st.Status, "error: %v", st.Error)
	require.Equal(t, &service.OCRProgress{ChunksTotal: 1, ChunksDone: 1, RefsTotal: 6, RefsDone: 6}, st.OCR)

	mu.Lock()
	defer mu.Unlock()
	count := map[string]int{}
	for _, text := range requests {
		count[text]++
	}
	for _, text := range committed {
		require.Equal(t, 1, count[text], "an item committed before the kill was sent again")
	}
	for _, text := range inFlightTexts {
		require.Equal(t, 2, count[text], "an item in flight at the kill is sent again, once")
	}
	require.Len(t, count, 6)
	ok := 0
	for _, r := range fake.Requests() {
		if r.Status == http.StatusOK {
			ok++
		}
	}
	require.Equal(t, 6, ok)
}

// testWriter sends a child's output to the test log.
type testWriter struct{ t *testing.T }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Logf("%s", strings.TrimRight(string(p), "\n"))
	return len(p), nil
}
