package jobs_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"path"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/arke-institute/orchestrator/db"
	"github.com/arke-institute/orchestrator/internal/fakes/fakeai"
	"github.com/arke-institute/orchestrator/internal/fakes/fakefly"
	"github.com/arke-institute/orchestrator/internal/fakes/fakeocr"
	"github.com/arke-institute/orchestrator/internal/harness/eventually"
	"github.com/arke-institute/orchestrator/internal/harness/testenv"
	"github.com/arke-institute/orchestrator/jobs"
	"github.com/arke-institute/orchestrator/manifest"
	"github.com/arke-institute/orchestrator/status"
)

// manifestFiles is a delivered manifest's files by logical path.
func manifestFiles(t *testing.T, body []byte) map[string]manifest.FileInfo {
	t.Helper()
	var m jobs.ProcessedManifest
	require.NoError(t, json.Unmarshal(body, &m))
	out := map[string]manifest.FileInfo{}
	for _, d := range m.Manifest.Directories {
		for _, f := range d.Files {
			out[f.LogicalPath] = f
		}
	}
	return out
}

// batchPage is the dashboard's page of a batch, as the admin sees it.
func batchPage(t *testing.T, env *testenv.Env, id string) string {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), http.MethodGet, env.Server.URL+"/ui/batches/"+id, nil)
	require.NoError(t, err)
	req.SetBasicAuth("admin", testenv.AdminToken)
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, resp.StatusCode, "body: %s", body)
	return string(body)
}

