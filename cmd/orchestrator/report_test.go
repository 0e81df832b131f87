package main

import (
	"bytes"
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/arke-institute/orchestrator/internal/harness/dbtest"
)

// TestReportCommand runs `orchestrator report` on a database with two
// batches done yesterday (60 and 120 s) and checks each format; the reports'
// figures themselves are tested in package reports.
func TestReportCommand(t *testing.T) {
	t.Parallel()
	pool, dbURL := dbtest.NewWithURL(t)
	ctx := context.Background()
	now := time.Date(2026, 3, 3, 12, 0, 0, 0, time.UTC)
	for _, b := range []struct {
		id       string
		duration time.Duration
	}{{"B1", time.Minute}, {"B2", 2 * time.Minute}} {
		done := time.Date(2026, 3, 2, 10, 0, 0, 0, time.UTC)
		_, err := pool.Exec(ctx, `INSERT INTO batches (id, status, uploader, queue_message, started_at, completed_at)
			VALUES ($1, 'DONE', 'tester', '{}', $2, $3)`, b.id, done.Add(-b.duration), done)
		require.NoError(t, err)
	}

	cli := func(env map[string]string, args ...string) (string, error) {
		lookup := func(k string) (string, bool) { v, ok := env[k]; return v, ok }
		var out bytes.Buffer
		err := runReport(ctx, args, lookup, now, &out, &bytes.Buffer{})
		return out.String(), err
	}
	env := map[string]string{"DATABASE_URL": dbURL}

	t.Run("List", func(t *testing.T) {
		out, err := cli(nil)
		require.NoError(t, err)
		for _, name := range []string{"batch-durations", "document-slowest-steps", "documents-by-status", "failure-reasons", "machine-seconds", "slowest-tasks", "task-failures", "throughput"} {
			require.Regexp(t, `(?m)^  `+name+`\s+\S`, out)
		}
	})

	t.Run("Table", func(t *testing.T) {
		out, err := cli(env, "batch-durations")
		require.NoError(t, err)
		require.Equal(t, ""+
			"day         batches_done  batches_error  p50_seconds  p95_seconds  max_seconds\n"+
			"2026-03-02  2             0              90           117          120\n", out)
	})

	t.Run("CSV", func(t *testing.T) {
		out, err := cli(env, "batch-durations", "--since", "2026-03-01", "--format", "csv")
		require.NoError(t, err)
		require.Equal(t, "day,batches_done,batches_error,p50_seconds,p95_seconds,max_seconds\n2026-03-02,2,0,90,117,120\n", out)
	})

	t.Run("JSON", func(t *testing.T) {
		out, err := cli(env, "-format", "json", "machine-seconds", "-since", "48h")
		require.NoError(t, err)
		var rows []map[string]any
		require.NoError(t, json.Unmarshal([]byte(out), &rows))
		require.Equal(t, []map[string]any{
			{"batch_id": "B2", "status": "DONE", "uploader": "tester", "started_at": "2026-03-02T09:58:00Z", "phase": "",
				"attempts": 0.0, "machine_seconds": 0.0, "pool_idle_seconds": 0.0, "provider_requests": 0.0, "prompt_tokens": 0.0,
				"completion_tokens": 0.0, "estimated_usd": 0.0, "unpriced": "", "running": 0.0},
			{"batch_id": "B1", "status": "DONE", "uploader": "tester", "started_at": "2026-03-02T09:59:00Z", "phase": "",
				"attempts": 0.0, "machine_seconds": 0.0, "pool_idle_seconds": 0.0, "provider_requests": 0.0, "prompt_tokens": 0.0,
				"completion_tokens": 0.0, "estimated_usd": 0.0, "unpriced": "", "running": 0.0},
		}, rows)
	})

	t.Run("BadPrices", func(t *testing.T) {
		_, err := cli(map[string]string{"DATABASE_URL": dbURL, "PRICE_TOKENS_PER_1K": "nonsense"}, "machine-seconds")
		require.ErrorContains(t, err, "PRICE_TOKENS_PER_1K must be a list of model:price")
	})

	t.Run("SinceExcludes", func(t *testing.T) {
		out, err := cli(env, "batch-durations", "-since", "12h")
		require.NoError(t, err)
		require.Contains(t, out, "(no rows)")
	})

	t.Run("Mistakes", func(t *testing.T) {
		for _, args := range [][]string{
			{"nope"},
			{"throughput", "slowest-tasks"},
			{"throughput", "-format", "xml"},
			{"throughput", "-since", "yesterday"},
			{"throughput", "-limit", "0"},
		} {
			_, err := cli(env, args...)
			require.ErrorAs(t, err, new(usageError), "%v: exit status 2", args)
		}
		_, err := cli(nil, "throughput")
		require.ErrorContains(t, err, "DATABASE_URL is not set: point it at the orchestrator's database (a read-only role is enough; see sql/reporter_role.sql)")
	})
}
