package reports_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/arke-institute/orchestrator/cost"
	"github.com/arke-institute/orchestrator/internal/harness/dbtest"
	"github.com/arke-institute/orchestrator/reports"
)

const (
	tiff  = "TIFF_CONVERSION"
	image = "IMAGE_PROCESSING"
)

// since is the start of the period every test report covers; the seed has
// one batch, one task and events before it, which no report may count.
var since = at("2026-03-01 00:00:00")

// at parses a UTC time written "2006-01-02 15:04:05.999".
func at(s string) time.Time {
	t, err := time.Parse("2006-01-02 15:04:05.999", s)
	if err != nil {
		panic(err)
	}
	return t
}

// seeded is a database holding the seed below, and its URL.
type seeded struct {
	pool *pgxpool.Pool
	url  string
}

type seedBatch struct {
	id, status         string
	started, completed string // "" for a running batch
}

type seedTask struct {
	id, batch, phase, status string
	endedBy, machine, err    string // "" for NULL
	launched, finished       string // "" for NULL
}

type seedEvent struct {
	batch, typ, phase, task, err, created string
}

// seed writes batches, tasks and events whose figures the tests work out by
// hand. Durations are chosen to be exact in binary floating point.
//
// Batches (accepted -> ended):
//
//	B0 DONE  02-20 00:00 -> 00:10      before since
//	B1 DONE  03-02 10:00 -> 10:01:40   100 s
//	B2 DONE  03-02 12:00 -> 12:05      300 s
//	B4 ERROR 03-02 13:00 -> 13:00:30   (an error: no duration counted)
//	B3 DONE  03-02 20:00 -> 20:10      600 s
//	B5 DONE  03-03 08:00 -> 08:00:50    50 s
//	B6 TIFF  03-03 09:00 -> running
func seed(t *testing.T) seeded {
	t.Helper()
	pool, url := dbtest.NewWithURL(t)
	ctx := context.Background()

	batches := []seedBatch{
		{"B0", "DONE", "2026-02-20 00:00:00", "2026-02-20 00:10:00"},
		{"B1", "DONE", "2026-03-02 10:00:00", "2026-03-02 10:01:40"},
		{"B2", "DONE", "2026-03-02 12:00:00", "2026-03-02 12:05:00"},
		{"B4", "ERROR", "2026-03-02 13:00:00", "2026-03-02 13:00:30"},
		{"B3", "DONE", "2026-03-02 20:00:00", "2026-03-02 20:10:00"},
		{"B5", "DONE", "2026-03-03 08:00:00", "2026-03-03 08:00:50"},
		{"B6", tiff, "2026-03-03 09:00:00", ""},
	}
	for _, b := range batches {
		_, err := pool.Exec(ctx, `INSERT INTO batches (id, status, uploader, queue_message, started_at, updated_at, completed_at)
			VALUES ($1, $2, 'tester', '{}', $3, $3, $4)`, b.id, b.status, at(b.started), optTime(b.completed))
		require.NoError(t, err)
	}

	tasks := []seedTask{
		{"t0", "B0", tiff, "completed", "callback", "m0", "", "2026-02-20 00:00:10", "2026-02-20 00:05:10"},
		// B1: 30 + 45 + 2.5 = 77.5 machine-seconds.
		{"t1", "B1", tiff, "completed", "callback", "m1", "", "2026-03-02 10:00:10", "2026-03-02 10:00:40"},
		{"t2", "B1", image, "completed", "callback", "m2", "", "2026-03-02 10:00:50", "2026-03-02 10:01:35"},
		{"t3", "B1", image, "failed", "callback", "m3", "Failed to decode TIFF: bad header", "2026-03-02 10:00:50", "2026-03-02 10:00:52.5"},
		// B2: 60.25 (timeout) + 1.25 (a callback that beat the machine's
		// bookkeeping) = 61.5; t5 never got a machine.
		{"t4", "B2", tiff, "failed", "timeout", "m4", "Task timed out after 60.2s", "2026-03-02 12:00:10", "2026-03-02 12:01:10.25"},
		{"t5", "B2", tiff, "failed", "timeout", "", "no machine could be launched after 3 attempts", "2026-03-02 12:00:10", "2026-03-02 12:01:11"},
		{"t6", "B2", tiff, "completed", "callback", "", "", "2026-03-02 12:00:20", "2026-03-02 12:00:21.25"},
		// B4, reset: t7's machine ran 25 s; t8 was still pending.
		{"t7", "B4", tiff, "failed", "reset", "m7", "Batch reset by admin", "2026-03-02 13:00:05", "2026-03-02 13:00:30"},
		{"t8", "B4", tiff, "failed", "reset", "", "Batch reset by admin", "", "2026-03-02 13:00:30"},
		// B6, running: 120 s done, one task still processing.
		{"t9", "B6", tiff, "processing", "", "m9", "", "2026-03-03 09:00:10", ""},
		{"t10", "B6", tiff, "completed", "callback", "m10", "", "2026-03-03 09:00:10", "2026-03-03 09:02:10"},
	}
	for i, tk := range tasks {
		var fileID int64
		err := pool.QueryRow(ctx, `INSERT INTO files (batch_id, generation, ordinal, directory_path, r2_key, logical_path,
				file_name, file_size, content_type, processing_config)
			VALUES ($1, 0, $2, '/', $3, $3, $3, $4, 'image/tiff', '{}') RETURNING id`,
			tk.batch, i, tk.id+".tiff", 1000*(i+1)).Scan(&fileID)
		require.NoError(t, err)
		_, err = pool.Exec(ctx, `INSERT INTO tasks (id, batch_id, phase, file_id, status, ended_by, machine_id, error,
				launched_at, finished_at, created_at)
			VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11)`,
			tk.id, tk.batch, tk.phase, fileID, tk.status, opt(tk.endedBy), opt(tk.machine), opt(tk.err),
			optTime(tk.launched), optTime(tk.finished), at("2026-02-20 00:00:00"))
		require.NoError(t, err)
	}

	// What the batches consumed (the usage table), as the statements that
	// ended the tasks above would have added it: B1's TIFF task 30 s and
	// its two image tasks 45 + 2.5 s; B2's 60.25 + 1.25 s, of a guest not
	// recorded; B4's reset task 25 s; B6's finished task 120 s and its
	// pool's idle machine 10 s; B5's OCR answers.
	for _, u := range []string{
		`('B1', 'TIFF_CONVERSION', 'task', '', 'shared-cpu-2x-1024mb', 1, 30, 0, 0, 0)`,
		`('B1', 'IMAGE_PROCESSING', 'task', '', 'shared-cpu-2x-2048mb', 2, 47.5, 0, 0, 0)`,
		`('B2', 'TIFF_CONVERSION', 'task', '', '', 2, 61.5, 0, 0, 0)`,
		`('B4', 'TIFF_CONVERSION', 'task', '', 'shared-cpu-2x-1024mb', 1, 25, 0, 0, 0)`,
		`('B5', 'OCR', 'provider', 'ocr', 'model-x', 0, 0, 4, 4000, 80)`,
		`('B6', 'TIFF_CONVERSION', 'task', '', 'shared-cpu-2x-1024mb', 1, 120, 0, 0, 0)`,
		`('B6', 'TIFF_CONVERSION', 'pool_idle', '', 'shared-cpu-2x-1024mb', 1, 10, 0, 0, 0)`,
	} {
		_, err := pool.Exec(ctx, `INSERT INTO usage (batch_id, phase, kind, role, resource, attempts, seconds, requests, prompt_tokens, completion_tokens) VALUES `+u)
		require.NoError(t, err)
	}

	events := []seedEvent{
		{"B0", "task.failed", tiff, "t0", "old failure", "2026-02-20 00:03:00"},
		{"B0", "task.completed", tiff, "t0", "", "2026-02-20 00:05:10"},
		{"B0", "batch.done", "", "", "", "2026-02-20 00:10:00"},
		// B1: t1 timed out once, and t2 and t3 failed once, before an
		// admin retry cleared those outcomes from the tasks table.
		{"B1", "task.launched", tiff, "t1", "", "2026-03-02 10:00:01"},
		{"B1", "task.timed_out", tiff, "t1", "Task timed out after 61.0s", "2026-03-02 10:00:05"},
		{"B1", "task.completed", tiff, "t1", "", "2026-03-02 10:00:40"},
		{"B1", "task.failed", image, "t3", "input s3://arke-staging/staging/B1/a.tiff does not exist", "2026-03-02 10:00:45"},
		{"B1", "task.failed", image, "t2", "input s3://arke-staging/staging/B1/b.tiff does not exist", "2026-03-02 10:00:46"},
		{"B1", "task.failed", image, "t3", "Failed to decode TIFF: bad header", "2026-03-02 10:00:52.5"},
		{"B1", "task.completed", image, "t2", "", "2026-03-02 10:01:35"},
		{"B1", "batch.done", "", "", "", "2026-03-02 10:01:40"},
		{"B2", "task.completed", tiff, "t6", "", "2026-03-02 12:00:21.25"},
		{"B2", "task.timed_out", tiff, "t4", "Task timed out after 60.2s", "2026-03-02 12:01:10.25"},
		{"B2", "task.failed", tiff, "t5", "no machine could be launched after 3 attempts", "2026-03-02 12:01:11"},
		{"B2", "batch.done", "", "", "", "2026-03-02 12:05:00"},
		{"B4", "batch.error", tiff, "", "", "2026-03-02 13:00:30"},
		{"B4", "admin.reset", tiff, "", "", "2026-03-02 13:00:31"},
		{"B3", "batch.done", "", "", "", "2026-03-02 20:10:00"},
		{"B5", "batch.done", "", "", "", "2026-03-03 08:00:50"},
		{"B6", "task.completed", tiff, "t10", "", "2026-03-03 09:02:10"},
	}
	for _, e := range events {
		data := "{}"
		if e.err != "" {
			b, _ := json.Marshal(map[string]string{"error": e.err})
			data = string(b)
		}
		_, err := pool.Exec(ctx, `INSERT INTO batch_events (batch_id, type, phase, task_id, data, created_at)
			VALUES ($1, $2, $3, $4, $5, $6)`, e.batch, e.typ, opt(e.phase), opt(e.task), data, at(e.created))
		require.NoError(t, err)
	}
	seedDocuments(t, pool)
	return seeded{pool: pool, url: url}
}