// TestRetryDoneBatchRerunsOnlyFailures: a DONE batch with one TIFF whose
// conversion failed and one document whose indexing failed. An admin
// retry reruns exactly those: one TIFF machine, one image machine for the
// JPEG it makes (derived work flows through the later phases), and the
// failed document resumed (same document) with embeddings for it alone.
// Every other file keeps its results, the final manifest is delivered
// again under a new idempotency key, and a second retry has nothing to do.
func TestRetryDoneBatchRerunsOnlyFailures(t *testing.T) {
	t.Parallel()
	const id = "RESUME-DONE"
	var (
		mu       sync.Mutex
		launched = map[string]int{} // machines by input file name
		fixed    atomic.Bool        // the failures are mended
		embedded = map[string]int{} // embeddings requests by document word
	)
	behave := func(l fakefly.Launch) fakefly.Behavior {
		name := path.Base(l.Env["INPUT_R2_KEY"])
		mu.Lock()
		launched[name]++
		mu.Unlock()
		if name == "bad.tif" && !fixed.Load() {
			return fakefly.Behavior{Body: map[string]any{"task_id": l.TaskID, "batch_id": l.BatchID, "status": "error", "error": "Failed to decode TIFF: truncated strip"}}
		}
		return fakefly.Behavior{}
	}
	fake := fakeai.New(t, fakeai.Options{Behave: func(r fakeai.Request) fakeai.Behavior {
		if r.Route != fakeai.Embeddings {
			return fakeai.Behavior{}
		}
		text := strings.Join(r.Inputs, " ")
		mu.Lock()
		defer mu.Unlock()
		for _, w := range []string{"lighthouse", "parish"} {
			if strings.Contains(text, w) {
				embedded[w]++
			}
		}
		if strings.Contains(text, "parish") && !fixed.Load() {
			return fakeai.Behavior{Status: http.StatusBadRequest, Message: "input refused"}
		}
		return fakeai.Behavior{}
	}})
	env := testenv.New(t, testenv.Options{Behave: behave, Settings: testenv.RoomyLimits(map[string]string{
		"EMBEDDINGS_API_URL": fake.URL, "EMBEDDINGS_API_KEY": fakeai.DefaultKey,
	})})
	describe := manifest.ProcessingConfig{Describe: true}
	env.PutObject(t, "staging/"+id+"/docs/guide.md", []byte("# Harbour\n\nThe lighthouse keeper logs every ship.\n"))
	env.PutObject(t, "staging/"+id+"/docs/minutes.txt", []byte("Minutes of the parish council: the bridge repairs are approved.\n"))
	env.Submit(t, id, []testenv.File{
		{LogicalPath: "/scans/good.tif", Size: 100, ContentType: "image/tiff"},
		{LogicalPath: "/scans/bad.tif", Size: 100, ContentType: "image/tiff"},
		{LogicalPath: "/docs/guide.md", Size: 50, ContentType: "text/markdown", Config: describe},
		{LogicalPath: "/docs/minutes.txt", Size: 60, ContentType: "text/plain", Config: describe},
	})
	st := env.AwaitStatus(t, id, testenv.IsDone)
	require.Equal(t, "DONE", st.Status, "error: %v", st.Error)
	require.Equal(t, &testenv.DocumentCounts{Total: 2, Completed: 1, Failed: 1}, testenv.DocumentsOf(st))
	first := manifestFiles(t, env.AwaitIngest(t, 1)[0].Body)
	require.NotContains(t, first, "/scans/bad.jpg.ref.json", "the failed TIFF was not converted")
	require.Contains(t, first, "/scans/good.jpg.ref.json")
	require.Zero(t, first["/docs/minutes.txt"].DocumentID, "the failed document's file has no document")
	guideDoc := first["/docs/guide.md"].DocumentID
	require.NotZero(t, guideDoc)
	var failedDoc int64
	require.NoError(t, env.Pool.QueryRow(context.Background(),
		`SELECT id FROM documents WHERE batch_id = $1 AND status = 'failed'`, id).Scan(&failedDoc))
	mu.Lock()
	require.Equal(t, map[string]int{"good.tif": 1, "bad.tif": 1, "good.jpg": 1}, launched)
	before := map[string]int{"lighthouse": embedded["lighthouse"], "parish": embedded["parish"]}
	mu.Unlock()

	require.Contains(t, batchPage(t, env, id), `id="retry"`, "the dashboard offers the retry of a DONE batch with failures")

	fixed.Store(true)
	code, body := env.DoAuth(t, http.MethodPost, "/admin/retry/"+id, testenv.AdminToken, nil)
	require.Equal(t, http.StatusOK, code, "body: %s", body)
	var resumed status.Status
	require.NoError(t, json.Unmarshal(body, &resumed))
	require.Equal(t, "TIFF_CONVERSION", resumed.Status, "the rerun starts at the earliest phase with a failure")
	require.Nil(t, resumed.CompletedAt)

	st = env.AwaitStatus(t, id, testenv.IsDone)
	require.Equal(t, "DONE", st.Status, "error: %v", st.Error)
	require.Equal(t, &testenv.DocumentCounts{Total: 2, Completed: 2}, testenv.DocumentsOf(st))
	calls := env.AwaitIngest(t, 2)
	require.Len(t, calls, 2)
	require.NotEqual(t, calls[0].IdempotencyKey, calls[1].IdempotencyKey, "a new delivery has a new idempotency key")
	second := manifestFiles(t, calls[1].Body)

	// Exactly the failures ran again, and what derives from them.
	mu.Lock()
	require.Equal(t, map[string]int{"good.tif": 1, "bad.tif": 2, "good.jpg": 1, "bad.jpg": 1}, launched)
	require.Equal(t, before["lighthouse"], embedded["lighthouse"], "the completed document is not indexed again")
	require.Greater(t, embedded["parish"], before["parish"])
	mu.Unlock()

	// The rerun's results are in; every other file is as it was.
	require.Contains(t, second["/scans/bad.tif"].PreprocessorTags, "TiffConverter:source")
	require.Contains(t, second, "/scans/bad.jpg.ref.json")
	require.Equal(t, failedDoc, second["/docs/minutes.txt"].DocumentID, "the failed document resumed, not made anew")
	for _, lp := range []string{"/scans/good.tif", "/scans/good.jpg.ref.json", "/docs/guide.md"} {
		require.Equal(t, first[lp], second[lp], lp)
	}
	require.Len(t, second, len(first)+1, "bad.tif's JPEG ref joined the list")
	var docs int
	require.NoError(t, env.Pool.QueryRow(context.Background(), `SELECT count(*) FROM documents WHERE batch_id = $1`, id).Scan(&docs))
	require.Equal(t, 2, docs)

	var data string
	require.NoError(t, env.Pool.QueryRow(context.Background(),
		`SELECT data::text FROM batch_events WHERE batch_id = $1 AND type = $2`, id, db.EventBatchResumed).Scan(&data))
	require.JSONEq(t, `{"phase": "TIFF_CONVERSION", "files": 2, "tasks": {"TIFF_CONVERSION": 1}, "ocr_items": 0, "documents": 1}`, data)
	require.Equal(t, status.PhaseProgress{Phase: "TIFF_CONVERSION", Executor: "machine", Unit: "tasks", TasksTotal: 2, TasksCompleted: 2}, st.Phases[0])

	// Nothing failed any more.
	require.NotContains(t, batchPage(t, env, id), `id="retry"`)
	code, body = env.DoAuth(t, http.MethodPost, "/admin/retry/"+id, testenv.AdminToken, nil)
	require.Equal(t, http.StatusConflict, code)
	require.Contains(t, string(body), "is DONE with nothing failed; there is nothing to retry")
	require.Len(t, env.AwaitIngest(t, 2), 2)
}

