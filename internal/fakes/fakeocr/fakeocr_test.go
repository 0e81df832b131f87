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

func TestCapacityIsATokenBucket(t *testing.T) {
	t.Parallel()
	fake := fakeocr.New(t, fakeocr.Options{Rate: 20, Burst: 5})
	e := engine(t, fake)

	var wg sync.WaitGroup
	for range 10 {
		wg.Go(func() { _, _ = e.Transcribe(t.Context(), ocr.Image{Data: png}) })
	}
	wg.Wait()
	c := fake.Counts()
	require.Equal(t, 10, c.Requests)
	require.GreaterOrEqual(t, c.OK, 5, "the burst passes")
	require.Equal(t, 10, c.OK+c.RateLimited)
	require.Equal(t, c.RateLimited, c.ByStatus[http.StatusTooManyRequests])

	time.Sleep(300 * time.Millisecond) // 20/s refills the 5-token burst in 250 ms
	for range 5 {
		_, err := e.Transcribe(t.Context(), ocr.Image{Data: png})
		require.NoError(t, err)
	}
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
