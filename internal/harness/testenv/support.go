package testenv

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/arke-institute/orchestrator/internal/fakes/fakefly"
	"github.com/arke-institute/orchestrator/internal/fakes/fakeocr"
	"github.com/arke-institute/orchestrator/internal/fakes/ocrfixture"
	"github.com/arke-institute/orchestrator/internal/harness/eventually"
	"github.com/arke-institute/orchestrator/jobs"
	"github.com/arke-institute/orchestrator/manifest"
	"github.com/stretchr/testify/require"
)

// RoomyLimits is settings with every role's limiter (OCR's, EMBEDDINGS_,
// TAGS_) roomy enough for tests: a fake's capacity, when it has one, is
// what pushes back.
func RoomyLimits(settings map[string]string) map[string]string {
	out := maps.Clone(settings)
	for _, role := range []string{"", "EMBEDDINGS_", "TAGS_"} {
		out[role+"INITIAL_REFILL_RATE"], out[role+"INITIAL_MAX_TOKENS"] = "100", "50"
		out[role+"MAX_MAX_TOKENS"], out[role+"MAX_REFILL_RATE"] = "100", "200"
	}
	return out
}

// OCRSettings point the OCR phase at fake, with a limiter roomy enough
// for tests (fake's capacity, when it has one, is what pushes back) and
// short alarms.
func OCRSettings(fake *fakeocr.Server, more map[string]string) map[string]string {
	s := map[string]string{
		"OCR_API_URL": fake.URL, "OCR_API_KEY": fake.Key, "ALARM_INTERVAL_MS": "20", "OCR_TIMEOUT_MS": "5000",
		"INITIAL_MAX_TOKENS": "20", "INITIAL_REFILL_RATE": "50", "MAX_MAX_TOKENS": "40", "MAX_REFILL_RATE": "200",
	}
	for k, v := range more {
		s[k] = v
	}
	return s
}

// DescribeOn is a manifest directory's processing with OCR and
// description on.
var DescribeOn = manifest.ProcessingConfig{OCR: true, Describe: true, Pinax: true}

// OCROn is a manifest directory's processing with OCR on.
var OCROn = manifest.ProcessingConfig{OCR: true, Pinax: true}

// Images are n JPEGs under dir, OCR on or off.
func Images(dir string, n int, cfg manifest.ProcessingConfig) []File {
	out := make([]File, n)
	for i := range out {
		out[i] = File{LogicalPath: fmt.Sprintf("%s/p%03d.jpg", dir, i), Size: 100, ContentType: "image/jpeg", Config: cfg}
	}
	return out
}

// VariantText is what the fake provider reads in image key's medium
// variant, which the chunk sends.
func VariantText(key string) string {
	return fakeocr.TextFor(ocrfixture.PageImage(key))
}

// Delivered is the final manifest's files by logical path, once ingest
// has it.
func (e *Env) Delivered(t *testing.T) map[string]manifest.FileInfo {
	t.Helper()
	var m jobs.ProcessedManifest
	require.NoError(t, json.Unmarshal(e.AwaitIngest(t, 1)[0].Body, &m))
	out := map[string]manifest.FileInfo{}
	for _, d := range m.Manifest.Directories {
		for _, f := range d.Files {
			out[f.LogicalPath] = f
		}
	}
	return out
}

// RequireEachAnsweredOnce requires that fake answered 200 for n distinct
// images, each once: no ref was sent again after its text came back.
func RequireEachAnsweredOnce(t *testing.T, fake *fakeocr.Server, n int) {
	t.Helper()
	ok := map[string]int{}
	for _, r := range fake.Requests() {
		if r.Status == http.StatusOK {
			ok[r.Text]++
		}
	}
	require.Len(t, ok, n)
	for text, count := range ok {
		require.Equal(t, 1, count, "sent again after its result was committed: %q", text)
	}
}

// PublishedRef is the ref a done item published, with its OCR record.
type PublishedRef struct {
	Variants map[string]string `json:"variants"`
	OCR      *struct {
		Text, Model, Provider, At string
	} `json:"ocr"`
}

// ReadRef reads the ref at key from the test's bucket.
func (e *Env) ReadRef(t *testing.T, key string) PublishedRef {
	t.Helper()
	b, err := e.Store.Get(context.Background(), e.Bucket, key)
	require.NoError(t, err)
	var r PublishedRef
	require.NoError(t, json.Unmarshal(b, &r))
	return r
}

// AwaitIngest waits until the fake ingest service has n successful
// calls, and returns them.
func (e *Env) AwaitIngest(t *testing.T, n int) []IngestCall {
	t.Helper()
	var ok []IngestCall
	eventually.True(t, 30*time.Second, fmt.Sprintf("%d successful calls to ingest", n), func() bool {
		ok = ok[:0]
		for _, c := range e.Ingest.Calls() {
			if c.Status/100 == 2 {
				ok = append(ok, c)
			}
		}
		return len(ok) >= n
	})
	return ok
}

// BatchLockAwaited tells whether a transaction waits for a fan-in lock of
// the batch in the Env's database.
func (e *Env) BatchLockAwaited(t *testing.T, batchID string) bool {
	t.Helper()
	var waits bool
	require.NoError(t, e.Pool.QueryRow(t.Context(), `SELECT EXISTS (
		SELECT 1 FROM pg_locks l JOIN pg_database d ON d.oid = l.database
		WHERE d.datname = current_database() AND l.locktype = 'advisory' AND NOT l.granted
		  AND (l.classid::bigint << 32 | l.objid::bigint) = batch_lock_key($1))`, batchID).Scan(&waits))
	return waits
}

// Hang makes every machine run until the test ends it: the test posts the
// callbacks.
func Hang(fakefly.Launch) fakefly.Behavior { return fakefly.Behavior{Hang: true} }

// HoldCheck returns a check hook that, the first time a check of batchID
// counts open tasks open, closes counted and holds that check until release
// is closed (or wait passes).
func HoldCheck(batchID string, open int64, wait time.Duration) (hook func(string, int64), counted, release chan struct{}) {
	counted, release = make(chan struct{}), make(chan struct{})
	var once sync.Once
	hook = func(b string, n int64) {
		if b != batchID || n != open {
			return
		}
		once.Do(func() {
			close(counted)
			select {
			case <-release:
			case <-time.After(wait):
			}
		})
	}
	return hook, counted, release
}