// TestRetryResumesFailedDocuments: in DOCUMENT_INDEXING, with one
// document failed and one still running, an admin retry of the running
// batch, or of the batch reset to ERROR, resumes the failed one (the same
// document, from the step that failed); with none failed a running batch
// has nothing to retry. The batch then finishes with both indexed.
func TestRetryResumesFailedDocuments(t *testing.T) {
	t.Parallel()
	for _, reset := range []bool{false, true} {
		name := map[bool]string{false: "Running", true: "AfterReset"}[reset]
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			id := "RESUME-DOCS-" + strings.ToUpper(name)
			gate := make(chan struct{})
			var (
				gateOnce sync.Once
				fixed    atomic.Bool
			)
			open := func() { gateOnce.Do(func() { close(gate) }) }
			t.Cleanup(open)
			fake := fakeai.New(t, fakeai.Options{Behave: func(r fakeai.Request) fakeai.Behavior {
				text := strings.Join(r.Inputs, " ")
				switch {
				case r.Route != fakeai.Embeddings:
				case strings.Contains(text, "slow"):
					<-gate
				case strings.Contains(text, "refused") && !fixed.Load():
					return fakeai.Behavior{Status: http.StatusBadRequest, Message: "input refused"}
				}
				return fakeai.Behavior{}
			}})
			env := testenv.New(t, testenv.Options{Settings: testenv.RoomyLimits(map[string]string{
				"EMBEDDINGS_API_URL": fake.URL, "EMBEDDINGS_API_KEY": fakeai.DefaultKey,
			})})
			describe := manifest.ProcessingConfig{Describe: true}
			env.PutObject(t, "staging/"+id+"/slow.txt", []byte("a slow document"))
			env.PutObject(t, "staging/"+id+"/refused.txt", []byte("a refused document"))
			env.Submit(t, id, []testenv.File{
				{LogicalPath: "/slow.txt", Size: 15, ContentType: "text/plain", Config: describe},
				{LogicalPath: "/refused.txt", Size: 18, ContentType: "text/plain", Config: describe},
			})
			st := env.AwaitStatus(t, id, func(st status.Status) bool {
				return testenv.DocumentsOf(st) != nil && testenv.DocumentsOf(st).Failed == 1
			})
			require.Equal(t, "DOCUMENT_INDEXING", st.Status)
			var failedID int64
			require.NoError(t, env.Pool.QueryRow(context.Background(),
				`SELECT id FROM documents WHERE batch_id = $1 AND status = 'failed'`, id).Scan(&failedID))
			want := `{"previous_status": "DOCUMENT_INDEXING", "resumed_status": "DOCUMENT_INDEXING", "phase": "DOCUMENT_INDEXING", "documents_resumed": 1}`
			if reset {
				code, body := env.DoAuth(t, http.MethodPost, "/admin/reset/"+id, testenv.AdminToken, nil)
				require.Equal(t, http.StatusOK, code, "body: %s", body)
				want = `{"previous_status": "ERROR", "previous_error": "Manually reset by admin", "resumed_status": "DOCUMENT_INDEXING",
					"phase": "DOCUMENT_INDEXING", "documents_resumed": 1}`
			}

			fixed.Store(true)
			code, body := env.DoAuth(t, http.MethodPost, "/admin/retry/"+id, testenv.AdminToken, nil)
			require.Equal(t, http.StatusOK, code, "body: %s", body)
			eventually.True(t, 30*time.Second, "the failed document to be indexed", func() bool {
				var status string
				require.NoError(t, env.Pool.QueryRow(context.Background(), `SELECT status FROM documents WHERE id = $1`, failedID).Scan(&status))
				return status == "completed"
			})
			code, body = env.DoAuth(t, http.MethodPost, "/admin/retry/"+id, testenv.AdminToken, nil)
			require.Equal(t, http.StatusConflict, code)
			require.Contains(t, string(body), "is running DOCUMENT_INDEXING with no failed work")

			open()
			st = env.AwaitStatus(t, id, testenv.IsDone)
			require.Equal(t, "DONE", st.Status, "error: %v", st.Error)
			require.Equal(t, &testenv.DocumentCounts{Total: 2, Completed: 2}, testenv.DocumentsOf(st))
			final := manifestFiles(t, env.AwaitIngest(t, 1)[0].Body)
			require.Equal(t, failedID, final["/refused.txt"].DocumentID)
			require.NotZero(t, final["/slow.txt"].DocumentID)
			var data string
			require.NoError(t, env.Pool.QueryRow(context.Background(),
				`SELECT data::text FROM batch_events WHERE batch_id = $1 AND type = 'admin.retry'`, id).Scan(&data))
			require.JSONEq(t, want, data)
		})
	}
}

