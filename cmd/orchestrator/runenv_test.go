package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/arke-institute/orchestrator/config"
	"github.com/arke-institute/orchestrator/internal/harness/dbtest"
	"github.com/arke-institute/orchestrator/internal/harness/testenv"
	"github.com/arke-institute/orchestrator/webhook"
)

// TestLocalToken: the first call generates a token into a file only its
// owner reads; later calls return the same token.
func TestLocalToken(t *testing.T) {
	t.Parallel()
	dir := filepath.Join(t.TempDir(), ".data")
	token, path, err := localToken(dir, "admin-token")
	require.NoError(t, err)
	require.Regexp(t, `^[0-9a-f]{48}$`, token)
	require.Equal(t, filepath.Join(dir, "admin-token"), path)
	fi, err := os.Stat(path)
	require.NoError(t, err)
	require.Equal(t, os.FileMode(0o600), fi.Mode().Perm())

	again, _, err := localToken(dir, "admin-token")
	require.NoError(t, err)
	require.Equal(t, token, again, "the token is reused")

	other, _, err := localToken(t.TempDir(), "admin-token")
	require.NoError(t, err)
	require.NotEqual(t, token, other, "each clone gets its own token")

	require.NoError(t, os.WriteFile(path, []byte("\n"), 0o600))
	_, _, err = localToken(dir, "admin-token")
	require.ErrorContains(t, err, "is empty")
}

// TestLocalWebhooks: the embedded default gets a WEBHOOK_SECRET_KEY kept
// in its data folder (the same on the next start, so the sealed secrets
// still open) and loopback allowed; what the environment sets is kept.
func TestLocalWebhooks(t *testing.T) {
	t.Parallel()
	dir := filepath.Join(t.TempDir(), ".data")
	cfg := &config.Config{}
	require.NoError(t, localWebhooks(cfg, dir))
	key, err := webhook.ParseKey(cfg.Webhooks.SecretKey)
	require.NoError(t, err)
	require.Len(t, key, webhook.KeyBytes)
	require.Equal(t, localWebhookNetworks, cfg.Webhooks.AllowNetworks)
	fi, err := os.Stat(filepath.Join(dir, webhookKeyFile))
	require.NoError(t, err)
	require.Equal(t, os.FileMode(0o600), fi.Mode().Perm())

	again := &config.Config{}
	require.NoError(t, localWebhooks(again, dir))
	require.Equal(t, cfg.Webhooks.SecretKey, again.Webhooks.SecretKey, "the key is reused")

	set := &config.Config{Webhooks: config.WebhookSettings{SecretKey: "from-the-environment", AllowNetworks: "10.0.0.0/8"}}
	require.NoError(t, localWebhooks(set, dir))
	require.Equal(t, "from-the-environment", set.Webhooks.SecretKey)
	require.Equal(t, "10.0.0.0/8", set.Webhooks.AllowNetworks)
}

// TestWithRunEnv: the environment wins; what it leaves unset or empty comes
// from run.env, the admin token from the file run.env names.
func TestWithRunEnv(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	token, tokenFile, err := localToken(dir, "admin-token")
	require.NoError(t, err)
	readToken, readFile, err := localToken(dir, "read-token")
	require.NoError(t, err)
	require.NotEqual(t, token, readToken)
	runEnv, err := writeRunEnv(dir, runInstance{
		DatabaseURL:     "postgres://postgres@127.0.0.1:54320/postgres?sslmode=disable",
		OrchestratorURL: "http://127.0.0.1:8080", TokenFiles: map[string]string{"ADMIN_TOKEN": tokenFile, "READ_TOKEN": readFile},
		S3Addr: "127.0.0.1:7071", S3AccessKey: "local", S3SecretKey: "localsecret",
	})
	require.NoError(t, err)
	fi, err := os.Stat(runEnv)
	require.NoError(t, err)
	require.Equal(t, os.FileMode(0o600), fi.Mode().Perm())

	env := map[string]string{"ORCHESTRATOR_URL": "http://elsewhere:1", "DATABASE_URL": " "}
	lookup := withRunEnv(func(k string) (string, bool) { v, ok := env[k]; return v, ok },
		filepath.Join(dir, "missing.env"), runEnv)
	get := func(k string) string { v, _ := lookup(k); return v }
	require.Equal(t, "http://elsewhere:1", get("ORCHESTRATOR_URL"))
	require.Equal(t, "postgres://postgres@127.0.0.1:54320/postgres?sslmode=disable", get("DATABASE_URL"))
	require.Equal(t, token, get("ADMIN_TOKEN"))
	require.Equal(t, readToken, get("READ_TOKEN"))
	_, ok := lookup("INGEST_TOKEN")
	require.False(t, ok, "a token from the environment has no file")
	require.Equal(t, "127.0.0.1:7071", get("LOCAL_S3_ADDR"))
	_, ok = lookup("R2_BUCKET")
	require.False(t, ok)

	env["ADMIN_TOKEN"] = "mine"
	require.Equal(t, "mine", get("ADMIN_TOKEN"))

	t.Run("NoFile", func(t *testing.T) {
		lookup := withRunEnv(func(string) (string, bool) { return "", false }, filepath.Join(dir, "missing.env"))
		_, ok := lookup("DATABASE_URL")
		require.False(t, ok)
	})

	t.Run("PasswordStaysOut", func(t *testing.T) {
		dir := t.TempDir()
		runEnv, err := writeRunEnv(dir, runInstance{DatabaseURL: "postgres://app:s3cret@db:5432/x", OrchestratorURL: "http://127.0.0.1:8080"})
		require.NoError(t, err)
		b, err := os.ReadFile(runEnv)
		require.NoError(t, err)
		require.NotContains(t, string(b), "s3cret")
		require.NotContains(t, string(b), "DATABASE_URL=")
		require.NotContains(t, string(b), "ADMIN_TOKEN_FILE=")
	})
}