// seedStep is a step's step_timing entry: its first start, its end ("" if
// not finished), runs and work time.
type seedStep struct {
	started, completed string
	runs               int
	workMs             float64
}

type seedDocument struct {
	key, status                string
	created, started, finished string // finished: completed_at or failed_at
	chunks, errors             int
	steps                      map[string]seedStep
}

// seedDocuments writes document versions (ids 1 to 6, in order):
//
//	D0 completed 02-20 00:00 -> 00:01:40  before since, a 100 s step
//	D1 completed 03-02 10:00 -> 10:00:04  4 s, 20 chunks
//	D2 completed 03-02 11:00 -> 11:00:10  10 s, 5 chunks; embeddings 8 s
//	D3 failed    03-03 08:00 -> 08:00:07  7 s, 4 errors, in embeddings
//	D4 processing 03-03 09:00, downloaded
//	D5 not_started 03-03 09:30
func seedDocuments(t *testing.T, pool *pgxpool.Pool) {
	t.Helper()
	day := func(d string) func(string) string { return func(hms string) string { return d + " " + hms } }
	feb, mar2, mar3 := day("2026-02-20"), day("2026-03-02"), day("2026-03-03")
	docs := []seedDocument{
		{"documents/d0.md", "completed", feb("00:00:00"), feb("00:00:00"), feb("00:01:40"), 3, 0, map[string]seedStep{
			"download": {feb("00:00:00"), feb("00:01:40"), 1, 100000},
		}},
		{"documents/d1.md", "completed", mar2("10:00:00"), mar2("10:00:00"), mar2("10:00:04"), 20, 0, map[string]seedStep{
			"download":   {mar2("10:00:00"), mar2("10:00:00.5"), 1, 250},
			"embeddings": {mar2("10:00:00.6"), mar2("10:00:02.5"), 3, 600},
			"tags":       {mar2("10:00:02.6"), mar2("10:00:03.75"), 5, 500},
			"store":      {mar2("10:00:03.875"), mar2("10:00:04"), 1, 125},
		}},
		{"documents/d2.md", "completed", mar2("11:00:00"), mar2("11:00:00"), mar2("11:00:10"), 5, 0, map[string]seedStep{
			"download":   {mar2("11:00:00"), mar2("11:00:00.5"), 1, 500},
			"embeddings": {mar2("11:00:01"), mar2("11:00:09"), 2, 1500},
			"tags":       {mar2("11:00:09.1"), mar2("11:00:09.6"), 2, 300},
			"store":      {mar2("11:00:09.75"), mar2("11:00:10"), 1, 250},
		}},
		{"documents/d3.md", "failed", mar3("08:00:00"), mar3("08:00:00"), mar3("08:00:07"), 8, 4, map[string]seedStep{
			"download":   {mar3("08:00:00"), mar3("08:00:01"), 1, 1000},
			"embeddings": {mar3("08:00:01"), "", 4, 2000},
		}},
		{"documents/d4.md", "processing", mar3("09:00:00"), mar3("09:00:00"), "", 2, 0, map[string]seedStep{
			"download": {mar3("09:00:00"), mar3("09:00:00.25"), 1, 250},
		}},
		{"documents/d5.md", "not_started", mar3("09:30:00"), "", "", 0, 0, nil},
	}
	for _, d := range docs {
		steps := map[string]map[string]any{}
		for name, st := range d.steps {
			e := map[string]any{"startedAt": at(st.started), "completedAt": nil, "runs": st.runs, "workMs": st.workMs}
			if st.completed != "" {
				e["completedAt"] = at(st.completed)
			}
			steps[name] = e
		}
		timing, err := json.Marshal(steps)
		require.NoError(t, err)
		errs := make([]map[string]string, d.errors)
		for i := range errs {
			errs[i] = map[string]string{"step": "embeddings", "error": "provider answered 502", "timestamp": d.finished}
		}
		errJSON, err := json.Marshal(errs)
		require.NoError(t, err)
		var completed, failed *time.Time
		if d.status == "completed" {
			completed = optTime(d.finished)
		} else {
			failed = optTime(d.finished)
		}
		_, err = pool.Exec(context.Background(), `INSERT INTO documents (r2_key, version, status, current_step, total_chunks,
				errors, step_timing, created_at, started_at, completed_at, failed_at)
			VALUES ($1, 1, $2, 'download', $3, $4, $5, $6, $7, $8, $9)`,
			d.key, d.status, d.chunks, errJSON, timing, at(d.created), optTime(d.started), completed, failed)
		require.NoError(t, err)
	}
}

