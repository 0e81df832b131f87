package testenv

import (
	"bufio"
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/arke-institute/orchestrator/blob"
	"github.com/arke-institute/orchestrator/compute/flycompute"
	"github.com/arke-institute/orchestrator/config"
	"github.com/arke-institute/orchestrator/executor"
	"github.com/arke-institute/orchestrator/jobs"
	"github.com/arke-institute/orchestrator/pause"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"
)

// childSettingsEnv carries a child orchestrator's settings (JSON) from a
// test to the test binary it starts again as that child; childQueuesEnv
// the queues it works, comma-separated ("ocr" if unset).
const (
	childSettingsEnv = "JOBS_TEST_CHILD_SETTINGS"
	childQueuesEnv   = "JOBS_TEST_CHILD_QUEUES"
)

// Main is the TestMain of a package whose tests start child orchestrators
// (StartChild): it runs the test binary as that child when a test starts it
// so (runChild), and as the tests otherwise.
func Main(m *testing.M) {
	if s := os.Getenv(childSettingsEnv); s != "" {
		fmt.Fprintln(os.Stderr, "child:", runChild(s)) // it runs until it is killed
		os.Exit(1)
	}
	os.Exit(m.Run())
}

// runChild, which returns only on an error, is a second orchestrator
// process working only the "ocr" queue
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
	deps, err := executor.Register(jobs.Deps{Pool: pool, Store: store, Compute: backend, Settings: cfg.Jobs(), Logger: logger, Pauses: pause.NewGate(pool)},
		cfg.Executors, executor.Options{})
	if err != nil {
		return err
	}
	client, err := jobs.NewClient(deps, jobs.ClientConfig{Queues: strings.Split(cmp.Or(os.Getenv(childQueuesEnv), "ocr"), ","), FetchPollInterval: 100 * time.Millisecond})
	if err != nil {
		return err
	}
	if err := client.Start(ctx); err != nil {
		return err
	}
	fmt.Println("ready")
	select {}
}

// StartChild starts the test binary as a child orchestrator (runChild) on
// the Env's database, store and settings, working queues, and returns once
// its River client has started. It is killed when the test ends. The
// test's package must run Main as its TestMain.
func (e *Env) StartChild(t *testing.T, queues string) *exec.Cmd {
	t.Helper()
	settings, err := json.Marshal(e.Settings())
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
