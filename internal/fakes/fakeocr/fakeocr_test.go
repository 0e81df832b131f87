package fakeocr_test

import (
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/arke-institute/orchestrator/internal/fakes/fakeocr"
	"github.com/arke-institute/orchestrator/ocr"
)

// A tiny PNG signature is enough: the fake does not decode images.
var png = []byte("\x89PNG\r\n\x1a\n fake page")

func engine(t *testing.T, fake *fakeocr.Server) *ocr.OpenAI {
	t.Helper()
	e, err := ocr.NewOpenAI(ocr.OpenAIConfig{URL: fake.URL, APIKey: fake.Key})
	require.NoError(t, err)
	return e
}

// clock is a test's hand-moved time for the fake's bucket.
type clock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *clock) advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

// TestCapacityIsATokenBucket: with the clock stopped, the burst passes and
// the rest are refused; as the clock moves on, the bucket refills at the
// rate, never past the burst.
func TestCapacityIsATokenBucket(t *testing.T) {
	t.Parallel()
	clk := &clock{now: time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)}
	fake := fakeocr.New(t, fakeocr.Options{Rate: 20, Burst: 5, Now: clk.Now})
	e := engine(t, fake)
	// transcribe makes n calls one after another and counts those that
	// passed, requiring the others to be refused for capacity.
	transcribe := func(n int) int {
		passed := 0
		for range n {
			_, err := e.Transcribe(t.Context(), ocr.Image{Data: png})
			if err == nil {
				passed++
				continue
			}
			require.Equal(t, ocr.RateLimited, ocr.ClassOf(err), "%v", err)
		}
		return passed
	}

	var wg sync.WaitGroup
	for range 10 {
		wg.Go(func() { _, _ = e.Transcribe(t.Context(), ocr.Image{Data: png}) })
	}
	wg.Wait()
	c := fake.Counts()
	require.Equal(t, 10, c.Requests)
	require.Equal(t, 5, c.OK, "the burst passes")
	require.Equal(t, 5, c.RateLimited)
	require.Equal(t, c.RateLimited, c.ByStatus[http.StatusTooManyRequests])

	clk.advance(100 * time.Millisecond)
	require.Equal(t, 2, transcribe(3), "20/s refills 2 tokens in 100 ms")
	clk.advance(time.Second)
	require.Equal(t, 5, transcribe(7), "a second refills the bucket up to its burst, no further")
}

func TestBehaveSeesTheDecodedRequest(t *testing.T) {
	t.Parallel()
	fake := fakeocr.New(t, fakeocr.Options{
		ImageLimit: 1,
		Behave: func(r fakeocr.Request) fakeocr.Behavior {
			if r.N == 2 {
				return fakeocr.Behavior{Status: http.StatusInternalServerError}
			}
			return fakeocr.Behavior{}
		},
	})
	e := engine(t, fake)
	other := append([]byte(nil), png...)
	other = append(other, '2')

	res, err := e.Transcribe(t.Context(), ocr.Image{Data: png})
	require.NoError(t, err)
	require.Equal(t, fakeocr.TextFor(png), res.Text)
	_, err = e.Transcribe(t.Context(), ocr.Image{Data: other})
	require.Equal(t, ocr.Transient, ocr.ClassOf(err))
	res, err = e.Transcribe(t.Context(), ocr.Image{Data: other})
	require.NoError(t, err)
	require.Equal(t, fakeocr.TextFor(other), res.Text)
	require.NotEqual(t, fakeocr.TextFor(png), fakeocr.TextFor(other))

	reqs := fake.Requests()
	require.Len(t, reqs, 3)
	require.Equal(t, png, reqs[0].Image)
	require.Nil(t, reqs[1].Image, "past ImageLimit only the image is dropped")
	require.Equal(t, []int{200, 500, 200}, []int{reqs[0].Status, reqs[1].Status, reqs[2].Status})
	c := fake.Counts()
	require.Equal(t, 2, c.OK)
	require.Equal(t, 1, c.Injected)
}

func TestMalformedRequestsAre400(t *testing.T) {
	t.Parallel()
	fake := fakeocr.New(t, fakeocr.Options{})
	for _, body := range []string{
		`not json`,
		`{"model": "m", "messages": []}`,
		`{"model": "m", "messages": [{"role": "user", "content": [{"type": "text", "text": "hi"}]}]}`,
		`{"model": "m", "messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "https://example.com/a.jpg"}}]}]}`,
	} {
		req, err := http.NewRequestWithContext(t.Context(), http.MethodPost, fake.URL+"/chat/completions", strings.NewReader(body))
		require.NoError(t, err)
		req.Header.Set("Authorization", "Bearer "+fake.Key)
		res, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		_ = res.Body.Close()
		require.Equal(t, http.StatusBadRequest, res.StatusCode, body)
	}
	require.Equal(t, 4, fake.Counts().BadRequest)
}