func opt(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}

func optTime(s string) *time.Time {
	if s == "" {
		return nil
	}
	t := at(s)
	return &t
}

// readOnlyConn connects to the seeded database as a fresh login role that
// got only what sql/reporter_role.sql grants (or, with pgReadAllData, only
// pg_read_all_data). Roles are cluster-wide: the name is unique and the role
// is dropped when the test ends.
func readOnlyConn(t *testing.T, s seeded, pgReadAllData bool) *pgx.Conn {
	t.Helper()
	ctx := context.Background()
	b := make([]byte, 6)
	_, _ = rand.Read(b)
	role := "reporter_test_" + hex.EncodeToString(b)
	password := hex.EncodeToString(b) + "pw"

	if pgReadAllData {
		_, err := s.pool.Exec(ctx, "CREATE ROLE "+role+" LOGIN")
		require.NoError(t, err)
		_, err = s.pool.Exec(ctx, "GRANT pg_read_all_data TO "+role)
		require.NoError(t, err)
	} else {
		script, err := os.ReadFile("../sql/reporter_role.sql")
		require.NoError(t, err)
		_, err = s.pool.Exec(ctx, strings.ReplaceAll(string(script), "reporter", role))
		require.NoError(t, err)
	}
	t.Cleanup(func() {
		// DROP OWNED removes the role's privileges (and default
		// privileges) in the test database, which DROP ROLE requires.
		if _, err := s.pool.Exec(context.Background(), "DROP OWNED BY "+role+"; DROP ROLE "+role); err != nil {
			t.Errorf("dropping role %s: %v", role, err)
		}
	})
	_, err := s.pool.Exec(ctx, "ALTER ROLE "+role+" PASSWORD '"+password+"'")
	require.NoError(t, err)

	cfg, err := pgx.ParseConfig(s.url)
	require.NoError(t, err)
	cfg.User, cfg.Password = role, password
	conn, err := pgx.ConnectConfig(ctx, cfg)
	require.NoError(t, err)
	t.Cleanup(func() { conn.Close(context.Background()) })

	// The role really cannot write.
	_, err = conn.Exec(ctx, "DELETE FROM batch_events")
	require.Error(t, err)
	return conn
}

