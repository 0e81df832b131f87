package documents_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/arke-institute/orchestrator/cost"
	"github.com/arke-institute/orchestrator/db"
	"github.com/arke-institute/orchestrator/internal/fakes/fakeai"
	"github.com/arke-institute/orchestrator/internal/fakes/fakeocr"
	"github.com/arke-institute/orchestrator/internal/harness/eventually"
	"github.com/arke-institute/orchestrator/internal/harness/testenv"
	"github.com/arke-institute/orchestrator/jobs"
	"github.com/arke-institute/orchestrator/manifest"
	"github.com/arke-institute/orchestrator/phases"
	"github.com/arke-institute/orchestrator/status"
	"github.com/arke-institute/orchestrator/textchunk"
)

// documentChunksText is the text of a document's chunks, in order.
func documentChunksText(t *testing.T, env *testenv.Env, id int64) string {
	t.Helper()
	rows, err := db.New(env.Pool).DocumentChunkTags(context.Background(), id)
	require.NoError(t, err)
	var b strings.Builder
	for _, r := range rows {
		b.WriteString(r.Text)
		b.WriteString("\n")
	}
	return b.String()
}

// TestDocumentIndexingPhase runs a batch whose directory asks for a
// description through every phase: its .md and .txt files, its PDF (a
// page with a text layer, a scanned page OCR'd) and its OCR'd photo
// become documents; a text file that is not UTF-8 fails its document and
// passes through without document fields; a directory without describe
// makes none. The final manifest's entries carry document_id and
// document_tags beside preprocessor_tags.
func TestDocumentIndexingPhase(t *testing.T) {
	t.Parallel()
	fake := fakeocr.New(t, fakeocr.Options{})
	env := testenv.New(t, testenv.Options{ImageRefs: true, Settings: testenv.OCRSettings(fake, nil)})
	const id = "DOCS-E2E"
	put := func(lp, text string) { env.PutObject(t, "staging/"+id+lp, []byte(text)) }
	put("/docs/guide.md", "# Harbour guide\n\nThe lighthouse keeper logs every ship entering the harbour.\n")
	put("/docs/notes.txt", "Minutes of the parish council: the bridge repairs are approved.\n")
	put("/docs/latin1.txt", "caf\xe9 cr\xe8me")
	// The PDF worker's fake result: page 1 has a text layer, page 2 is a
	// scan (phases' SampleResult); its text file is the worker's upload.
	put("/docs/report-p1.txt", "Annual report of the harbour board.")
	put("/plain/other.txt", "not described")
	files := []testenv.File{
		{LogicalPath: "/docs/guide.md", Size: 80, ContentType: "text/markdown", Config: testenv.DescribeOn},
		{LogicalPath: "/docs/notes.txt", Size: 70, ContentType: "text/plain", Config: testenv.DescribeOn},
		{LogicalPath: "/docs/latin1.txt", Size: 10, ContentType: "text/plain", Config: testenv.DescribeOn},
		{LogicalPath: "/docs/report.pdf", Size: 900, ContentType: "application/pdf", Config: testenv.DescribeOn},
		{LogicalPath: "/docs/photo.jpg", Size: 100, ContentType: "image/jpeg", Config: testenv.DescribeOn},
		{LogicalPath: "/plain/other.txt", Size: 13, ContentType: "text/plain"},
	}
	env.Submit(t, id, files)

	st := env.AwaitStatus(t, id, testenv.IsDone)
	require.Equal(t, "DONE", st.Status, "error: %v", st.Error)
	require.Equal(t, &testenv.DocumentCounts{Total: 5, Completed: 4, Failed: 1}, testenv.DocumentsOf(st))
	// The local embedder and tagger answer requests that report no
	// tokens, and cost nothing; the batch's machine phases ran attempts.
	roles := map[string]int64{}
	for _, p := range st.Cost.Phases {
		for _, l := range p.Lines {
			if p.Phase == string(phases.DocumentIndexing) {
				require.Equal(t, cost.KindProvider, l.Kind)
				require.Zero(t, l.PromptTokens+l.CompletionTokens)
				require.Equal(t, 0.0, *l.EstimatedUSD)
				roles[l.Role] += l.Requests
			}
		}
	}
	require.Positive(t, roles["embeddings"])
	require.Positive(t, roles["tags"])
	require.Positive(t, st.Cost.MachineSeconds)

	final := env.Delivered(t)
	for _, lp := range []string{"/docs/guide.md", "/docs/notes.txt", "/docs/report.pdf", "/docs/photo.jpg.ref.json"} {
		f := final[lp]
		require.NotZero(t, f.DocumentID, lp)
		require.NotNil(t, f.DocumentTags, lp)
		require.NotNil(t, f.PreprocessorTags, lp)
	}
	for _, lp := range []string{"/docs/latin1.txt", "/docs/report-p1.txt", "/docs/report-p2.jpg.ref.json", "/plain/other.txt"} {
		require.Zero(t, final[lp].DocumentID, lp)
		require.Nil(t, final[lp].DocumentTags, lp)
	}
	require.Contains(t, final["/docs/guide.md"].DocumentTags, "lighthouse")

	// The documents: their keys are the files', they name the batch and
	// the file, and the PDF's is its pages' text with page markers.
	q := db.New(env.Pool)
	pdf, err := q.DocumentGet(context.Background(), final["/docs/report.pdf"].DocumentID)
	require.NoError(t, err)
	require.Equal(t, db.DocumentCompleted, pdf.Status)
	require.Equal(t, final["/docs/report.pdf"].R2Key, pdf.R2Key)
	require.Equal(t, id, *pdf.BatchID)
	text := documentChunksText(t, env, pdf.ID)
	page2 := env.ReadRef(t, final["/docs/report-p2.jpg.ref.json"].R2Key)
	require.NotNil(t, page2.OCR)
	// Chunking leaves the page markers out (it reads them as the chunks'
	// pages): page 1's text layer, then page 2's OCR text.
	require.Equal(t, "Annual report of the harbour board.\n\n"+page2.OCR.Text+"\n", text)
	require.NotContains(t, text, textchunk.PageMarker(1))
	photo, err := q.DocumentGet(context.Background(), final["/docs/photo.jpg.ref.json"].DocumentID)
	require.NoError(t, err)
	require.Contains(t, documentChunksText(t, env, photo.ID), env.ReadRef(t, photo.R2Key).OCR.Text)

	var failed db.Document
	docs, err := q.DocumentList(context.Background(), 100)
	require.NoError(t, err)
	for _, d := range docs {
		if strings.HasSuffix(d.R2Key, "/latin1.txt") {
			failed = d
		}
		require.NotContains(t, d.R2Key, "/plain/", "describe off: no document")
	}
	require.Equal(t, db.DocumentFailed, failed.Status)
	require.Contains(t, string(failed.Errors), "not UTF-8")
	require.Equal(t, "permanent", *failed.Failure, "the file's own fault")
	require.Equal(t, int64(0), st.Failures.Infrastructure)
	require.Positive(t, st.Failures.Permanent)

	// A batch's documents time their steps as any other: the PDF's each
	// finished, the failed one's download ran once, unfinished.
	type timing map[string]struct {
		CompletedAt *time.Time
		Runs        int
	}
	var pdfTiming, failedTiming timing
	require.NoError(t, json.Unmarshal(pdf.StepTiming, &pdfTiming))
	for _, step := range []string{"download", "embeddings", "tags", "store"} {
		require.NotNil(t, pdfTiming[step].CompletedAt, step)
		require.Positive(t, pdfTiming[step].Runs, step)
	}
	require.NoError(t, json.Unmarshal(failed.StepTiming, &failedTiming))
	require.Equal(t, 1, failedTiming["download"].Runs)
	require.Nil(t, failedTiming["download"].CompletedAt)
}

