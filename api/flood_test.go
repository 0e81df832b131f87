package api_test

import (
	"bytes"
	"crypto/rand"
	"encoding/base64"
	"fmt"
	"io"
	"net/http"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/arke-institute/orchestrator/internal/fakes/fakefly"
	"github.com/arke-institute/orchestrator/internal/harness/testenv"
	"github.com/arke-institute/orchestrator/status"
)

// TestForgedCallbackFlood: forged callbacks at full speed, each with a body
// of 64 KiB, while a batch runs. Each is refused (401) on its token alone,
// so none takes a place in the commit queue (CALLBACK_QUEUE_MAX 4, which
// the workers' own two at a time never fill): every real callback commits
// at its first post and the batch ends DONE, and the process's heap stays
// bounded.
//
// Not parallel: the flood takes the CPU, which would starve the package's
// other tests of the time they await launches in.
func TestForgedCallbackFlood(t *testing.T) {
	env := testenv.New(t, testenv.Options{Settings: map[string]string{"CALLBACK_QUEUE_MAX": "4", "CALLBACK_COMMITTERS": "1"},
		FlyOptions: fakefly.Options{Workers: 2}})
	const id = "FLOOD"

	var baseline, peak runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&baseline)
	stop := make(chan struct{})
	var forged, refused atomic.Int64
	var others sync.Map // answers other than 401: status -> a body
	var wg sync.WaitGroup
	body := []byte(`{"status":"error","error":"FORGED ` + strings.Repeat("x", 64<<10) + `"}`)
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 8}}
	for g := range 8 {
		wg.Go(func() {
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				req, err := http.NewRequest(http.MethodPost, fmt.Sprintf("%s/callback/%s/tiff_t%03d", env.Server.URL, id, (g*7+i)%30),
					bytes.NewReader(body))
				require.NoError(t, err)
				req.Header.Set("Content-Type", "application/json")
				req.Header.Set("Authorization", "Bearer "+forgedToken())
				resp, err := client.Do(req)
				if err != nil {
					continue // the server may close a connection whose body it did not read
				}
				answer, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				forged.Add(1)
				if resp.StatusCode == http.StatusUnauthorized {
					refused.Add(1)
				} else {
					others.Store(resp.StatusCode, string(answer))
				}
			}
		})
	}
	wg.Go(func() {
		tick := time.NewTicker(5 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-stop:
				return
			case <-tick.C:
				var m runtime.MemStats
				runtime.ReadMemStats(&m)
				if m.HeapAlloc > peak.HeapAlloc {
					peak = m
				}
			}
		}
	})

	files := make([]testenv.File, 30)
	for i := range files {
		files[i] = testenv.File{LogicalPath: fmt.Sprintf("/scans/s%02d.tif", i), Size: 100, ContentType: "image/tiff"}
	}
	env.Submit(t, id, files)
	st := env.AwaitStatusWithin(t, id, 90*time.Second, func(s status.Status) bool { return s.Status == "DONE" || s.Status == "ERROR" })
	close(stop)
	wg.Wait()

	require.Equal(t, "DONE", st.Status)
	others.Range(func(code, answer any) bool {
		t.Errorf("a forged callback was answered %d: %s", code, answer)
		return true
	})
	require.Equal(t, forged.Load(), refused.Load())
	require.Greater(t, forged.Load(), int64(200), "a flood")
	workers := env.Fly.Callbacks()
	require.NotEmpty(t, workers)
	for _, cb := range workers {
		require.Equal(t, http.StatusOK, cb.Status, "%s: %s", cb.TaskID, cb.Err)
		require.Equal(t, 1, cb.Attempts, "%s was answered 503 (a full queue) before it committed", cb.TaskID)
	}
	grown := int64(peak.HeapAlloc) - int64(baseline.HeapAlloc)
	require.Less(t, grown, int64(256<<20), "the heap grew by %d MiB", grown>>20)
	t.Logf("%d forged callbacks refused; heap grew by at most %d MiB", forged.Load(), grown>>20)
}

// forgedToken is a token of the orchestrator's shape that it did not seal.
func forgedToken() string {
	b := make([]byte, 48)
	_, _ = rand.Read(b)
	s := base64.RawURLEncoding.EncodeToString(b)
	return s[:43] + "." + s[43:]
}
