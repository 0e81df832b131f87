package chunked_test

import (
	"net/http"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/arke-institute/orchestrator/internal/fakes/fakeocr"
	"github.com/arke-institute/orchestrator/internal/harness/testenv"
	"github.com/arke-institute/orchestrator/jobs"
)

// TestOCRKill9MidChunk kills (SIGKILL) the only process working a chunk
// while two of its items are at the provider. Another process picks the
// chunk up once River rescues its job: the items whose outcome was
// committed before the kill are never sent again, the two in flight are,
// and the batch finishes with every ref transcribed.
func TestOCRKill9MidChunk(t *testing.T) {
	if testing.Short() {
		t.Skip("waits for River to rescue a dead process's job: skipped by -short")
	}
	t.Parallel()
	const id = "OCR-KILL9"
	var (
		mu       sync.Mutex
		requests []string // texts, in order of arrival
		inFlight = make(chan struct{}, 2)
		killed   = make(chan struct{})
	)
	fake := fakeocr.New(t, fakeocr.Options{Behave: func(r fakeocr.Request) fakeocr.Behavior {
		mu.Lock()
		requests = append(requests, r.Text)
		n := len(requests)
		mu.Unlock()
		if n == 3 || n == 4 { // the second run's items: hold them until the child is dead
			inFlight <- struct{}{}
			<-killed
			return fakeocr.Behavior{Hangup: true}
		}
		return fakeocr.Behavior{}
	}})
	settings := testenv.OCRSettings(fake, map[string]string{"MAX_CONCURRENT_PER_ALARM": "2", "OCR_TIMEOUT_MS": "1000", "ALARM_INTERVAL_MS": "50"})
	// The test's own process works every queue but "ocr" until the kill.
	env := testenv.New(t, testenv.Options{ImageRefs: true, Settings: settings, Queues: []string{"default", jobs.BuildQueue}})

	child := env.StartChild(t, "ocr")

	env.Submit(t, id, testenv.Images("/a", 6, testenv.OCROn))
	for range 2 {
		select {
		case <-inFlight:
		case <-time.After(60 * time.Second):
			t.Fatal("the child never sent its second run's items")
		}
	}
	require.NoError(t, child.Process.Signal(syscall.SIGKILL))
	_ = child.Wait()
	close(killed)
	mu.Lock()
	committed := append([]string(nil), requests[:2]...) // the first run's items, settled before the second run began
	inFlightTexts := append([]string(nil), requests[2:4]...)
	mu.Unlock()

	// Another process takes the "ocr" queue over.
	env.StartClient(t, jobs.ClientConfig{Queues: []string{"ocr"}})
	st := env.AwaitStatusWithin(t, id, 3*time.Minute, testenv.IsDone)
	require.Equal(t, "DONE", st.Status, "error: %v", st.Error)
	require.Equal(t, &testenv.OCRCounts{ChunksTotal: 1, ChunksDone: 1, RefsTotal: 6, RefsDone: 6}, testenv.OCROf(st))

	mu.Lock()
	defer mu.Unlock()
	count := map[string]int{}
	for _, text := range requests {
		count[text]++
	}
	for _, text := range committed {
		require.Equal(t, 1, count[text], "an item committed before the kill was sent again")
	}
	for _, text := range inFlightTexts {
		require.Equal(t, 2, count[text], "an item in flight at the kill is sent again, once")
	}
	require.Len(t, count, 6)
	ok := 0
	for _, r := range fake.Requests() {
		if r.Status == http.StatusOK {
			ok++
		}
	}
	require.Equal(t, 6, ok)
}

// TestMain runs the test binary as a child orchestrator when a test
// starts it so (testenv.Env.StartChild).
func TestMain(m *testing.M) { testenv.Main(m) }