// TestDocumentIndexingOff: a batch with describe off anywhere never
// enters DOCUMENT_INDEXING and makes no document.
func TestDocumentIndexingOff(t *testing.T) {
	t.Parallel()
	env := testenv.New(t, testenv.Options{})
	const id = "DOCS-OFF"
	env.PutObject(t, "staging/"+id+"/a.txt", []byte("text"))
	env.Submit(t, id, []testenv.File{{LogicalPath: "/a.txt", Size: 4, ContentType: "text/plain", Config: manifest.ProcessingConfig{OCR: true, Pinax: true}}})
	st := env.AwaitStatus(t, id, testenv.IsDone)
	require.Equal(t, "DONE", st.Status, "error: %v", st.Error)
	require.Nil(t, testenv.DocumentsOf(st))
	var n int
	require.NoError(t, env.Pool.QueryRow(context.Background(), `SELECT count(*) FROM documents WHERE batch_id = $1`, id).Scan(&n))
	require.Zero(t, n)
	body := string(env.AwaitIngest(t, 1)[0].Body)
	require.NotContains(t, body, "document_id")
	require.NotContains(t, body, "document_tags")
}

// TestLastDocumentDuringCheck is TestLastCallbackDuringCheck for a
// documents phase: a check has counted exactly one document running and
// is still running when that last document ends (its embeddings held
// until then). Guarded, the document's end waits for the check's lock and
// then enqueues a check that finishes the batch; unguarded, its check is
// swallowed by the running one and the batch hangs, which shows that the
// lock is what keeps the wake-up.
func TestLastDocumentDuringCheck(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name  string
		guard bool
	}{{"Guarded", true}, {"Unguarded", false}} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			const id = "DOCS-LAST"
			gate := make(chan struct{})
			var gateOnce sync.Once
			open := func() { gateOnce.Do(func() { close(gate) }) }
			t.Cleanup(open)
			fake := fakeai.New(t, fakeai.Options{Behave: func(r fakeai.Request) fakeai.Behavior {
				if r.Route == fakeai.Embeddings && strings.Contains(strings.Join(r.Inputs, " "), "last") {
					<-gate
				}
				return fakeai.Behavior{}
			}})
			hold, counted, release := testenv.HoldCheck(id, 1, 30*time.Second)
			env := testenv.New(t, testenv.Options{
				NoSweep:  true,
				Settings: testenv.RoomyLimits(map[string]string{"EMBEDDINGS_API_URL": fake.URL, "EMBEDDINGS_API_KEY": fakeai.DefaultKey}),
				Hooks:    &jobs.TestHooks{NoFanInGuard: !tc.guard, AfterOpenCount: hold},
			})
			var once sync.Once
			free := func() { once.Do(func() { close(release) }) }
			t.Cleanup(free)
			ctx := t.Context()
			env.PutObject(t, "staging/"+id+"/first.txt", []byte("the first document"))
			env.PutObject(t, "staging/"+id+"/last.txt", []byte("the last document"))
			env.Submit(t, id, []testenv.File{
				{LogicalPath: "/first.txt", Size: 18, ContentType: "text/plain", Config: testenv.DescribeOn},
				{LogicalPath: "/last.txt", Size: 17, ContentType: "text/plain", Config: testenv.DescribeOn},
			})
			select {
			case <-counted: // the first document ended; its check counts the last one running
			case <-time.After(30 * time.Second):
				t.Fatal("no check counted the last running document")
			}
			open() // the last document goes on to its end
			lastDone := func() bool {
				var status string
				require.NoError(t, env.Pool.QueryRow(ctx, `SELECT status FROM documents WHERE r2_key = $1`, "staging/"+id+"/last.txt").Scan(&status))
				return status == "completed"
			}
			ended := false
			eventually.True(t, 30*time.Second, "the last document to end or to wait for the batch's lock", func() bool {
				ended = lastDone()
				return ended || env.BatchLockAwaited(t, id)
			})
			require.Equal(t, !tc.guard, ended, "guarded, the last document waits for the running check")
			free()

			if tc.guard {
				st := env.AwaitStatus(t, id, testenv.IsDone)
				require.Equal(t, "DONE", st.Status, "error: %v", st.Error)
				require.Equal(t, &testenv.DocumentCounts{Total: 2, Completed: 2}, testenv.DocumentsOf(st))
				return
			}
			var checks, unfinished int
			eventually.True(t, 30*time.Second, "the held check to finish", func() bool {
				require.NoError(t, env.Pool.QueryRow(ctx, `SELECT count(*), count(*) FILTER (WHERE state NOT IN ('completed', 'cancelled', 'discarded'))
					FROM river_job WHERE kind = 'phase_check' AND args->>'batch_id' = $1`, id).Scan(&checks, &unfinished))
				return unfinished == 0
			})
			require.Equal(t, 1, checks, "the last document's check was not swallowed")
			st := env.Status(t, id)
			require.Equal(t, "DOCUMENT_INDEXING", st.Status, "the phase moved on without the guard")
			require.Equal(t, &testenv.DocumentCounts{Total: 2, Completed: 2}, testenv.DocumentsOf(st))
		})
	}
}

