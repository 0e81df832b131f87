package ocr_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/arke-institute/orchestrator/internal/fakes/fakeocr"
	"github.com/arke-institute/orchestrator/ocr"
	"github.com/arke-institute/orchestrator/provider"
)

func page(t *testing.T) ocr.Image {
	t.Helper()
	data, err := os.ReadFile("testdata/page.png")
	require.NoError(t, err)
	return ocr.Image{Data: data, MediaType: "image/png"}
}

func newEngine(t *testing.T, fake *fakeocr.Server, edit ...func(*ocr.OpenAIConfig)) *ocr.OpenAI {
	t.Helper()
	cfg := ocr.OpenAIConfig{URL: fake.URL, APIKey: fake.Key}
	for _, f := range edit {
		f(&cfg)
	}
	e, err := ocr.NewOpenAI(cfg)
	require.NoError(t, err)
	return e
}

func TestOpenAITranscribes(t *testing.T) {
	t.Parallel()
	fake := fakeocr.New(t, fakeocr.Options{})
	e := newEngine(t, fake)
	img := page(t)

	res, err := e.Transcribe(t.Context(), img)
	require.NoError(t, err)
	u, err := url.Parse(fake.URL)
	require.NoError(t, err)
	require.Equal(t, ocr.Result{Text: fakeocr.TextFor(img.Data), Model: ocr.DefaultModel, Provider: u.Host}, res)

	reqs := fake.Requests()
	require.Len(t, reqs, 1)
	require.Equal(t, ocr.DefaultModel, reqs[0].Model)
	require.Equal(t, ocr.DefaultPrompt, reqs[0].Prompt)
	require.Equal(t, "image/png", reqs[0].MediaType)
	require.Equal(t, img.Data, reqs[0].Image)
	require.Equal(t, 1, fake.Counts().OK)
}

func TestOpenAISniffsMediaTypeAndRefusesNonImages(t *testing.T) {
	t.Parallel()
	fake := fakeocr.New(t, fakeocr.Options{})
	e := newEngine(t, fake, func(c *ocr.OpenAIConfig) { c.Model = "other/model" })

	img := page(t)
	img.MediaType = ""
	res, err := e.Transcribe(t.Context(), img)
	require.NoError(t, err)
	require.Equal(t, "other/model", res.Model)
	require.Equal(t, "image/png", fake.Requests()[0].MediaType)

	for _, data := range [][]byte{nil, []byte("%PDF-1.7 not an image")} {
		_, err = e.Transcribe(t.Context(), ocr.Image{Data: data})
		require.Equal(t, ocr.Permanent, ocr.ClassOf(err), "%v", err)
	}
	require.Equal(t, 1, fake.Counts().Requests, "nothing is sent for a non-image")
}