// stuckEmbeddingsEnv is an orchestrator whose embeddings provider never
// answers for a text with "stuck" in it (until the client goes away).
func stuckEmbeddingsEnv(t *testing.T) *testenv.Env {
	fake := fakeai.New(t, fakeai.Options{Behave: func(r fakeai.Request) fakeai.Behavior {
		if r.Route == fakeai.Embeddings && strings.Contains(strings.Join(r.Inputs, " "), "stuck") {
			return fakeai.Behavior{Delay: time.Minute}
		}
		return fakeai.Behavior{}
	}})
	return testenv.New(t, testenv.Options{Settings: testenv.RoomyLimits(map[string]string{
		"EMBEDDINGS_API_URL": fake.URL, "EMBEDDINGS_API_KEY": fakeai.DefaultKey,
	})})
}

// TestAbandonedDocumentFails: a batch document whose step job River stops
// for good (cancelled here, as from River UI; a discarded job is the same
// to the sweep) fails with the reason in its errors, and the batch's
// DOCUMENT_INDEXING phase sees it ended: the batch finishes.
func TestAbandonedDocumentFails(t *testing.T) {
	t.Parallel()
	const id = "DOCS-ABANDONED"
	env := stuckEmbeddingsEnv(t)
	describe := manifest.ProcessingConfig{Describe: true}
	env.PutObject(t, "staging/"+id+"/ok.txt", []byte("a fine document"))
	env.PutObject(t, "staging/"+id+"/stuck.txt", []byte("a stuck document"))
	env.Submit(t, id, []testenv.File{
		{LogicalPath: "/ok.txt", Size: 15, ContentType: "text/plain", Config: describe},
		{LogicalPath: "/stuck.txt", Size: 16, ContentType: "text/plain", Config: describe},
	})
	ctx := context.Background()
	var docID, jobID int64
	eventually.True(t, 30*time.Second, "the stuck document's embeddings to be under way", func() bool {
		err := env.Pool.QueryRow(ctx, `SELECT d.id, j.id FROM documents d JOIN river_job j
			ON j.kind = 'document_step' AND j.args @> jsonb_build_object('document_id', d.id) AND j.state = 'running'
			WHERE d.batch_id = $1 AND d.current_step = 'embeddings' AND d.r2_key LIKE '%/stuck.txt'`, id).Scan(&docID, &jobID)
		return err == nil
	})
	_, err := env.River.JobCancel(ctx, jobID)
	require.NoError(t, err)

	st := env.AwaitStatus(t, id, testenv.IsDone)
	require.Equal(t, "DONE", st.Status, "error: %v", st.Error)
	require.Equal(t, &testenv.DocumentCounts{Total: 2, Completed: 1, Failed: 1}, testenv.DocumentsOf(st))
	doc, err := db.New(env.Pool).DocumentGet(ctx, docID)
	require.NoError(t, err)
	require.Equal(t, db.DocumentFailed, doc.Status)
	require.Contains(t, string(doc.Errors), "was cancelled by River")
	final := manifestFiles(t, env.AwaitIngest(t, 1)[0].Body)
	require.Zero(t, final["/stuck.txt"].DocumentID)
	require.NotZero(t, final["/ok.txt"].DocumentID)
}

