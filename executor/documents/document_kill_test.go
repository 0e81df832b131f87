package documents_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/arke-institute/orchestrator/db"
	"github.com/arke-institute/orchestrator/docindex"
	"github.com/arke-institute/orchestrator/internal/fakes/fakeai"
	"github.com/arke-institute/orchestrator/internal/harness/eventually"
	"github.com/arke-institute/orchestrator/internal/harness/testenv"
	"github.com/arke-institute/orchestrator/jobs"
	"github.com/arke-institute/orchestrator/reports"
	"github.com/arke-institute/orchestrator/textchunk"
)

// killDocChunks is how many chunks the kill test's document makes, and
// killHeldBatch the embeddings request held until the kill (from 1): the
// batches before it are committed, that one is in flight.
const (
	killDocChunks = 100
	killHeldBatch = 4
)

// killDocument is a markdown document of killDocChunks sections, each a
// chunk of its own at DOCUMENT_CHUNK_TOKENS 50.
func killDocument() string {
	var b strings.Builder
	for i := range killDocChunks {
		fmt.Fprintf(&b, "## Section %d\n\nParagraph %d tells of harbour number %d, where the keeper lit lamp %d "+
			"each evening and logged ships passing the rocks of the bay.\n\n", i, i, i, i)
	}
	return b.String()
}

// TestDocumentKill9MidEmbeddings takes a 100-chunk document through every
// step in a child process and kills it (SIGKILL) while its fourth
// embeddings request is at the provider, three batches committed. Another
// process resumes the document once River rescues its step job: at the
// embeddings step, with the committed batches never requested again and
// the one in flight requested once more; it completes with one row per
// chunk, and the kill is no failure of the document.
func TestDocumentKill9MidEmbeddings(t *testing.T) {
	if testing.Short() {
		t.Skip("waits for River to rescue a dead process's job: skipped by -short")
	}
	t.Parallel()
	text := killDocument()
	require.Len(t, textchunk.Split(text, textchunk.Options{TargetTokens: 50}), killDocChunks)

	held, killed := make(chan struct{}), make(chan struct{})
	var embeddings atomic.Int32 // requests so far
	fake := fakeai.New(t, fakeai.Options{Behave: func(r fakeai.Request) fakeai.Behavior {
		if r.Route != fakeai.Embeddings {
			return fakeai.Behavior{}
		}
		if embeddings.Add(1) == killHeldBatch {
			close(held)
			<-killed
			return fakeai.Behavior{Hangup: true}
		}
		return fakeai.Behavior{}
	}})
	env := testenv.New(t, testenv.Options{NoWorkers: true, Settings: testenv.RoomyLimits(map[string]string{
		"EMBEDDINGS_API_URL": fake.URL, "EMBEDDINGS_API_KEY": fakeai.DefaultKey,
		"TAGS_API_URL": fake.URL, "TAGS_API_KEY": fakeai.DefaultKey,
		"DOCUMENT_CHUNK_TOKENS": "50",
		// A run's bound, and so how soon a dead process's job is rescued:
		// 1 s + 15 s.
		"DOCUMENT_TIMEOUT_MS": "1000", "OCR_TIMEOUT_MS": "1000",
	})})
	child := env.StartChild(t, "default")

	env.PutObject(t, "documents/harbours.md", []byte(text))
	code, body := env.Do(t, http.MethodPost, "/documents", strings.NewReader(`{"r2_key": "documents/harbours.md"}`))
	require.Equal(t, http.StatusAccepted, code, string(body))
	var doc docindex.Document
	require.NoError(t, json.Unmarshal(body, &doc))
	select {
	case <-held:
	case <-time.After(60 * time.Second):
		t.Fatal("the child never sent its fourth embeddings request")
	}
	require.NoError(t, child.Process.Signal(syscall.SIGKILL))
	_ = child.Wait()
	close(killed)
	killedAt := time.Now()

	// At the kill: in embeddings, the first three batches committed.
	ctx := context.Background()
	var step string
	var processed int
	require.NoError(t, env.Pool.QueryRow(ctx, "SELECT current_step, processed_chunks FROM documents WHERE id = $1", doc.ID).Scan(&step, &processed))
	require.Equal(t, "embeddings", step)
	require.Equal(t, (killHeldBatch-1)*docindex.EmbeddingsBatch, processed)

	// Another process takes over.
	env.StartClient(t, jobs.ClientConfig{})
	doc = awaitDocument(t, env, doc.ID, 3*time.Minute)
	require.Equal(t, db.DocumentCompleted, doc.Status, "%+v", doc.Errors)
	t.Logf("resumed and completed %s after the kill", time.Since(killedAt).Round(time.Second))
	require.Empty(t, doc.Errors, "a killed process is no failure of the document")
	require.EqualValues(t, killDocChunks, doc.Progress.TotalChunks)
	require.EqualValues(t, killDocChunks, doc.Progress.ProcessedChunks)

	// One row per chunk, each embedded and tagged.
	rows, err := env.Pool.Query(ctx, `SELECT chunk_index, heading, text, status, embedding IS NOT NULL, tags IS NOT NULL
		FROM document_chunks WHERE document_id = $1 ORDER BY chunk_index`, doc.ID)
	require.NoError(t, err)
	var inputs []string // each chunk's embeddings input, by index
	for rows.Next() {
		var idx int
		var heading, text, status string
		var embedded, tagged bool
		require.NoError(t, rows.Scan(&idx, &heading, &text, &status, &embedded, &tagged))
		require.Equal(t, len(inputs), idx, "chunk indexes are 0..n-1, once each")
		require.Equal(t, "stored", status)
		require.True(t, embedded && tagged, "chunk %d", idx)
		inputs = append(inputs, heading+"\n\n"+text)
	}
	require.NoError(t, rows.Err())
	require.Len(t, inputs, killDocChunks)

	// Embeddings: the committed batches once, the one in flight twice,
	// the rest once; tags: every batch once, then the document's.
	sent := map[string]int{}
	var embedRequests, chats int
	for _, r := range fake.Requests() {
		switch r.Route {
		case fakeai.Embeddings:
			embedRequests++
			for _, in := range r.Inputs {
				sent[in]++
			}
		case fakeai.Chat:
			chats++
			require.Equal(t, http.StatusOK, r.Status)
		}
	}
	heldFrom, heldTo := (killHeldBatch-1)*docindex.EmbeddingsBatch, killHeldBatch*docindex.EmbeddingsBatch
	for i, in := range inputs {
		want := 1
		if i >= heldFrom && i < heldTo {
			want = 2
		}
		require.Equal(t, want, sent[in], "chunk %d's embeddings requests", i)
	}
	require.Len(t, sent, killDocChunks)
	require.Equal(t, killDocChunks/docindex.EmbeddingsBatch+1, embedRequests)
	require.Equal(t, killDocChunks/docindex.TagsBatch+1, chats)

	// The steps in order, each started after the one before finished.
	// The killed run recorded nothing: embeddings took the child's three
	// runs and this process's eight (seven batches, then the move to tags).
	var timingJSON []byte
	require.NoError(t, env.Pool.QueryRow(ctx, "SELECT step_timing FROM documents WHERE id = $1", doc.ID).Scan(&timingJSON))
	var timing map[string]struct {
		StartedAt   time.Time
		CompletedAt *time.Time
		Runs        int
		WorkMs      float64
	}
	require.NoError(t, json.Unmarshal(timingJSON, &timing))
	var prevEnd time.Time
	for _, st := range []struct {
		step string
		runs int
	}{{"download", 1}, {"embeddings", killDocChunks/docindex.EmbeddingsBatch + 1}, {"tags", killDocChunks/docindex.TagsBatch + 1}, {"store", 1}} {
		tm, ok := timing[st.step]
		require.True(t, ok, st.step)
		require.Equal(t, st.runs, tm.Runs, st.step)
		require.NotNil(t, tm.CompletedAt, st.step)
		require.False(t, tm.StartedAt.Before(prevEnd), "%s started before the step before it finished", st.step)
		require.False(t, tm.CompletedAt.Before(tm.StartedAt), st.step)
		require.Positive(t, tm.WorkMs, st.step)
		prevEnd = *tm.CompletedAt
	}
	require.Len(t, timing, 4)
	require.Greater(t, timing["embeddings"].CompletedAt.Sub(timing["embeddings"].StartedAt), 15*time.Second,
		"embeddings waited for the rescue")

	// The report ranks it first, read from what the runs wrote.
	slowest, err := reports.Run(ctx, env.Pool, "document-slowest-steps", reports.Params{Since: time.Now().Add(-time.Hour), Limit: 1})
	require.NoError(t, err)
	require.Len(t, slowest.Rows, 1)
	require.Equal(t, []any{doc.ID, "embeddings", int64(11)}, []any{slowest.Rows[0][0], slowest.Rows[0][3], slowest.Rows[0][4]})

	// This process's metrics: it ran the steps from the fourth batch on.
	steps := func(step string) float64 {
		return counterValue(t, env.Metrics.Registry(), "orchestrator_document_steps_total", map[string]string{"step": step, "outcome": "done"})
	}
	require.Zero(t, steps("download"))
	require.EqualValues(t, killDocChunks/docindex.EmbeddingsBatch-killHeldBatch+2, steps("embeddings"))
	require.EqualValues(t, killDocChunks/docindex.TagsBatch+1, steps("tags"))
	require.EqualValues(t, 1, steps("store"))

	// River rescued the job the child was running: one attempt error.
	var rescues int
	require.NoError(t, env.Pool.QueryRow(ctx, `SELECT coalesce(array_length(errors, 1), 0) FROM river_job
		WHERE kind = 'document_step' AND (args->>'document_id')::bigint = $1`, doc.ID).Scan(&rescues))
	require.Equal(t, 1, rescues)
}

