package api_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/arke-institute/orchestrator/internal/fakes/fakefly"
	"github.com/arke-institute/orchestrator/internal/harness/eventually"
	"github.com/arke-institute/orchestrator/internal/harness/s3test"
	"github.com/arke-institute/orchestrator/internal/harness/testenv"
	"github.com/arke-institute/orchestrator/phases"
	"github.com/arke-institute/orchestrator/status"
)

// exampleBatchID and the two documents below are spec 001's examples.
const exampleBatchID = "01K8RNKN488RQCG3YGG72QBZS5"

const exampleMessage = `{
  "batch_id": "01K8RNKN488RQCG3YGG72QBZS5",
  "manifest_r2_key": "staging/01K8RNKN488RQCG3YGG72QBZS5/_manifest.json",
  "r2_prefix": "staging/01K8RNKN488RQCG3YGG72QBZS5/",
  "uploader": "john.doe@arke.institute",
  "root_path": "/archives/2025/collection-01",
  "parent_pi": "00000000000000000000000000",
  "total_files": 3,
  "total_bytes": 3145728,
  "uploaded_at": "2025-10-29T19:15:30.123Z",
  "finalized_at": "2025-10-29T19:20:45.456Z",
  "metadata": {"project": "archival-2025", "source": "scanner-01", "collection_id": "col_12345"},
  "custom_prompts": {
    "general": "All content is from 18th century scientific manuscripts.",
    "reorganization": "Group documents by subject matter rather than author.",
    "pinax": "Use Library of Congress Subject Headings when possible."
  }
}`

const exampleManifest = `{
  "batch_id": "01K8RNKN488RQCG3YGG72QBZS5",
  "total_files": 3,
  "total_bytes": 3145728,
  "directories": [
    {"directory_path": "/", "processing_config": {"ocr": false, "describe": false, "pinax": true},
     "file_count": 1, "total_bytes": 524288,
     "files": [{"r2_key": "staging/01K8RNKN488RQCG3YGG72QBZS5/metadata.json", "logical_path": "/metadata.json",
                "file_name": "metadata.json", "file_size": 524288, "content_type": "application/json"}]},
    {"directory_path": "/documents", "processing_config": {"ocr": true, "describe": true, "pinax": true},
     "file_count": 1, "total_bytes": 1048576,
     "files": [{"r2_key": "staging/01K8RNKN488RQCG3YGG72QBZS5/documents/report.pdf", "logical_path": "/documents/report.pdf",
                "file_name": "report.pdf", "file_size": 1048576, "content_type": "application/pdf",
                "cid": "bafybeigdyrzt5sfp7udm7hu76uh7y26nf3efuylqabf3oclgtqy55fbzdi"}]},
    {"directory_path": "/images", "processing_config": {"ocr": true, "describe": true, "pinax": false},
     "file_count": 1, "total_bytes": 1572864,
     "files": [{"r2_key": "staging/01K8RNKN488RQCG3YGG72QBZS5/images/photo1.tiff", "logical_path": "/images/photo1.tiff",
                "file_name": "photo1.tiff", "file_size": 1572864, "content_type": "image/tiff",
                "cid": "bafybeihdwdcefgh4dqkjv67uzcmw7ojee6xedzdetojuzjevtenxquvyku"}]}
  ]
}`

const exampleManifestKey = "staging/01K8RNKN488RQCG3YGG72QBZS5/_manifest.json"

func postBatch(t *testing.T, env *testenv.Env, body string) (int, map[string]any) {
	t.Helper()
	code, b := env.Do(t, http.MethodPost, "/batches", strings.NewReader(body))
	var out map[string]any
	require.NoError(t, json.Unmarshal(b, &out), "body: %s", b)
	return code, out
}

func notPending(st status.Status) bool { return st.Status != "PENDING" }

// hanging runs machines that never call back, so a batch stays in its first
// phase while these tests look at intake and discovery.
var hanging = testenv.Options{Behave: func(fakefly.Launch) fakefly.Behavior { return fakefly.Behavior{Hang: true} }}

// awaitEvents polls the batch's event types until there are at least n.
func awaitEvents(t *testing.T, env *testenv.Env, batchID string, n int) []string {
	t.Helper()
	var events []string
	// Fewer than n after the wait are returned all the same, for the
	// caller's comparison to show.
	eventually.Within(30*time.Second, func() bool {
		rows, err := env.Pool.Query(context.Background(), `SELECT type FROM batch_events WHERE batch_id = $1 ORDER BY id`, batchID)
		require.NoError(t, err)
		events = events[:0]
		for rows.Next() {
			var e string
			require.NoError(t, rows.Scan(&e))
			events = append(events, e)
		}
		require.NoError(t, rows.Err())
		return len(events) >= n
	})
	return events
}

