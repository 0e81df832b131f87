package main

import (
	"bytes"
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/arke-institute/orchestrator/client"
	"github.com/arke-institute/orchestrator/internal/harness/testenv"
	"github.com/arke-institute/orchestrator/status"
)

// TestBatchCommands runs status, reset and retry against the real API on a
// real database: success, and each refusal with its message and exit
// status (1; 2 for a mistake on the command line).
func TestBatchCommands(t *testing.T) {
	t.Parallel()
	env := testenv.New(t, testenv.Options{NoWorkers: true, NoSweep: true})
	ctx := context.Background()

	// RUN has a failed and a completed task in TIFF_CONVERSION; STOP has
	// one processing; FIN is DONE.
	for _, b := range []struct{ id, status string }{{"RUN", "TIFF_CONVERSION"}, {"STOP", "TIFF_CONVERSION"}, {"FIN", "DONE"}} {
		_, err := env.Pool.Exec(ctx, `INSERT INTO batches (id, status, phase, uploader, queue_message, completed_at)
			VALUES ($1, $2, 'TIFF_CONVERSION', 'tester', '{}', CASE WHEN $2 = 'DONE' THEN now() END)`, b.id, b.status)
		require.NoError(t, err)
	}
	for i, tk := range []struct{ id, batch, status string }{
		{"t1", "RUN", "failed"}, {"t2", "RUN", "completed"}, {"t3", "STOP", "processing"},
	} {
		var fileID int64
		require.NoError(t, env.Pool.QueryRow(ctx, `INSERT INTO files (batch_id, generation, ordinal, directory_path, r2_key,
				logical_path, file_name, file_size, content_type, processing_config)
			VALUES ($1, 0, $2, '/', 'k', 'k', 'k.tiff', 1, 'image/tiff', '{}') RETURNING id`, tk.batch, i).Scan(&fileID))
		_, err := env.Pool.Exec(ctx, `INSERT INTO tasks (id, batch_id, phase, file_id, status) VALUES ($1, $2, 'TIFF_CONVERSION', $3, $4)`,
			tk.id, tk.batch, fileID, tk.status)
		require.NoError(t, err)
	}

	cli := func(token string, args ...string) (stdout, stderr string, err error) {
		// A setting these commands do not use is invalid: they still run.
		env := map[string]string{"ADMIN_TOKEN": token, "READ_TOKEN": testenv.ReadToken, "ORCHESTRATOR_URL": env.Server.URL, "LOG_LEVEL": "trace"}
		lookup := func(k string) (string, bool) { v, ok := env[k]; return v, ok }
		var out, errOut bytes.Buffer
		err = runBatchCommand(ctx, args[0], args[1:], lookup, &out, &errOut)
		return out.String(), errOut.String(), err
	}
	const token = testenv.AdminToken

	t.Run("Status", func(t *testing.T) {
		out, _, err := cli("", "status", "RUN")
		require.NoError(t, err)
		require.Contains(t, out, "batch      RUN\n")
		require.Contains(t, out, "status     TIFF_CONVERSION\n")
		require.Contains(t, out, "progress   1/2 tasks completed, 1 failed\n")
		require.Contains(t, out, "error      -\n")
		require.Regexp(t, `(?m)^TIFF_CONVERSION\s+tasks\s+2\s+0\s+0\s+1\s+1$`, out)
	})

	t.Run("StatusJSON", func(t *testing.T) {
		out, _, err := cli("", "status", "-json", "RUN")
		require.NoError(t, err)
		var st status.Status
		require.NoError(t, json.Unmarshal([]byte(out), &st))
		require.Equal(t, "RUN", st.BatchID)
		require.EqualValues(t, 2, st.Progress.TasksTotal)
	})

	t.Run("Retry", func(t *testing.T) {
		out, errOut, err := cli(token, "retry", "RUN", "-url", env.Server.URL)
		require.NoError(t, err)
		require.Equal(t, "batch RUN retried; it is now TIFF_CONVERSION\n", errOut)
		// t1 is pending again; t2 stays completed.
		require.Regexp(t, `(?m)^TIFF_CONVERSION\s+tasks\s+2\s+1\s+0\s+1\s+0$`, out)
	})

	t.Run("Reset", func(t *testing.T) {
		out, errOut, err := cli(token, "reset", "STOP")
		require.NoError(t, err)
		require.Equal(t, "batch STOP reset; it is now ERROR\n", errOut)
		require.Contains(t, out, "error      Manually reset by admin\n")
	})

	t.Run("Refusals", func(t *testing.T) {
		for _, c := range []struct {
			name, token string
			args        []string
			msg         string
		}{
			{"UnknownStatus", "", []string{"status", "NOPE"}, "batch NOPE not found at " + env.Server.URL + " (404): batch NOPE: not found"},
			{"UnknownReset", token, []string{"reset", "NOPE"}, "batch NOPE not found at " + env.Server.URL + " (404): batch NOPE: not found"},
			{"WrongToken", "wrong", []string{"retry", "RUN"}, "the orchestrator at " + env.Server.URL + " refused the admin token (401): ADMIN_TOKEN must be the server's ADMIN_TOKEN"},
			{"NoToken", "", []string{"reset", "RUN"}, "reset needs the admin token: set ADMIN_TOKEN to the orchestrator's ADMIN_TOKEN"},
			{"ReadTokenForAdmin", testenv.ReadToken, []string{"reset", "RUN"}, "the orchestrator at " + env.Server.URL + " refused the admin token"},
			{"ResetDone", token, []string{"reset", "FIN"}, "cannot reset batch FIN (409): conflict: batch FIN is DONE; there is nothing to reset"},
			{"RetryDone", token, []string{"retry", "FIN"}, "cannot retry batch FIN (409): conflict: batch FIN is DONE with nothing failed; there is nothing to retry"},
			{"RetryInfraDone", token, []string{"retry-infra", "FIN"}, "cannot retry-infra batch FIN (409): conflict: batch FIN is DONE with nothing failed for infrastructure reasons; there is nothing to retry"},
			{"Unreachable", "", []string{"status", "-url", "http://127.0.0.1:1", "RUN"}, "cannot reach the orchestrator at http://127.0.0.1:1"},
		} {
			t.Run(c.name, func(t *testing.T) {
				out, _, err := cli(c.token, c.args...)
				require.ErrorContains(t, err, c.msg)
				require.NotErrorAs(t, err, new(usageError), "exit status 1, not 2")
				require.Empty(t, out)
			})
		}
	})

	t.Run("CommandLine", func(t *testing.T) {
		for _, args := range [][]string{
			{"status"},
			{"status", "A", "B"},
			{"reset", "-url", "ftp://x", "A"},
			{"retry", "-bogus", "A"},
		} {
			_, _, err := cli(token, args...)
			require.ErrorAs(t, err, new(usageError), "%v: exit status 2", args)
		}
		_, errOut, err := cli(token, "retry", "-h")
		require.NoError(t, err)
		require.True(t, strings.HasPrefix(errOut, "Usage: orchestrator retry"), errOut)
	})
}