func TestOpenAIClassifiesErrors(t *testing.T) {
	t.Parallel()
	date := time.Now().Add(10 * time.Second).UTC().Format(http.TimeFormat)
	for _, tc := range []struct {
		name       string
		behave     fakeocr.Behavior
		class      ocr.Class
		status     int
		message    string
		retryAfter [2]time.Duration // inclusive bounds
	}{
		{name: "BadRequest", behave: fakeocr.Behavior{Status: 400, Message: "image could not be decoded"}, class: ocr.Permanent, status: 400, message: "image could not be decoded"},
		{name: "NotFound", behave: fakeocr.Behavior{Status: 404, Message: "model not found"}, class: ocr.Permanent, status: 404, message: "model not found"},
		{name: "TooLarge", behave: fakeocr.Behavior{Status: 413}, class: ocr.Permanent, status: 413, message: "Request Entity Too Large"},
		{name: "UnsupportedMediaType", behave: fakeocr.Behavior{Status: 415}, class: ocr.Permanent, status: 415},
		{name: "Unprocessable", behave: fakeocr.Behavior{Status: 422, Message: "image refused"}, class: ocr.Permanent, status: 422, message: "image refused"},
		{name: "Forbidden", behave: fakeocr.Behavior{Status: 403, Message: "account suspended"}, class: ocr.Auth, status: 403, message: "account suspended"},
		{name: "Unauthorized", behave: fakeocr.Behavior{Status: 401, Message: "key revoked"}, class: ocr.Auth, status: 401, message: "key revoked"},
		{name: "ServerError", behave: fakeocr.Behavior{Status: 500, Message: "model crashed"}, class: ocr.Transient, status: 500, message: "model crashed"},
		{name: "Unavailable", behave: fakeocr.Behavior{Status: 503, RetryAfter: "7"}, class: ocr.Transient, status: 503, retryAfter: [2]time.Duration{7 * time.Second, 7 * time.Second}},
		{name: "PlainTextBadGateway", behave: fakeocr.Behavior{Status: 502, Body: []byte("upstream connect error\n")}, class: ocr.Transient, status: 502, message: "upstream connect error"},
		{name: "RateLimitedSeconds", behave: fakeocr.Behavior{Status: 429, RetryAfter: "3", Message: "slow down"}, class: ocr.RateLimited, status: 429, message: "slow down", retryAfter: [2]time.Duration{3 * time.Second, 3 * time.Second}},
		{name: "RateLimitedDate", behave: fakeocr.Behavior{Status: 429, RetryAfter: date}, class: ocr.RateLimited, status: 429, retryAfter: [2]time.Duration{8 * time.Second, 10 * time.Second}},
		{name: "RateLimitedNoHeader", behave: fakeocr.Behavior{Status: 429}, class: ocr.RateLimited, status: 429},
		{name: "MalformedAnswer", behave: fakeocr.Behavior{Body: []byte(`{"choices": [`)}, class: ocr.Permanent, message: "undecodable answer"},
		{name: "NoChoices", behave: fakeocr.Behavior{Body: []byte(`{"id": "x", "choices": []}`)}, class: ocr.Permanent, message: "no choices"},
		{name: "TooLargeAnswer", behave: fakeocr.Behavior{Text: strings.Repeat("x", 5000)}, class: ocr.Permanent, message: "larger than the limit"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			fake := fakeocr.New(t, fakeocr.Options{Behave: func(fakeocr.Request) fakeocr.Behavior { return tc.behave }})
			e := newEngine(t, fake, func(c *ocr.OpenAIConfig) { c.MaxAnswerBytes = 4096 })

			_, err := e.Transcribe(t.Context(), page(t))
			oe, ok := errors.AsType[*ocr.Error](err)
			require.True(t, ok, "want an *ocr.Error, got %v", err)
			require.Equal(t, tc.class, oe.Class, "%v", err)
			require.Equal(t, tc.status, oe.Status)
			require.Contains(t, oe.Error(), tc.message)
			require.GreaterOrEqual(t, oe.RetryAfter, tc.retryAfter[0])
			require.LessOrEqual(t, oe.RetryAfter, tc.retryAfter[1])
			require.Equal(t, 1, fake.Counts().Requests, "the client does not retry on its own")
		})
	}
}

func TestOpenAIWrongKeyIsAuthAndNotLeaked(t *testing.T) {
	t.Parallel()
	fake := fakeocr.New(t, fakeocr.Options{})
	const key = "sk-wrong-secret-key"
	e := newEngine(t, fake, func(c *ocr.OpenAIConfig) { c.APIKey = key })

	_, err := e.Transcribe(t.Context(), page(t))
	require.Equal(t, ocr.Auth, ocr.ClassOf(err))
	require.ErrorContains(t, err, "Invalid API key")
	require.NotContains(t, err.Error(), key)
	require.Equal(t, 1, fake.Counts().Unauthorized)
	require.Empty(t, fake.Requests())
}

func TestOpenAICapacityAnswers429WithRetryAfter(t *testing.T) {
	t.Parallel()
	fake := fakeocr.New(t, fakeocr.Options{Rate: 0.5, Burst: 1})
	e := newEngine(t, fake)

	_, err := e.Transcribe(t.Context(), page(t))
	require.NoError(t, err)
	_, err = e.Transcribe(t.Context(), page(t))
	oe, ok := errors.AsType[*ocr.Error](err)
	require.True(t, ok, "%v", err)
	require.Equal(t, ocr.RateLimited, oe.Class)
	require.Equal(t, 2*time.Second, oe.RetryAfter)
	c := fake.Counts()
	require.Equal(t, 1, c.OK)
	require.Equal(t, 1, c.RateLimited)
}

func TestOpenAITimeoutIsTransient(t *testing.T) {
	t.Parallel()
	fake := fakeocr.New(t, fakeocr.Options{Behave: func(fakeocr.Request) fakeocr.Behavior {
		return fakeocr.Behavior{Delay: 10 * time.Second}
	}})
	e := newEngine(t, fake, func(c *ocr.OpenAIConfig) { c.Timeout = 200 * time.Millisecond })

	start := time.Now()
	_, err := e.Transcribe(t.Context(), page(t))
	require.Equal(t, ocr.Transient, ocr.ClassOf(err), "%v", err)
	require.ErrorContains(t, err, "no answer")
	require.Less(t, time.Since(start), 5*time.Second)
}