func run(t *testing.T, db reports.Beginner, name string, p reports.Params) *reports.Result {
	t.Helper()
	res, err := reports.Run(context.Background(), db, name, p)
	require.NoError(t, err)
	return res
}

// TestReports checks every report's figures on the seed, as the read-only
// role of sql/reporter_role.sql.
func TestReports(t *testing.T) {
	t.Parallel()
	s := seed(t)
	conn := readOnlyConn(t, s, false)
	p := reports.Params{Since: since}

	t.Run("BatchDurations", func(t *testing.T) {
		res := run(t, conn, "batch-durations", p)
		require.Equal(t, []string{"day", "batches_done", "batches_error", "p50_seconds", "p95_seconds", "max_seconds"}, res.Columns)
		// 03-02: DONE in 100, 300 and 600 s; p95 interpolates 95% of the
		// way from the lowest to the highest rank: 300 + 0.9 * 300 = 570.
		require.Equal(t, [][]any{
			{"2026-03-02", int64(3), int64(1), 300.0, 570.0, 600.0},
			{"2026-03-03", int64(1), int64(0), 50.0, 50.0, 50.0},
		}, res.Rows)
	})

	t.Run("TaskFailures", func(t *testing.T) {
		res := run(t, conn, "task-failures", p)
		require.Equal(t, []string{"phase", "outcomes", "tasks", "completed", "failed", "timed_out", "failure_rate"}, res.Columns)
		require.Equal(t, [][]any{
			// t2 and t3: t2 failed then completed, t3 failed twice.
			{image, int64(4), int64(2), int64(1), int64(3), int64(0), 0.75},
			// t1 (timed out, then completed), t4, t5, t6, t10.
			{tiff, int64(6), int64(5), int64(3), int64(1), int64(2), 0.5},
		}, res.Rows)
	})

	t.Run("FailureReasons", func(t *testing.T) {
		res := run(t, conn, "failure-reasons", p)
		require.Equal(t, []string{"phase", "reason", "failures", "tasks", "batches", "last_seen", "example"}, res.Columns)
		require.Equal(t, [][]any{
			{image, "input s3://<key> does not exist", int64(2), int64(2), int64(1), at("2026-03-02 10:00:46"),
				"input s3://arke-staging/staging/B1/a.tiff does not exist"},
			{tiff, "Task timed out after <n>s", int64(2), int64(2), int64(2), at("2026-03-02 12:01:10.25"),
				"Task timed out after 60.2s"},
			{image, "Failed to decode TIFF: bad header", int64(1), int64(1), int64(1), at("2026-03-02 10:00:52.5"),
				"Failed to decode TIFF: bad header"},
			{tiff, "no machine could be launched after <n> attempts", int64(1), int64(1), int64(1), at("2026-03-02 12:01:11"),
				"no machine could be launched after 3 attempts"},
		}, res.Rows)

		res = run(t, conn, "failure-reasons", reports.Params{Since: since, Limit: 1})
		require.Len(t, res.Rows, 1)
		require.Equal(t, image, res.Rows[0][0])
	})

	t.Run("SlowestTasks", func(t *testing.T) {
		res := run(t, conn, "slowest-tasks", reports.Params{Since: since, Limit: 3})
		require.Equal(t, []string{"task_id", "batch_id", "phase", "status", "file_name", "file_size", "seconds", "launched_at", "finished_at"}, res.Columns)
		require.Equal(t, [][]any{
			{"t10", "B6", tiff, "completed", "t10.tiff", int64(11000), 120.0, at("2026-03-03 09:00:10"), at("2026-03-03 09:02:10")},
			{"t2", "B1", image, "completed", "t2.tiff", int64(3000), 45.0, at("2026-03-02 10:00:50"), at("2026-03-02 10:01:35")},
			{"t1", "B1", tiff, "completed", "t1.tiff", int64(2000), 30.0, at("2026-03-02 10:00:10"), at("2026-03-02 10:00:40")},
		}, res.Rows)

		// By default up to 20; timeouts, resets, running tasks and t0
		// (before since) are not among them.
		res = run(t, conn, "slowest-tasks", p)
		var ids []any
		var secs []any
		for _, r := range res.Rows {
			ids, secs = append(ids, r[0]), append(secs, r[6])
		}
		require.Equal(t, []any{"t10", "t2", "t1", "t3", "t6"}, ids)
		require.Equal(t, []any{120.0, 45.0, 30.0, 2.5, 1.25}, secs)
	})

	t.Run("MachineSeconds", func(t *testing.T) {
		priced := p
		priced.Prices = cost.Prices{
			Machine: map[string]float64{"shared-cpu-2x-1024mb": 0.00001, "shared-cpu-2x-2048mb": 0.00002},
			Tokens:  map[string]cost.TokenPrice{"model-x": {Prompt: 0.001, Completion: 0.002}},
		}
		res := run(t, conn, "machine-seconds", priced)
		require.Equal(t, []string{"batch_id", "status", "uploader", "started_at", "phase", "attempts", "machine_seconds", "pool_idle_seconds",
			"provider_requests", "prompt_tokens", "completion_tokens", "estimated_usd", "unpriced", "running"}, res.Columns)
		b1, b2, b4, b3, b5, b6 := at("2026-03-02 10:00:00"), at("2026-03-02 12:00:00"), at("2026-03-02 13:00:00"),
			at("2026-03-02 20:00:00"), at("2026-03-03 08:00:00"), at("2026-03-03 09:00:00")
		require.Equal(t, [][]any{
			{"B1", "DONE", "tester", b1, image, int64(2), 47.5, 0.0, int64(0), int64(0), int64(0), 0.00095, "", int64(0)},
			{"B1", "DONE", "tester", b1, tiff, int64(1), 30.0, 0.0, int64(0), int64(0), int64(0), 0.0003, "", int64(0)},
			{"B2", "DONE", "tester", b2, tiff, int64(2), 61.5, 0.0, int64(0), int64(0), int64(0), 0.0, "guest unknown", int64(0)},
			{"B4", "ERROR", "tester", b4, tiff, int64(1), 25.0, 0.0, int64(0), int64(0), int64(0), 0.00025, "", int64(0)},
			{"B3", "DONE", "tester", b3, "", int64(0), 0.0, 0.0, int64(0), int64(0), int64(0), 0.0, "", int64(0)},
			{"B5", "DONE", "tester", b5, "OCR", int64(0), 0.0, 0.0, int64(4), int64(4000), int64(80), 0.00416, "", int64(0)},
			{"B6", tiff, "tester", b6, tiff, int64(2), 120.0, 10.0, int64(0), int64(0), int64(0), 0.0013, "", int64(1)},
		}, res.Rows)

		// Without token prices, the OCR answers are unpriced; machines are
		// at Fly's prices.
		res = run(t, conn, "machine-seconds", p)
		fly, _ := cost.FlyMachineSecond("shared-cpu-2x-1024mb")
		require.Equal(t, "model model-x", res.Rows[5][12])
		require.InDelta(t, 30*fly, res.Rows[1][11], 1e-6)
	})

	t.Run("Throughput", func(t *testing.T) {
		res := run(t, conn, "throughput", p)
		require.Equal(t, []string{"hour", "tasks_completed", "tasks_failed", "batches_done", "batches_error"}, res.Columns)
		require.Equal(t, [][]any{
			{at("2026-03-02 10:00:00"), int64(2), int64(4), int64(1), int64(0)},
			{at("2026-03-02 12:00:00"), int64(1), int64(2), int64(1), int64(0)},
			{at("2026-03-02 13:00:00"), int64(0), int64(0), int64(0), int64(1)},
			{at("2026-03-02 20:00:00"), int64(0), int64(0), int64(1), int64(0)},
			{at("2026-03-03 08:00:00"), int64(0), int64(0), int64(1), int64(0)},
			{at("2026-03-03 09:00:00"), int64(1), int64(0), int64(0), int64(0)},
		}, res.Rows)
	})

	t.Run("DocumentsByStatus", func(t *testing.T) {
		res := run(t, conn, "documents-by-status", p)
		require.Equal(t, []string{"status", "documents", "chunks", "with_errors", "p50_seconds", "p95_seconds", "max_seconds"}, res.Columns)
		require.Equal(t, [][]any{
			{"not_started", int64(1), int64(0), int64(0), nil, nil, nil},
			{"processing", int64(1), int64(2), int64(0), nil, nil, nil},
			// D1 and D2, 4 and 10 s: p95 = 4 + 0.95 * 6.
			{"completed", int64(2), int64(25), int64(0), 7.0, 9.7, 10.0},
			{"failed", int64(1), int64(8), int64(1), 7.0, 7.0, 7.0},
		}, res.Rows)
	})

	t.Run("DocumentSlowestSteps", func(t *testing.T) {
		res := run(t, conn, "document-slowest-steps", reports.Params{Since: since, Limit: 2})
		require.Equal(t, []string{"document_id", "r2_key", "version", "step", "runs", "chunks", "seconds", "work_seconds",
			"started_at", "completed_at"}, res.Columns)
		require.Equal(t, [][]any{
			{int64(3), "documents/d2.md", int64(1), "embeddings", int64(2), int64(5), 8.0, 1.5, at("2026-03-02 11:00:01"), at("2026-03-02 11:00:09")},
			{int64(2), "documents/d1.md", int64(1), "embeddings", int64(3), int64(20), 1.9, 0.6, at("2026-03-02 10:00:00.6"), at("2026-03-02 10:00:02.5")},
		}, res.Rows)

		// Every finished step since: D0's is before, D3's embeddings and
		// the steps D4 has yet to run never finished; ties by document.
		res = run(t, conn, "document-slowest-steps", p)
		var got []string
		for _, r := range res.Rows {
			got = append(got, fmt.Sprintf("%s %s %v", r[1], r[3], r[6]))
		}
		require.Equal(t, []string{
			"documents/d2.md embeddings 8", "documents/d1.md embeddings 1.9", "documents/d1.md tags 1.15",
			"documents/d3.md download 1", "documents/d1.md download 0.5", "documents/d2.md download 0.5",
			"documents/d2.md tags 0.5", "documents/d2.md store 0.25", "documents/d4.md download 0.25",
			"documents/d1.md store 0.125",
		}, got)
	})

	t.Run("Since", func(t *testing.T) {
		// From 03-03 on, only B5 and B6 remain.
		res := run(t, conn, "machine-seconds", reports.Params{Since: at("2026-03-03 00:00:00")})
		require.Len(t, res.Rows, 2)
		res = run(t, conn, "batch-durations", reports.Params{Since: at("2026-03-03 00:00:00")})
		require.Equal(t, [][]any{{"2026-03-03", int64(1), int64(0), 50.0, 50.0, 50.0}}, res.Rows)
		// Including the seed's past, B0's figures show up.
		res = run(t, conn, "task-failures", reports.Params{Since: at("2026-01-01 00:00:00")})
		require.Equal(t, []any{tiff, int64(8), int64(6), int64(4), int64(2), int64(2), 0.5}, res.Rows[1])
	})
}