// TestAbandonedAPIDocumentFails: a document posted through the API (no
// batch) whose step job River stops for good fails too, with the reason in
// its errors, instead of staying processing; a document still working is
// left alone.
func TestAbandonedAPIDocumentFails(t *testing.T) {
	t.Parallel()
	env := stuckEmbeddingsEnv(t)
	ctx := context.Background()
	post := func(key, text string) int64 {
		env.PutObject(t, key, []byte(text))
		code, body := env.Do(t, http.MethodPost, "/documents", strings.NewReader(fmt.Sprintf(`{"r2_key": %q}`, key)))
		require.Equal(t, http.StatusAccepted, code, string(body))
		var doc struct{ ID int64 }
		require.NoError(t, json.Unmarshal(body, &doc))
		return doc.ID
	}
	stuck := post("documents/stuck-one.txt", "a stuck document")
	slow := post("documents/stuck-two.txt", "another stuck document")
	jobOf := func(id int64) (jobID int64) {
		eventually.True(t, 30*time.Second, "the document's embeddings to be under way", func() bool {
			return env.Pool.QueryRow(ctx, `SELECT j.id FROM river_job j JOIN documents d ON d.id = $1
				WHERE j.kind = 'document_step' AND j.args @> jsonb_build_object('document_id', d.id)
				AND j.state = 'running' AND d.current_step = 'embeddings'`, id).Scan(&jobID) == nil
		})
		return jobID
	}
	jobID := jobOf(stuck)
	jobOf(slow)
	_, err := env.River.JobCancel(ctx, jobID)
	require.NoError(t, err)

	q := db.New(env.Pool)
	eventually.True(t, 30*time.Second, "the abandoned document to fail", func() bool {
		doc, err := q.DocumentGet(ctx, stuck)
		require.NoError(t, err)
		return doc.Status == "failed"
	})
	doc, err := q.DocumentGet(ctx, stuck)
	require.NoError(t, err)
	require.Contains(t, string(doc.Errors), fmt.Sprintf("step job %d was cancelled by River", jobID))
	other, err := q.DocumentGet(ctx, slow)
	require.NoError(t, err)
	require.Equal(t, db.DocumentProcessing, other.Status, "a document whose job still runs is not failed")
}

// TestRetryDoneBatchRerunsFailedOCR: a DONE batch whose provider refused
// one image's OCR. A retry resumes in OCR with that ref alone (a new
// chunk; the provider sees no other image again), and the OCR text it
// gets flows on: the ref is indexed as a document in DOCUMENT_INDEXING,
// while the other refs keep their text and documents.
func TestRetryDoneBatchRerunsFailedOCR(t *testing.T) {
	t.Parallel()
	const id = "RESUME-OCR"
	refuse := testenv.VariantText("staging/" + id + "/a/p001.jpg")
	var fixed atomic.Bool
	fake := fakeocr.New(t, fakeocr.Options{Behave: func(r fakeocr.Request) fakeocr.Behavior {
		if r.Text == refuse && !fixed.Load() {
			return fakeocr.Behavior{Status: http.StatusUnprocessableEntity, Message: "image could not be decoded"}
		}
		return fakeocr.Behavior{}
	}})
	env := testenv.New(t, testenv.Options{ImageRefs: true, Settings: testenv.OCRSettings(fake, nil)})
	env.Submit(t, id, testenv.Images("/a", 3, testenv.DescribeOn))
	st := env.AwaitStatus(t, id, testenv.IsDone)
	require.Equal(t, "DONE", st.Status, "error: %v", st.Error)
	require.Equal(t, &testenv.OCRCounts{ChunksTotal: 1, ChunksDone: 1, RefsTotal: 3, RefsDone: 2, RefsFailed: 1}, testenv.OCROf(st))
	require.Equal(t, &testenv.DocumentCounts{Total: 2, Completed: 2}, testenv.DocumentsOf(st))
	first := manifestFiles(t, env.AwaitIngest(t, 1)[0].Body)
	require.Zero(t, first["/a/p001.jpg.ref.json"].DocumentID)

	fixed.Store(true)
	code, body := env.DoAuth(t, http.MethodPost, "/admin/retry/"+id, testenv.AdminToken, nil)
	require.Equal(t, http.StatusOK, code, "body: %s", body)
	require.Contains(t, string(body), `"status":"OCR"`)
	st = env.AwaitStatus(t, id, testenv.IsDone)
	require.Equal(t, "DONE", st.Status, "error: %v", st.Error)
	require.Equal(t, &testenv.OCRCounts{ChunksTotal: 2, ChunksDone: 2, RefsTotal: 3, RefsDone: 3}, testenv.OCROf(st))
	require.Equal(t, &testenv.DocumentCounts{Total: 3, Completed: 3}, testenv.DocumentsOf(st))
	testenv.RequireEachAnsweredOnce(t, fake, 3)

	second := manifestFiles(t, env.AwaitIngest(t, 2)[1].Body)
	ref := second["/a/p001.jpg.ref.json"]
	require.Equal(t, "staging/"+id+"/a/p001.jpg.ocr.ref.json", ref.R2Key)
	require.Contains(t, ref.PreprocessorTags, "OCR")
	require.NotZero(t, ref.DocumentID, "the rerun's OCR text is indexed")
	for _, lp := range []string{"/a/p000.jpg.ref.json", "/a/p002.jpg.ref.json"} {
		require.Equal(t, first[lp], second[lp], lp)
	}
	var data string
	require.NoError(t, env.Pool.QueryRow(context.Background(),
		`SELECT data::text FROM batch_events WHERE batch_id = $1 AND type = $2`, id, db.EventBatchResumed).Scan(&data))
	require.JSONEq(t, `{"phase": "OCR", "files": 1, "tasks": {}, "ocr_items": 1, "documents": 0}`, data)
}