// TestDocumentInfraFailuresRetried: a document whose provider stayed down
// past TRANSIENT_RETRY_WINDOW fails for infrastructure reasons, one that
// is not UTF-8 for good; the status tells them apart, and a retry with
// mode=infrastructure resumes only the former, which completes once the
// provider is back.
func TestDocumentInfraFailuresRetried(t *testing.T) {
	t.Parallel()
	var down atomic.Bool
	down.Store(true)
	fake := fakeai.New(t, fakeai.Options{Behave: func(r fakeai.Request) fakeai.Behavior {
		if r.Route == fakeai.Embeddings && len(r.Inputs) > 0 && strings.Contains(r.Inputs[0], "outage") && down.Load() {
			return fakeai.Behavior{Status: http.StatusServiceUnavailable}
		}
		return fakeai.Behavior{}
	}})
	env := testenv.New(t, testenv.Options{Settings: map[string]string{
		"EMBEDDINGS_API_URL": fake.URL, "EMBEDDINGS_API_KEY": fakeai.DefaultKey,
		"TAGS_API_URL": fake.URL, "TAGS_API_KEY": fakeai.DefaultKey,
		"TRANSIENT_RETRY_WINDOW": "1", // the three retries spec 003 grants, no more
	}})
	const id = "DOCS-INFRA"
	env.PutObject(t, "staging/"+id+"/docs/outage.md", []byte("# Outage\n\nThe outage document talks about lighthouses.\n"))
	env.PutObject(t, "staging/"+id+"/docs/latin1.txt", []byte("caf\xe9 cr\xe8me"))
	env.Submit(t, id, []testenv.File{
		{LogicalPath: "/docs/outage.md", Size: 50, ContentType: "text/markdown", Config: testenv.DescribeOn},
		{LogicalPath: "/docs/latin1.txt", Size: 10, ContentType: "text/plain", Config: testenv.DescribeOn},
	})
	st := env.AwaitStatus(t, id, testenv.IsDone)
	require.Equal(t, "DONE", st.Status, "error: %v", st.Error)
	require.Equal(t, status.Failures{Permanent: 1, Infrastructure: 1}, st.Failures)
	p, ok := testenv.PhaseOf(st, phases.DocumentIndexing)
	require.True(t, ok)
	require.Equal(t, int64(1), p.TasksFailedInfrastructure)

	down.Store(false)
	code, body := env.DoAuth(t, http.MethodPost, "/admin/retry/"+id+"?mode=infrastructure", testenv.AdminToken, nil)
	require.Equal(t, http.StatusOK, code, string(body))
	st = env.AwaitStatus(t, id, func(s status.Status) bool { return testenv.IsDone(s) && s.Failures.Infrastructure == 0 })
	require.Equal(t, "DONE", st.Status, "error: %v", st.Error)
	require.Equal(t, status.Failures{Permanent: 1}, st.Failures, "the bad file was not tried again")
	docs, err := db.New(env.Pool).DocumentList(context.Background(), 10)
	require.NoError(t, err)
	got := map[string]string{}
	for _, d := range docs {
		got[d.R2Key[strings.LastIndex(d.R2Key, "/")+1:]] = fmt.Sprintf("%s, resumed %d", d.Status, d.Resumes)
	}
	require.Equal(t, map[string]string{"outage.md": "completed, resumed 1", "latin1.txt": "failed, resumed 0"}, got)
}