// awaitDocument polls a document's status until it has ended, within limit.
func awaitDocument(t *testing.T, env *testenv.Env, id int64, limit time.Duration) docindex.Document {
	t.Helper()
	var doc docindex.Document
	var body []byte
	if !eventually.Within(limit, func() bool {
		var code int
		code, body = env.Do(t, http.MethodGet, fmt.Sprintf("/documents/%d", id), nil)
		require.Equal(t, http.StatusOK, code, string(body))
		doc = docindex.Document{}
		require.NoError(t, json.Unmarshal(body, &doc))
		return doc.Status == "completed" || doc.Status == "failed"
	}) {
		t.Fatalf("document %d has not ended within %s: %s", id, limit, body)
	}
	return doc
}

// counterValue is the value of the counter name with labels in reg, 0 if
// it has none.
func counterValue(t *testing.T, reg prometheus.Gatherer, name string, labels map[string]string) float64 {
	t.Helper()
	families, err := reg.Gather()
	require.NoError(t, err)
	for _, f := range families {
		if f.GetName() != name {
			continue
		}
	metrics:
		for _, m := range f.GetMetric() {
			for _, l := range m.GetLabel() {
				if labels[l.GetName()] != l.GetValue() {
					continue metrics
				}
			}
			return m.GetCounter().GetValue()
		}
	}
	return 0
}
