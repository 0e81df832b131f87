package api_test

import (
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/arke-institute/orchestrator/docindex"
	"github.com/arke-institute/orchestrator/internal/harness/eventually"
	"github.com/arke-institute/orchestrator/internal/harness/testenv"
)

// latestVersion is the latest version of key's document, 0 for none.
func latestVersion(t *testing.T, env *testenv.Env, key string) int32 {
	t.Helper()
	code, body := env.Do(t, http.MethodGet, "/documents?r2_key="+url.QueryEscape(key), nil)
	if code == http.StatusNotFound {
		return 0
	}
	require.Equal(t, http.StatusOK, code, string(body))
	var doc docindex.Document
	require.NoError(t, json.Unmarshal(body, &doc))
	return doc.Version
}

// TestDocumentScanQueuesNewObjectsOnce: a scan of DOCUMENTS_PREFIX queues
// the objects of the names it picks up whose key and ETag no document has,
// whether posted or scanned before, once; a changed object makes a new
// version; a run whose time is spent goes on from its cursor.
func TestDocumentScanQueuesNewObjectsOnce(t *testing.T) {
	t.Parallel()
	env := testenv.New(t, testenv.Options{Settings: map[string]string{"DOCUMENTS_SCAN_INTERVAL_MS": "0"}})
	docs := docindex.NewDocuments(env.Pool, env.River, env.Store, env.Bucket, "documents/", slog.New(slog.DiscardHandler))
	suffixes := docindex.ScanSuffixes(" .MD, .txt ,,")
	require.Equal(t, []string{".md", ".txt"}, suffixes)

	env.PutObject(t, "documents/a.md", []byte("# Lighthouses\n\nThe keeper lit the lamp."))
	env.PutObject(t, "documents/b.txt", []byte("Bees make honey in hives."))
	env.PutObject(t, "documents/c.jpg", []byte("not a document"))
	env.PutObject(t, "elsewhere/d.md", []byte("# Outside the prefix"))
	code, posted := postDocument(t, env, "documents/b.txt")
	require.Equal(t, http.StatusAccepted, code)

	res, err := docs.Scan(t.Context(), suffixes, 0)
	require.NoError(t, err)
	require.Equal(t, docindex.ScanResult{Listed: 3, Queued: 1}, res, "a.md only; the budget spent after the first page")
	res, err = docs.Scan(t.Context(), suffixes, time.Minute)
	require.NoError(t, err)
	require.Equal(t, docindex.ScanResult{Ended: true}, res, "on from the cursor: nothing after it, the pass ends")
	require.Equal(t, int32(1), latestVersion(t, env, "documents/a.md"))
	require.Equal(t, posted.Version, latestVersion(t, env, "documents/b.txt"), "posted with the same ETag: not queued again")
	require.Zero(t, latestVersion(t, env, "documents/c.jpg"))

	res, err = docs.Scan(t.Context(), suffixes, time.Minute)
	require.NoError(t, err)
	require.Equal(t, docindex.ScanResult{Listed: 3, Ended: true}, res, "a second pass queues nothing")

	var first int64
	require.NoError(t, env.Pool.QueryRow(t.Context(), `SELECT id FROM documents WHERE r2_key = 'documents/a.md'`).Scan(&first))
	awaitDocument(t, env, first, ended) // a version under way is answered as it is
	env.PutObject(t, "documents/a.md", []byte("# Lighthouses\n\nThe keeper lit the lamp at dusk."))
	res, err = docs.Scan(t.Context(), suffixes, time.Minute)
	require.NoError(t, err)
	require.Equal(t, docindex.ScanResult{Listed: 3, Queued: 1, Ended: true}, res, "changed content")
	require.Equal(t, int32(2), latestVersion(t, env, "documents/a.md"))

	var passes, queued int64
	var after string
	require.NoError(t, env.Pool.QueryRow(t.Context(), `SELECT passes, queued, after FROM document_scans WHERE prefix = 'documents/'`).Scan(&passes, &queued, &after))
	require.Equal(t, []any{int64(3), int64(2), ""}, []any{passes, queued, after})
}

// TestDocumentScanRunsByItself: with DOCUMENTS_SCAN_INTERVAL_MS set, an
// object uploaded under the prefix is indexed without being posted.
func TestDocumentScanRunsByItself(t *testing.T) {
	t.Parallel()
	env := testenv.New(t, testenv.Options{Settings: map[string]string{"DOCUMENTS_SCAN_INTERVAL_MS": "1000"}})
	key := fmt.Sprintf("documents/%s.md", t.Name())
	env.PutObject(t, key, []byte("# Harbours\n\nShips came into the harbour at dawn."))
	var id int64
	require.True(t, eventually.Within(30*time.Second, func() bool {
		return env.Pool.QueryRow(t.Context(), `SELECT id FROM documents WHERE r2_key = $1`, key).Scan(&id) == nil
	}), "the scan never queued %s", key)
	doc := awaitDocument(t, env, id, ended)
	require.Equal(t, "completed", string(doc.Status), "%+v", doc.Errors)
}
