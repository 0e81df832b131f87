package embedding_test

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/arke-institute/orchestrator/embedding"
	"github.com/arke-institute/orchestrator/internal/fakes/fakeai"
	"github.com/arke-institute/orchestrator/provider"
)

func newOpenAI(t *testing.T, fake *fakeai.Server, edit ...func(*embedding.OpenAIConfig)) *embedding.OpenAI {
	t.Helper()
	cfg := embedding.OpenAIConfig{URL: fake.URL, APIKey: fake.Key}
	for _, f := range edit {
		f(&cfg)
	}
	e, err := embedding.NewOpenAI(cfg)
	require.NoError(t, err)
	return e
}

func texts(n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("chunk %d of the document", i)
	}
	return out
}

func TestOpenAIEmbedsInBatchesOfTen(t *testing.T) {
	t.Parallel()
	fake := fakeai.New(t, fakeai.Options{})
	e := newOpenAI(t, fake)
	u, err := url.Parse(fake.URL)
	require.NoError(t, err)
	require.Equal(t, u.Host, e.Provider())
	require.Equal(t, embedding.DefaultModel, e.Model())
	require.Equal(t, 512, e.Dimensions())
	require.Equal(t, 10, e.BatchSize())

	in := texts(25)
	vs, err := e.Embed(t.Context(), in)
	require.NoError(t, err)
	require.Len(t, vs, 25)
	for i, v := range vs {
		require.Equal(t, fakeai.VectorFor(embedding.DefaultModel, in[i], 512), v, "vector %d is its text's", i)
	}

	reqs := fake.Requests()
	require.Len(t, reqs, 3)
	require.Equal(t, in[:10], reqs[0].Inputs)
	require.Equal(t, in[10:20], reqs[1].Inputs)
	require.Equal(t, in[20:], reqs[2].Inputs)
	for _, r := range reqs {
		require.Equal(t, fakeai.Embeddings, r.Route)
		require.Equal(t, embedding.DefaultModel, r.Model)
		require.Equal(t, 512, r.Dimensions)
		require.Equal(t, "float", r.EncodingFormat)
	}
	require.Equal(t, 25, fake.Counts().Inputs)
}

func TestOpenAIOrdersByIndex(t *testing.T) {
	t.Parallel()
	fake := fakeai.New(t, fakeai.Options{Behave: func(fakeai.Request) fakeai.Behavior { return fakeai.Behavior{Reverse: true} }})
	e := newOpenAI(t, fake, func(c *embedding.OpenAIConfig) { c.Model, c.Dimensions, c.BatchSize = "other-model", 64, 7 })

	in := texts(7)
	vs, err := e.Embed(t.Context(), in)
	require.NoError(t, err)
	for i, v := range vs {
		require.Equal(t, fakeai.VectorFor("other-model", in[i], 64), v)
	}
	require.Equal(t, 64, fake.Requests()[0].Dimensions)
}

func TestOpenAIRefusesEmptyTexts(t *testing.T) {
	t.Parallel()
	fake := fakeai.New(t, fakeai.Options{})
	e := newOpenAI(t, fake)
	_, err := e.Embed(t.Context(), []string{"text", " \n"})
	require.Equal(t, provider.Permanent, provider.ClassOf(err))
	require.ErrorContains(t, err, "text 1 of 2 is empty")
	require.Zero(t, fake.Counts().Requests)

	vs, err := e.Embed(t.Context(), nil)
	require.NoError(t, err)
	require.Empty(t, vs)
}