func launched(st status.Status) bool {
	return len(st.Phases) > 0 && st.Phases[0].TasksProcessing > 0 || st.Status == "ERROR"
}

// TestExampleBatchStartsFirstPhase: spec 001's example (a TIFF, a PDF, a
// JSON) starts with its PDF, PDF_PAGES being the first phase.
func TestExampleBatchStartsFirstPhase(t *testing.T) {
	t.Parallel()
	env := testenv.New(t, hanging)
	env.PutObject(t, exampleManifestKey, []byte(exampleManifest))

	code, out := postBatch(t, env, exampleMessage)
	require.Equal(t, http.StatusAccepted, code)
	require.Equal(t, map[string]any{"batch_id": exampleBatchID, "status": "PENDING"}, out)

	st := env.AwaitStatus(t, exampleBatchID, launched)
	require.Equal(t, "PDF_PAGES", st.Status, "error: %v", st.Error)
	require.Equal(t, status.Progress{TasksTotal: 1}, st.Progress)
	require.Equal(t, []status.PhaseProgress{{Phase: "PDF_PAGES", Executor: "machine", Unit: "tasks", TasksTotal: 1, TasksProcessing: 1}}, st.Phases)
	require.Nil(t, st.Error)
	require.Nil(t, st.CompletedAt)
	require.False(t, st.StartedAt.IsZero())

	// Generation 0 keeps the manifest's order and each directory's config;
	// the one task points at the PDF.
	ctx := context.Background()
	rows, err := env.Pool.Query(ctx, `SELECT ordinal, directory_path, r2_key, processing_config->>'ocr', coalesce(cid, '')
		FROM files WHERE batch_id = $1 AND generation = 0 ORDER BY ordinal`, exampleBatchID)
	require.NoError(t, err)
	type fileRow struct {
		Ordinal  int
		Dir, Key string
		OCR, CID string
	}
	var files []fileRow
	for rows.Next() {
		var f fileRow
		require.NoError(t, rows.Scan(&f.Ordinal, &f.Dir, &f.Key, &f.OCR, &f.CID))
		files = append(files, f)
	}
	require.NoError(t, rows.Err())
	require.Equal(t, []fileRow{
		{0, "/", "staging/01K8RNKN488RQCG3YGG72QBZS5/metadata.json", "false", ""},
		{1, "/documents", "staging/01K8RNKN488RQCG3YGG72QBZS5/documents/report.pdf", "true", "bafybeigdyrzt5sfp7udm7hu76uh7y26nf3efuylqabf3oclgtqy55fbzdi"},
		{2, "/images", "staging/01K8RNKN488RQCG3YGG72QBZS5/images/photo1.tiff", "true", "bafybeihdwdcefgh4dqkjv67uzcmw7ojee6xedzdetojuzjevtenxquvyku"},
	}, files)

	var taskID, taskKey, taskStatus string
	require.NoError(t, env.Pool.QueryRow(ctx, `SELECT t.id, f.r2_key, t.status FROM tasks t JOIN files f ON f.id = t.file_id WHERE t.batch_id = $1`,
		exampleBatchID).Scan(&taskID, &taskKey, &taskStatus))
	require.True(t, strings.HasPrefix(taskID, "pdf_"), taskID)
	require.Equal(t, "staging/01K8RNKN488RQCG3YGG72QBZS5/documents/report.pdf", taskKey)
	require.Equal(t, string(phases.TaskProcessing), taskStatus)

	// The launch is recorded just after the task is claimed: wait for it.
	events := awaitEvents(t, env, exampleBatchID, 3)
	require.Equal(t, []string{"batch.created", "phase.started", "task.launched"}, events)
}

// TestIntakePriority: the queue message's priority is kept, shown by the
// status and the batch list, and its batch's jobs run at its River level.
func TestIntakePriority(t *testing.T) {
	t.Parallel()
	env := testenv.New(t, hanging)
	env.PutObject(t, exampleManifestKey, []byte(exampleManifest))

	code, _ := postBatch(t, env, strings.Replace(exampleMessage, `"total_files": 3`, `"priority": "high", "total_files": 3`, 1))
	require.Equal(t, http.StatusAccepted, code)
	st := env.AwaitStatus(t, exampleBatchID, launched)
	require.Equal(t, 5, st.Priority)
	code, body := env.Do(t, http.MethodGet, "/batches", nil)
	require.Equal(t, http.StatusOK, code)
	var page status.BatchPage
	require.NoError(t, json.Unmarshal(body, &page))
	require.Len(t, page.Batches, 1)
	require.Equal(t, 5, page.Batches[0].Priority)
	var levels []int
	rows, err := env.Pool.Query(context.Background(), `SELECT DISTINCT priority FROM river_job WHERE args->>'batch_id' = $1`, exampleBatchID)
	require.NoError(t, err)
	levels, err = pgx.CollectRows(rows, pgx.RowTo[int])
	require.NoError(t, err)
	require.Equal(t, []int{1}, levels, "the batch's jobs (batch_start, phase_launch, ...) run at River's first level")
}