// TestReportsPgReadAllData: the one-line alternative of docs/operations.md, the
// pg_read_all_data role, is enough too.
func TestReportsPgReadAllData(t *testing.T) {
	t.Parallel()
	s := seed(t)
	conn := readOnlyConn(t, s, true)
	all, err := reports.List()
	require.NoError(t, err)
	for _, r := range all {
		res := run(t, conn, r.Name, reports.Params{Since: since})
		require.NotEmpty(t, res.Rows, r.Name)
	}
}

// TestReportsEmpty: on an empty database every report runs and has no
// rows, and every format prints that.
func TestReportsEmpty(t *testing.T) {
	t.Parallel()
	pool := dbtest.New(t)
	all, err := reports.List()
	require.NoError(t, err)
	require.Len(t, all, 8)
	for _, r := range all {
		require.NotEmpty(t, r.Description, r.Name)
		res := run(t, pool, r.Name, reports.Params{Since: since})
		require.Empty(t, res.Rows, r.Name)
		var buf bytes.Buffer
		require.NoError(t, res.Write(&buf, "json"))
		require.Equal(t, "[]\n", buf.String())
		buf.Reset()
		require.NoError(t, res.Write(&buf, "csv"))
		require.Equal(t, strings.Join(res.Columns, ",")+"\n", buf.String())
	}
}

func TestUnknownReport(t *testing.T) {
	t.Parallel()
	_, err := reports.Run(context.Background(), nil, "nope", reports.Params{})
	require.ErrorIs(t, err, reports.ErrUnknown)
	require.ErrorContains(t, err, "throughput")
}