func TestOpenAIClassifiesErrors(t *testing.T) {
	t.Parallel()
	vector := func(dims int) string {
		return "[" + strings.TrimSuffix(strings.Repeat("0.5,", dims), ",") + "]"
	}
	for _, tc := range []struct {
		name       string
		behave     fakeai.Behavior
		class      provider.Class
		status     int
		message    string
		retryAfter time.Duration
	}{
		{name: "BadRequest", behave: fakeai.Behavior{Status: 400, Message: "input too long"}, class: provider.Permanent, status: 400, message: "input too long"},
		{name: "Unauthorized", behave: fakeai.Behavior{Status: 401, Message: "key revoked"}, class: provider.Auth, status: 401, message: "key revoked"},
		{name: "Forbidden", behave: fakeai.Behavior{Status: 403}, class: provider.Auth, status: 403, message: "Forbidden"},
		{name: "NotFound", behave: fakeai.Behavior{Status: 404, Message: "model not found"}, class: provider.Permanent, status: 404, message: "model not found"},
		{name: "RateLimited", behave: fakeai.Behavior{Status: 429, RetryAfter: "3"}, class: provider.RateLimited, status: 429, retryAfter: 3 * time.Second},
		{name: "ServerError", behave: fakeai.Behavior{Status: 500, Message: "overloaded"}, class: provider.Transient, status: 500, message: "overloaded"},
		{name: "Unavailable", behave: fakeai.Behavior{Status: 503, RetryAfter: "2"}, class: provider.Transient, status: 503, retryAfter: 2 * time.Second},
		{name: "Hangup", behave: fakeai.Behavior{Hangup: true}, class: provider.Transient, message: "calling the provider"},
		{name: "NotJSON", behave: fakeai.Behavior{Body: []byte(`{"data": [`)}, class: provider.Permanent, message: "undecodable answer"},
		{name: "TooFew", behave: fakeai.Behavior{Drop: true}, class: provider.Permanent, message: "malformed answer: 1 embeddings for 2 inputs"},
		{name: "WrongDimensions", behave: fakeai.Behavior{Dimensions: 100}, class: provider.Permanent, message: "has 100 dimensions, not 512"},
		{name: "NoIndex", behave: fakeai.Behavior{Body: []byte(`{"data": [{"embedding": ` + vector(512) + `}, {"embedding": ` + vector(512) + `}]}`)}, class: provider.Permanent, message: "has index missing"},
		{name: "IndexTwice", behave: fakeai.Behavior{Body: []byte(`{"data": [{"index": 1, "embedding": ` + vector(512) + `}, {"index": 1, "embedding": ` + vector(512) + `}]}`)}, class: provider.Permanent, message: "has index 1"},
		{name: "IndexOutOfRange", behave: fakeai.Behavior{Body: []byte(`{"data": [{"index": 0, "embedding": ` + vector(512) + `}, {"index": 2, "embedding": ` + vector(512) + `}]}`)}, class: provider.Permanent, message: "has index 2"},
		{name: "Base64NotAsked", behave: fakeai.Behavior{Body: []byte(`{"data": [{"index": 0, "embedding": "AAAA"}, {"index": 1, "embedding": "AAAA"}]}`)}, class: provider.Permanent, message: "malformed answer"},
		{name: "ZeroVector", behave: fakeai.Behavior{Body: []byte(`{"data": [{"index": 0, "embedding": ` + strings.ReplaceAll(vector(512), "0.5", "0") + `}, {"index": 1, "embedding": ` + vector(512) + `}]}`)}, class: provider.Permanent, message: "embedding 0 is zero"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			fake := fakeai.New(t, fakeai.Options{Behave: func(fakeai.Request) fakeai.Behavior { return tc.behave }})
			e := newOpenAI(t, fake)

			_, err := e.Embed(t.Context(), texts(2))
			pe, ok := errors.AsType[*provider.Error](err)
			require.True(t, ok, "want a *provider.Error, got %v", err)
			require.Equal(t, tc.class, pe.Class, "%v", err)
			require.Equal(t, tc.status, pe.Status)
			require.Equal(t, tc.retryAfter, pe.RetryAfter)
			require.Contains(t, err.Error(), tc.message)
			require.True(t, strings.HasPrefix(err.Error(), "embeddings "), err.Error())
			require.Equal(t, 1, fake.Counts().Requests, "the client does not retry on its own")
		})
	}
}

func TestOpenAIWrongKeyIsAuthAndNotLeaked(t *testing.T) {
	t.Parallel()
	fake := fakeai.New(t, fakeai.Options{})
	const key = "sk-wrong-secret-key"
	e := newOpenAI(t, fake, func(c *embedding.OpenAIConfig) { c.APIKey = key })
	_, err := e.Embed(t.Context(), texts(1))
	require.Equal(t, provider.Auth, provider.ClassOf(err))
	require.NotContains(t, err.Error(), key)
	require.Equal(t, 1, fake.Counts().Unauthorized)
}

func TestOpenAICapacityIs429(t *testing.T) {
	t.Parallel()
	fake := fakeai.New(t, fakeai.Options{Rate: 0.5, Burst: 1})
	e := newOpenAI(t, fake)
	_, err := e.Embed(t.Context(), texts(3))
	require.NoError(t, err)
	_, err = e.Embed(t.Context(), texts(3))
	pe, ok := errors.AsType[*provider.Error](err)
	require.True(t, ok, "%v", err)
	require.Equal(t, provider.RateLimited, pe.Class)
	require.Equal(t, 2*time.Second, pe.RetryAfter)
}