func TestRepeatSubmissionChangesNothing(t *testing.T) {
	t.Parallel()
	env := testenv.New(t, hanging)
	env.PutObject(t, exampleManifestKey, []byte(exampleManifest))

	code, _ := postBatch(t, env, exampleMessage)
	require.Equal(t, http.StatusAccepted, code)
	env.AwaitStatus(t, exampleBatchID, notPending)

	// A repeat, even with other content, answers 200 with the current status.
	changed := strings.Replace(exampleMessage, "john.doe@arke.institute", "someone.else@arke.institute", 1)
	code, out := postBatch(t, env, changed)
	require.Equal(t, http.StatusOK, code)
	require.Equal(t, map[string]any{"batch_id": exampleBatchID, "status": "PDF_PAGES"}, out)

	var uploader string
	var starts, created int
	require.NoError(t, env.Pool.QueryRow(context.Background(), `SELECT uploader,
		(SELECT count(*) FROM river_job WHERE kind = 'batch_start'),
		(SELECT count(*) FROM batch_events WHERE type = 'batch.created')
		FROM batches WHERE id = $1`, exampleBatchID).Scan(&uploader, &starts, &created))
	require.Equal(t, "john.doe@arke.institute", uploader)
	require.Equal(t, 1, starts)
	require.Equal(t, 1, created)
}

func TestConcurrentSubmissionsAcceptOnce(t *testing.T) {
	t.Parallel()
	env := testenv.New(t, hanging)
	env.PutObject(t, exampleManifestKey, []byte(exampleManifest))

	const n = 12
	var accepted, repeated atomic.Int32
	var wg sync.WaitGroup
	for range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			req, err := http.NewRequest(http.MethodPost, env.Server.URL+"/batches", strings.NewReader(exampleMessage))
			if err != nil {
				t.Error(err)
				return
			}
			req.Header.Set("Content-Type", "application/json")
			req.Header.Set("Authorization", "Bearer "+testenv.IngestToken)
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Error(err)
				return
			}
			resp.Body.Close()
			switch resp.StatusCode {
			case http.StatusAccepted:
				accepted.Add(1)
			case http.StatusOK:
				repeated.Add(1)
			default:
				t.Errorf("unexpected status %d", resp.StatusCode)
			}
		}()
	}
	wg.Wait()
	require.Equal(t, int32(1), accepted.Load())
	require.Equal(t, int32(n-1), repeated.Load())
	var starts int
	require.NoError(t, env.Pool.QueryRow(context.Background(), `SELECT count(*) FROM river_job WHERE kind = 'batch_start'`).Scan(&starts))
	require.Equal(t, 1, starts)
}