// TestOperatorCommandsFindMakeRun runs report and reset with nothing in the
// environment but the run.env a `make run` leaves: they find its database,
// its API and its generated token.
func TestOperatorCommandsFindMakeRun(t *testing.T) {
	t.Parallel()
	env := testenv.New(t, testenv.Options{NoWorkers: true, NoSweep: true})
	_, dbURL := dbtest.NewWithURL(t)
	ctx := context.Background()

	dir := t.TempDir()
	files := map[string]string{}
	for setting, token := range map[string]string{"ADMIN_TOKEN": testenv.AdminToken, "READ_TOKEN": testenv.ReadToken} {
		files[setting] = filepath.Join(dir, strings.ToLower(setting))
		require.NoError(t, os.WriteFile(files[setting], []byte(token+"\n"), 0o600))
	}
	runEnv, err := writeRunEnv(dir, runInstance{DatabaseURL: dbURL, OrchestratorURL: env.Server.URL, TokenFiles: files})
	require.NoError(t, err)
	empty := func(string) (string, bool) { return "", false }

	t.Run("Report", func(t *testing.T) {
		var out bytes.Buffer
		err := runReport(ctx, []string{"batch-durations"}, withRunEnv(empty, runEnv), time.Now(), &out, &bytes.Buffer{})
		require.NoError(t, err)
		require.Contains(t, out.String(), "day")

		err = runReport(ctx, []string{"batch-durations"}, empty, time.Now(), &out, &bytes.Buffer{})
		require.ErrorContains(t, err, "DATABASE_URL is not set")
		require.ErrorContains(t, err, ".data/run.env")
	})

	t.Run("Reset", func(t *testing.T) {
		// The token is accepted (not 401): the unknown batch is what fails.
		err := runBatchCommand(ctx, "reset", []string{"NOPE"}, withRunEnv(empty, runEnv), &bytes.Buffer{}, &bytes.Buffer{})
		require.ErrorContains(t, err, "batch NOPE not found at "+env.Server.URL+" (404)")

		err = runBatchCommand(ctx, "reset", []string{"NOPE"}, empty, &bytes.Buffer{}, &bytes.Buffer{})
		require.ErrorContains(t, err, "reset needs the admin token")
	})

	t.Run("Status", func(t *testing.T) {
		// The read token is accepted (not 401).
		err := runBatchCommand(ctx, "status", []string{"NOPE"}, withRunEnv(empty, runEnv), &bytes.Buffer{}, &bytes.Buffer{})
		require.ErrorContains(t, err, "batch NOPE not found at "+env.Server.URL+" (404)")
		err = runBatchCommand(ctx, "status", []string{"NOPE"}, empty, &bytes.Buffer{}, &bytes.Buffer{})
		require.ErrorContains(t, err, "status needs the read token")
	})
}

// TestNewcomerBanner: the banner names every address, each token with what
// it opens and where it is kept; the secrets only on a terminal; a token
// from the environment is not repeated.
func TestNewcomerBanner(t *testing.T) {
	t.Parallel()
	nb := newcomerBanner{
		URL: "http://127.0.0.1:8080",
		Tokens: []bannerToken{
			{Setting: "ADMIN_TOKEN", Value: "tok123", File: "/r/.data/admin-token"},
			{Setting: "READ_TOKEN", Value: "read456", File: "/r/.data/read-token"},
			{Setting: "INGEST_TOKEN", Value: "ingest789"},
		},
		S3Endpoint: "http://127.0.0.1:7070", S3Access: "local", S3Secret: "localsecret",
		Buckets:     []string{"arke-staging", "arke-archive", "arke-cdn"},
		DatabaseURL: "postgres://postgres:pw@127.0.0.1:54320/postgres", RunEnv: "/r/.data/run.env",
		ShowSecrets: true,
	}
	var b strings.Builder
	nb.write(&b)
	for _, want := range []string{
		"http://127.0.0.1:8080/ui", "http://127.0.0.1:8080/riverui", "http://127.0.0.1:8080/openapi.yaml",
		"tok123", "/r/.data/admin-token", `user "admin"`, "read456", "/r/.data/read-token", `user "reader"`,
		"access key local, secret key localsecret",
		"arke-staging, arke-archive, arke-cdn", "go run ./cmd/orchestrator submit examples/sample-batch", "/r/.data/run.env",
	} {
		require.Contains(t, b.String(), want)
	}
	require.NotContains(t, b.String(), ":pw@", "the database password is masked")
	require.NotContains(t, b.String(), "ingest789", "a token from the environment is not repeated")
	require.Contains(t, b.String(), "the value of INGEST_TOKEN")

	nb.ShowSecrets = false
	b.Reset()
	nb.write(&b)
	for _, secret := range []string{"tok123", "read456", "ingest789", "localsecret"} {
		require.NotContains(t, b.String(), secret)
	}
	require.Contains(t, b.String(), "in /r/.data/admin-token (shown here on a terminal only)")
	require.Contains(t, b.String(), "in /r/.data/read-token (shown here on a terminal only)")
	require.Contains(t, b.String(), "secret key in /r/.data/run.env (LOCAL_S3_SECRET_KEY)")
}