// TestRetryDoneBatchLeavesKeptFilesAlone: a DONE batch whose only failure
// is a document (a text file that was not UTF-8, since mended). Its PDF's
// page with a text layer is a ref the OCR phase would find again (it was
// skipped, not OCR'd), but it is kept: the retry goes straight to
// DOCUMENT_INDEXING, makes no OCR chunk and sends the provider nothing.
func TestRetryDoneBatchLeavesKeptFilesAlone(t *testing.T) {
	t.Parallel()
	fake := fakeocr.New(t, fakeocr.Options{})
	env := testenv.New(t, testenv.Options{ImageRefs: true, Settings: testenv.OCRSettings(fake, nil)})
	const id = "RESUME-KEPT"
	env.PutObject(t, "staging/"+id+"/docs/latin1.txt", []byte("caf\xe9 cr\xe8me"))
	env.PutObject(t, "staging/"+id+"/docs/report-p1.txt", []byte("Annual report of the harbour board."))
	env.Submit(t, id, []testenv.File{
		{LogicalPath: "/docs/latin1.txt", Size: 10, ContentType: "text/plain", Config: testenv.DescribeOn},
		{LogicalPath: "/docs/report.pdf", Size: 900, ContentType: "application/pdf", Config: testenv.DescribeOn},
	})
	st := env.AwaitStatus(t, id, testenv.IsDone)
	require.Equal(t, "DONE", st.Status, "error: %v", st.Error)
	require.Equal(t, &testenv.OCRCounts{ChunksTotal: 1, ChunksDone: 1, RefsTotal: 2, RefsDone: 1, RefsSkipped: 1}, testenv.OCROf(st))
	require.Equal(t, &testenv.DocumentCounts{Total: 2, Completed: 1, Failed: 1}, testenv.DocumentsOf(st))
	env.AwaitIngest(t, 1)
	sent := len(fake.Requests())

	env.PutObject(t, "staging/"+id+"/docs/latin1.txt", []byte("café crème"))
	code, body := env.DoAuth(t, http.MethodPost, "/admin/retry/"+id, testenv.AdminToken, nil)
	require.Equal(t, http.StatusOK, code, "body: %s", body)
	require.Contains(t, string(body), `"status":"DOCUMENT_INDEXING"`, "the skipped page is kept: no OCR phase")
	st = env.AwaitStatus(t, id, testenv.IsDone)
	require.Equal(t, "DONE", st.Status, "error: %v", st.Error)
	require.Equal(t, &testenv.OCRCounts{ChunksTotal: 1, ChunksDone: 1, RefsTotal: 2, RefsDone: 1, RefsSkipped: 1}, testenv.OCROf(st))
	require.Equal(t, &testenv.DocumentCounts{Total: 2, Completed: 2}, testenv.DocumentsOf(st))
	require.Len(t, fake.Requests(), sent)
	final := manifestFiles(t, env.AwaitIngest(t, 2)[1].Body)
	require.NotZero(t, final["/docs/latin1.txt"].DocumentID)
}