// TestPrintStatusOfPrunedBatch: `status` says when retention removed a
// batch's processing details, and still prints the counts it kept.
func TestPrintStatusOfPrunedBatch(t *testing.T) {
	t.Parallel()
	var raw client.Status
	require.NoError(t, json.Unmarshal([]byte(`{"batch_id": "OLD", "status": "DONE",
		"progress": {"tasks_total": 2, "tasks_completed": 2, "tasks_failed": 0},
		"phases": [{"phase": "TIFF_CONVERSION", "executor": "machine", "unit": "tasks", "tasks_total": 2, "tasks_completed": 2}],
		"ingest": {"status": "delivered", "attempts": 1},
		"pruned": {"at": "2026-11-20T10:00:00Z", "note": "processing details removed 7 days after the batch finished"}}`), &raw))
	var out bytes.Buffer
	require.NoError(t, printStatus(&out, raw))
	require.Contains(t, out.String(), "details    processing details removed 7 days after the batch finished\n")
	require.Regexp(t, `(?m)^TIFF_CONVERSION\s+tasks\s+2\s`, out.String())

	raw.Pruned = nil
	out.Reset()
	require.NoError(t, printStatus(&out, raw))
	require.NotContains(t, out.String(), "details")
}

// TestPages: the search command's PAGES column.
func TestPages(t *testing.T) {
	for _, tc := range []struct {
		first, last int32
		want        string
	}{{0, 0, "-"}, {3, 3, "3"}, {3, 4, "3-4"}, {5, 0, "5"}} {
		require.Equal(t, tc.want, pages(tc.first, tc.last), "%d-%d", tc.first, tc.last)
	}
}