func TestBadManifestPutsBatchInError(t *testing.T) {
	t.Parallel()
	env := testenv.New(t, hanging)

	tests := []struct {
		name      string
		batchID   string
		manifest  func(id string) string // nil: no manifest uploaded
		wantError string
	}{
		{
			name:      "Missing",
			batchID:   "BATCH-MISSING",
			wantError: "manifest not found: staging/BATCH-MISSING/_manifest.json",
		},
		{
			name:    "NotJSON",
			batchID: "BATCH-NOTJSON",
			manifest: func(string) string {
				return "{not json"
			},
			wantError: "invalid manifest staging/BATCH-NOTJSON/_manifest.json: ",
		},
		{
			name:    "ForbiddenExtension",
			batchID: "BATCH-EXE",
			manifest: func(id string) string {
				return strings.NewReplacer(exampleBatchID, id, "metadata.json", "setup.exe").Replace(exampleManifest)
			},
			wantError: `invalid manifest staging/BATCH-EXE/_manifest.json: file staging/BATCH-EXE/setup.exe: extension ".exe" is not allowed`,
		},
		{
			name:    "OtherBatchID",
			batchID: "BATCH-OTHER",
			manifest: func(id string) string {
				m := strings.ReplaceAll(exampleManifest, exampleBatchID, id)
				return strings.Replace(m, `"batch_id": "`+id+`"`, `"batch_id": "SOMEONE-ELSE"`, 1)
			},
			wantError: "invalid manifest staging/BATCH-OTHER/_manifest.json: batch_id",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			key := "staging/" + tt.batchID + "/_manifest.json"
			if tt.manifest != nil {
				env.PutObject(t, key, []byte(tt.manifest(tt.batchID)))
			}
			msg := strings.ReplaceAll(exampleMessage, exampleBatchID, tt.batchID)
			code, _ := postBatch(t, env, msg)
			require.Equal(t, http.StatusAccepted, code)

			st := env.AwaitStatus(t, tt.batchID, notPending)
			require.Equal(t, "ERROR", st.Status)
			require.NotNil(t, st.Error)
			require.Contains(t, *st.Error, tt.wantError)
			require.NotNil(t, st.CompletedAt)

			// Not retried: the start job finished, it is not waiting to run again.
			var state string
			require.NoError(t, env.Pool.QueryRow(context.Background(),
				`SELECT state FROM river_job WHERE kind = 'batch_start' AND args->>'batch_id' = $1`, tt.batchID).Scan(&state))
			require.Equal(t, "completed", state)
		})
	}
}

func TestBatchWithoutWorkIsDone(t *testing.T) {
	t.Parallel()
	env := testenv.New(t, hanging)
	// Drop the TIFF and make the PDF a CSV: what is left (JSON, CSV)
	// needs no phase.
	m := strings.Replace(exampleManifest, `"total_files": 3,
  "total_bytes": 3145728,`, `"total_files": 2,
  "total_bytes": 1572864,`, 1)
	i := strings.Index(m, `,
    {"directory_path": "/images"`)
	m = strings.NewReplacer("report.pdf", "report.csv", "application/pdf", "text/csv").Replace(m[:i] + "\n  ]\n}")
	msg := strings.NewReplacer(`"total_files": 3`, `"total_files": 2`, `"total_bytes": 3145728`, `"total_bytes": 1572864`).Replace(exampleMessage)
	env.PutObject(t, exampleManifestKey, []byte(m))

	code, _ := postBatch(t, env, msg)
	require.Equal(t, http.StatusAccepted, code)
	st := env.AwaitStatus(t, exampleBatchID, notPending)
	require.Equal(t, "DONE", st.Status, "error: %v", st.Error)
	require.NotNil(t, st.CompletedAt)
	require.Empty(t, st.Phases)
}

func TestTransientStorageErrorIsRetried(t *testing.T) {
	t.Parallel()
	// The orchestrator reaches the S3 server through a proxy that answers
	// 503 to the first four reads: more than the SDK's own three attempts,
	// so the first run of batch_start fails and River must retry it.
	s3 := s3test.Start(t)
	target, err := url.Parse(s3.Endpoint())
	require.NoError(t, err)
	proxy := httputil.NewSingleHostReverseProxy(target)
	var failures atomic.Int32
	failures.Store(4)
	front := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodGet && failures.Add(-1) >= 0 {
			w.WriteHeader(http.StatusServiceUnavailable)
			return
		}
		proxy.ServeHTTP(w, r)
	}))
	t.Cleanup(front.Close)
	cfg := s3.Config()
	cfg.Endpoint = front.URL
	env := testenv.New(t, testenv.Options{StoreConfig: &cfg, Behave: hanging.Behave})
	env.PutObject(t, exampleManifestKey, []byte(exampleManifest))

	code, _ := postBatch(t, env, exampleMessage)
	require.Equal(t, http.StatusAccepted, code)
	st := env.AwaitStatus(t, exampleBatchID, notPending)
	require.Equal(t, "PDF_PAGES", st.Status, "error: %v", st.Error)

	var retries int
	require.NoError(t, env.Pool.QueryRow(context.Background(),
		`SELECT count(*) FROM batch_events WHERE batch_id = $1 AND type = 'batch.start_failed'`, exampleBatchID).Scan(&retries))
	require.GreaterOrEqual(t, retries, 1, "the failed attempts are visible as events")
}