func TestOpenAITimeoutIsTransientAndCancelIsNot(t *testing.T) {
	t.Parallel()
	fake := fakeai.New(t, fakeai.Options{Behave: func(fakeai.Request) fakeai.Behavior { return fakeai.Behavior{Delay: 10 * time.Second} }})
	e := newOpenAI(t, fake, func(c *embedding.OpenAIConfig) { c.Timeout = 200 * time.Millisecond })
	_, err := e.Embed(t.Context(), texts(1))
	require.Equal(t, provider.Transient, provider.ClassOf(err), "%v", err)
	require.ErrorContains(t, err, "no answer")

	ctx, cancel := context.WithTimeout(t.Context(), 100*time.Millisecond)
	defer cancel()
	_, err = newOpenAI(t, fake).Embed(ctx, texts(1))
	require.ErrorIs(t, err, context.DeadlineExceeded)
	_, classified := errors.AsType[*provider.Error](err)
	require.False(t, classified, "the caller's own deadline is not the provider's fault")
}

func TestNewOpenAIValidates(t *testing.T) {
	t.Parallel()
	for _, cfg := range []embedding.OpenAIConfig{
		{APIKey: "k"},
		{URL: "api.example.com/v1", APIKey: "k"},
		{URL: "https://api.example.com/v1", APIKey: "k", Dimensions: -1},
	} {
		_, err := embedding.NewOpenAI(cfg)
		require.Error(t, err, "%+v", cfg)
	}
}

// TestOpenAIModelWithoutDimensions: a model that refuses the dimensions
// parameter is asked again without it, and never with it after that; its
// own vectors must be as long as configured, or the error says what to
// configure. A server without a key gets no Authorization.
func TestOpenAIModelWithoutDimensions(t *testing.T) {
	t.Parallel()
	fake := fakeai.New(t, fakeai.Options{Keyless: true, RefuseDimensions: true, MaxDimensions: 64})
	e := newOpenAI(t, fake, func(c *embedding.OpenAIConfig) { c.APIKey, c.Dimensions = "", 64 })
	for range 2 {
		v, err := e.Embed(t.Context(), []string{"bees"})
		require.NoError(t, err)
		require.Equal(t, fakeai.VectorFor(embedding.DefaultModel, "bees", 64), v[0])
	}
	c := fake.Counts()
	require.Equal(t, 3, c.Requests, "one refused, then two without dimensions")
	require.Equal(t, 1, c.BadRequest)
	for _, r := range fake.Requests() {
		require.Zero(t, r.Dimensions)
		require.False(t, r.Authorized)
	}

	e = newOpenAI(t, fake, func(c *embedding.OpenAIConfig) { c.APIKey, c.Dimensions = "", 512 })
	_, err := e.Embed(t.Context(), []string{"bees"})
	pe, ok := errors.AsType[*provider.Error](err)
	require.True(t, ok, "%v", err)
	require.Equal(t, provider.Permanent, pe.Class)
	require.ErrorContains(t, err, "does not take the dimensions parameter and answers vectors of 64 dimensions, not 512: configure 64 dimensions")
}

// TestOpenAIMetersUsage: each answer's usage goes to the context's meter,
// one request per batch of ten, the prompt tokens the answers reported
// (the fake counts words) and no completion tokens.
func TestOpenAIMetersUsage(t *testing.T) {
	t.Parallel()
	fake := fakeai.New(t, fakeai.Options{})
	e := newOpenAI(t, fake)
	meter := &provider.Meter{}
	in := texts(25) // "chunk N of the document": 5 words each
	_, err := e.Embed(provider.WithMeter(t.Context(), meter), in)
	require.NoError(t, err)
	models, usage := meter.Models()
	require.Equal(t, []string{embedding.DefaultModel}, models)
	require.Equal(t, []provider.Usage{{Requests: 3, PromptTokens: 125}}, usage)

	_, err = e.Embed(t.Context(), in[:1]) // no meter: nothing recorded, nothing breaks
	require.NoError(t, err)
	_, usage = meter.Models()
	require.Equal(t, int64(3), usage[0].Requests)
}
