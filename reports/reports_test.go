package reports_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/arke-institute/orchestrator/internal/dbtest"
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
	return seeded{pool: pool, url: url}
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
		res := run(t, conn, "machine-seconds", p)
		require.Equal(t, []string{"batch_id", "status", "uploader", "started_at", "launches", "machine_seconds", "running"}, res.Columns)
		require.Equal(t, [][]any{
			{"B1", "DONE", "tester", at("2026-03-02 10:00:00"), int64(3), 77.5, int64(0)},
			{"B2", "DONE", "tester", at("2026-03-02 12:00:00"), int64(2), 61.5, int64(0)},
			{"B4", "ERROR", "tester", at("2026-03-02 13:00:00"), int64(1), 25.0, int64(0)},
			{"B3", "DONE", "tester", at("2026-03-02 20:00:00"), int64(0), 0.0, int64(0)},
			{"B5", "DONE", "tester", at("2026-03-03 08:00:00"), int64(0), 0.0, int64(0)},
			{"B6", tiff, "tester", at("2026-03-03 09:00:00"), int64(1), 120.0, int64(1)},
		}, res.Rows)
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

// TestReportsPgReadAllData: the one-line alternative of the README, the
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
	require.Len(t, all, 6)
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