func TestOpenAICancelledIsNotClassified(t *testing.T) {
	t.Parallel()
	fake := fakeocr.New(t, fakeocr.Options{Behave: func(fakeocr.Request) fakeocr.Behavior {
		return fakeocr.Behavior{Delay: 10 * time.Second}
	}})
	e := newEngine(t, fake)

	ctx, cancel := context.WithTimeout(t.Context(), 200*time.Millisecond)
	defer cancel()
	_, err := e.Transcribe(ctx, page(t))
	require.ErrorIs(t, err, context.DeadlineExceeded)
	_, classified := errors.AsType[*ocr.Error](err)
	require.False(t, classified, "the caller's own deadline is not the provider's fault")
}

func TestOpenAIConnectionErrorIsTransient(t *testing.T) {
	t.Parallel()
	fake := fakeocr.New(t, fakeocr.Options{})
	e := newEngine(t, fake)
	fake.Close()

	_, err := e.Transcribe(t.Context(), page(t))
	require.Equal(t, ocr.Transient, ocr.ClassOf(err), "%v", err)
	require.NotContains(t, err.Error(), fake.Key)
}

func TestOpenAIHangupIsTransient(t *testing.T) {
	t.Parallel()
	fake := fakeocr.New(t, fakeocr.Options{Behave: func(fakeocr.Request) fakeocr.Behavior {
		return fakeocr.Behavior{Hangup: true}
	}})
	e := newEngine(t, fake)

	_, err := e.Transcribe(t.Context(), page(t))
	require.Equal(t, ocr.Transient, ocr.ClassOf(err), "%v", err)
	require.Equal(t, 1, fake.Counts().Injected)
	require.Equal(t, 0, fake.Requests()[0].Status)
}

func TestNewOpenAIValidates(t *testing.T) {
	t.Parallel()
	for _, cfg := range []ocr.OpenAIConfig{
		{APIKey: "k"},
		{URL: "ftp://example.com", APIKey: "k"},
		{URL: "https://", APIKey: "k"},
	} {
		_, err := ocr.NewOpenAI(cfg)
		require.Error(t, err, "%+v", cfg.URL)
	}
	_, err := ocr.NewOpenAI(ocr.OpenAIConfig{URL: "http://localhost:8000/v1"})
	require.NoError(t, err, "a server of your own may take no key (the configuration asks one of an https provider)")
}

func TestParseRetryAfter(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 11, 24, 12, 0, 0, 0, time.UTC)
	for _, tc := range []struct {
		in   string
		want time.Duration
	}{
		{"", 0},
		{"0", 0},
		{"-3", 0},
		{"5", 5 * time.Second},
		{" 12 ", 12 * time.Second},
		{"1.5", 0},
		{"soon", 0},
		{now.Add(90 * time.Second).Format(http.TimeFormat), 90 * time.Second},
		{now.Add(-time.Minute).Format(http.TimeFormat), 0},
		{"Tue, 24 Nov 2026 12:00:30 GMT", 30 * time.Second},
		{"Tuesday, 24-Nov-26 12:00:30 GMT", 30 * time.Second}, // RFC 850, which HTTP still accepts
	} {
		require.Equal(t, tc.want, ocr.ParseRetryAfter(tc.in, now), "%q", tc.in)
	}
}

func TestErrorIsAProviderError(t *testing.T) {
	t.Parallel()
	fake := fakeocr.New(t, fakeocr.Options{Behave: func(fakeocr.Request) fakeocr.Behavior {
		return fakeocr.Behavior{Status: 400, Message: "image refused"}
	}})
	_, err := newEngine(t, fake).Transcribe(t.Context(), page(t))
	require.Equal(t, "ocr permanent error (HTTP 400): image refused", err.Error())
	pe, ok := errors.AsType[*provider.Error](fmt.Errorf("item: %w", err))
	require.True(t, ok, "errors.As finds an *ocr.Error as a *provider.Error")
	require.Equal(t, provider.Permanent, pe.Class)
	require.Equal(t, provider.Permanent, provider.ClassOf(err))

	local := &ocr.Error{Class: ocr.Transient, Message: "reading page 3: EOF"}
	require.Equal(t, "ocr transient error: reading page 3: EOF", local.Error())
}