func TestIntakeRejectsBadRequests(t *testing.T) {
	t.Parallel()
	env := testenv.New(t, hanging)

	big := `{"batch_id": "B", "metadata": {"pad": "` + strings.Repeat("x", 1<<20) + `"}}`
	tests := []struct {
		name     string
		body     string
		wantCode int
		wantMsgs []string
	}{
		{"MalformedJSON", `{"batch_id": `, http.StatusBadRequest, []string{"not valid JSON"}},
		{"NotAnObject", `[1, 2]`, http.StatusBadRequest, nil},
		{"EmptyBody", ``, http.StatusBadRequest, nil},
		{"MissingFields", `{"batch_id": "B"}`, http.StatusBadRequest, []string{"manifest_r2_key is required", "total_files"}},
		{"EmptyBatchID", strings.Replace(exampleMessage, `"batch_id": "01K8RNKN488RQCG3YGG72QBZS5"`, `"batch_id": ""`, 1), http.StatusBadRequest, []string{"batch_id"}},
		{"WrongType", strings.Replace(exampleMessage, `"total_files": 3`, `"total_files": "3"`, 1), http.StatusBadRequest, []string{"total_files must be a non-negative integer"}},
		{"PromptTooLong", strings.Replace(exampleMessage, `"pinax": "Use`, `"pinax": "`+strings.Repeat("p", 10001)+`Use`, 1), http.StatusBadRequest, []string{"custom_prompts.pinax"}},
		{"PriorityOffScale", strings.Replace(exampleMessage, `"total_files": 3`, `"priority": 11, "total_files": 3`, 1), http.StatusBadRequest, []string{"priority must be an integer from -10 (lowest) to 10 (highest)", "got 11"}},
		{"PriorityUnknownName", strings.Replace(exampleMessage, `"total_files": 3`, `"priority": "urgent", "total_files": 3`, 1), http.StatusBadRequest, []string{`"high" (5), got "urgent"`}},
		{"NULCharacter", strings.Replace(exampleMessage, `"source": "scanner-01"`, `"source": "scanner\u000001"`, 1), http.StatusBadRequest, []string{"NUL character"}},
		{"TooLarge", big, http.StatusRequestEntityTooLarge, []string{"larger than 1048576 bytes"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			code, body := env.Do(t, http.MethodPost, "/batches", bytes.NewReader([]byte(tt.body)))
			require.Equal(t, tt.wantCode, code, "body: %s", body)
			var out map[string]string
			require.NoError(t, json.Unmarshal(body, &out), "error bodies are JSON: %s", body)
			require.NotEmpty(t, out["error"])
			for _, m := range tt.wantMsgs {
				require.Contains(t, out["error"], m)
			}
		})
	}
	// Nothing was stored by any of them.
	var n int
	require.NoError(t, env.Pool.QueryRow(context.Background(), `SELECT count(*) FROM batches`).Scan(&n))
	require.Zero(t, n)
}

func TestStatusAndHealth(t *testing.T) {
	t.Parallel()
	env := testenv.New(t, hanging)

	code, body := env.Do(t, http.MethodGet, "/status/NO-SUCH-BATCH", nil)
	require.Equal(t, http.StatusNotFound, code)
	require.JSONEq(t, `{"error": "batch NO-SUCH-BATCH: not found"}`, string(body))

	code, body = env.Do(t, http.MethodGet, "/healthz", nil)
	require.Equal(t, http.StatusOK, code)
	require.JSONEq(t, `{"status": "ok"}`, string(body))

	code, body = env.Do(t, http.MethodGet, "/no/such/route", nil)
	require.Equal(t, http.StatusNotFound, code)
	require.JSONEq(t, `{"error": "Not Found"}`, string(body))

	code, body = env.Do(t, http.MethodDelete, "/batches", nil)
	require.Equal(t, http.StatusMethodNotAllowed, code)
	require.Contains(t, string(body), `"error"`)
}

// TestOversizedManifestIsRefusedUnread: a manifest over MANIFEST_MAX_BYTES
// puts its batch in ERROR with its size, once, without being read (the
// store reports the size before the body).
func TestOversizedManifestIsRefusedUnread(t *testing.T) {
	t.Parallel()
	opts := hanging
	opts.Settings = map[string]string{"MANIFEST_MAX_BYTES": "100"}
	env := testenv.New(t, opts)
	const id = "BATCH-HUGE"
	m := strings.ReplaceAll(exampleManifest, exampleBatchID, id)
	env.PutObject(t, "staging/"+id+"/_manifest.json", []byte(m))
	code, _ := postBatch(t, env, strings.ReplaceAll(exampleMessage, exampleBatchID, id))
	require.Equal(t, http.StatusAccepted, code)
	st := env.AwaitStatus(t, id, notPending)
	require.Equal(t, "ERROR", st.Status)
	require.Equal(t, fmt.Sprintf("manifest staging/%s/_manifest.json is %d bytes, more than MANIFEST_MAX_BYTES (100)", id, len(m)), *st.Error)
}
