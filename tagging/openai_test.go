package tagging_test

import (
	"encoding/json"
	"errors"
	"net/url"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/arke-institute/orchestrator/internal/fakes/fakeai"
	"github.com/arke-institute/orchestrator/internal/harness/testcorpus"
	"github.com/arke-institute/orchestrator/provider"
	"github.com/arke-institute/orchestrator/tagging"
)

func newOpenAI(t *testing.T, fake *fakeai.Server, edit ...func(*tagging.OpenAIConfig)) *tagging.OpenAI {
	t.Helper()
	cfg := tagging.OpenAIConfig{URL: fake.URL, APIKey: fake.Key}
	for _, f := range edit {
		f(&cfg)
	}
	tg, err := tagging.NewOpenAI(cfg)
	require.NoError(t, err)
	return tg
}

func TestOpenAITagsChunksAndDocuments(t *testing.T) {
	t.Parallel()
	fake := fakeai.New(t, fakeai.Options{})
	tg := newOpenAI(t, fake)
	u, err := url.Parse(fake.URL)
	require.NoError(t, err)
	require.Equal(t, u.Host, tg.Provider())
	require.Equal(t, tagging.DefaultModel, tg.Model())

	var doc string
	for _, d := range testcorpus.Docs() {
		if d.Name == "beekeeping" {
			doc = d.Text
		}
	}
	chunks, chunkTags, docTags := tagDocument(t, tg, doc)
	for i, c := range chunks {
		require.Equal(t, fakeai.TagsFor(c.Text), chunkTags[i], "chunk %d's tags, in order", i)
	}
	require.NotEmpty(t, docTags)

	reqs := fake.Requests()
	require.Len(t, reqs, 2, "one request for the batch of chunks, one for the document")
	first := reqs[0]
	require.Equal(t, fakeai.Chat, first.Route)
	require.Equal(t, tagging.DefaultModel, first.Model)
	require.Equal(t, "json_object", first.ResponseFormat)
	require.Len(t, first.Messages, 2)
	require.Equal(t, "system", first.Messages[0].Role)
	require.Contains(t, first.Messages[0].Content, "up to 8 tags")
	var sent struct {
		Texts []string `json:"texts"`
	}
	require.NoError(t, json.Unmarshal([]byte(first.Messages[1].Content), &sent))
	require.Len(t, sent.Texts, len(chunks))

	require.Contains(t, reqs[1].Messages[0].Content, "up to 12 tags")
	require.NoError(t, json.Unmarshal([]byte(reqs[1].Messages[1].Content), &sent))
	require.Len(t, sent.Texts, 1)
	require.Contains(t, sent.Texts[0], "Tags of the document's passages, most frequent first: honey, ")
	require.Contains(t, sent.Texts[0], "# Keeping honey bees")
}

func TestOpenAINormalisesAndForgives(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name    string
		content string
		n       int
		want    [][]string
	}{
		{"Normalised", `{"tags": [["  Honey Bees ", "#Swarming", "honey bees", ""], ["LAVA"]]}`, 2, [][]string{{"honey bees", "swarming"}, {"lava"}}},
		{"Fenced", "```json\n{\"tags\": [[\"a tag\"]]}\n```", 1, [][]string{{"a tag"}}},
		{"FlatForOne", `{"tags": ["one", "two"]}`, 1, [][]string{{"one", "two"}}},
		{"Bounded", `{"tags": [["a1","a2","a3","a4","a5","a6","a7","a8","a9","a10"]]}`, 1, [][]string{{"a1", "a2", "a3", "a4", "a5", "a6", "a7", "a8"}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			fake := fakeai.New(t, fakeai.Options{Behave: func(fakeai.Request) fakeai.Behavior { return fakeai.Behavior{Content: tc.content} }})
			tags, err := newOpenAI(t, fake).TagChunks(t.Context(), make([]string, tc.n), "")
			require.NoError(t, err)
			require.Equal(t, tc.want, tags)
		})
	}
}

func TestOpenAIClassifiesErrors(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name       string
		behave     fakeai.Behavior
		class      provider.Class
		status     int
		message    string
		retryAfter time.Duration
		repaired   bool // a malformed answer is shown to the model once more
	}{
		{name: "BadRequest", behave: fakeai.Behavior{Status: 400, Message: "context too long"}, class: provider.Permanent, status: 400, message: "context too long"},
		{name: "Unauthorized", behave: fakeai.Behavior{Status: 401}, class: provider.Auth, status: 401},
		{name: "Forbidden", behave: fakeai.Behavior{Status: 403}, class: provider.Auth, status: 403},
		{name: "NotFound", behave: fakeai.Behavior{Status: 404, Message: "no such model"}, class: provider.Permanent, status: 404, message: "no such model"},
		{name: "RateLimited", behave: fakeai.Behavior{Status: 429, RetryAfter: "5"}, class: provider.RateLimited, status: 429, retryAfter: 5 * time.Second},
		{name: "ServerError", behave: fakeai.Behavior{Status: 502}, class: provider.Transient, status: 502},
		{name: "Hangup", behave: fakeai.Behavior{Hangup: true}, class: provider.Transient},
		{name: "NotJSONBody", behave: fakeai.Behavior{Body: []byte(`{"choices": [`)}, class: provider.Permanent, message: "undecodable answer"},
		{name: "NoChoices", behave: fakeai.Behavior{Body: []byte(`{"choices": []}`)}, class: provider.Permanent, message: "no choices"},
		{name: "ProseContent", behave: fakeai.Behavior{Content: "Sure! Here are the tags: bees, honey"}, class: provider.Permanent, message: "malformed answer, also after a repair prompt: not JSON: Sure!", repaired: true},
		{name: "EmptyContent", behave: fakeai.Behavior{Content: " "}, class: provider.Permanent, message: "empty content", repaired: true},
		{name: "NoTagsKey", behave: fakeai.Behavior{Content: `{"keywords": [["a"], ["b"]]}`}, class: provider.Permanent, message: `no "tags"`, repaired: true},
		{name: "WrongCount", behave: fakeai.Behavior{Content: `{"tags": [["a"]]}`}, class: provider.Permanent, message: "1 tag lists for 2 texts", repaired: true},
		{name: "WrongShape", behave: fakeai.Behavior{Content: `{"tags": "a, b"}`}, class: provider.Permanent, message: "not a list of lists", repaired: true},
		{name: "Truncated", behave: fakeai.Behavior{Body: []byte(`{"choices": [{"index": 0, "finish_reason": "length", "message": {"role": "assistant", "content": "{\"tags\": [[\"a\""}}]}`)}, class: provider.Permanent, message: "cut at the model's length limit"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			fake := fakeai.New(t, fakeai.Options{Behave: func(fakeai.Request) fakeai.Behavior { return tc.behave }})
			_, err := newOpenAI(t, fake).TagChunks(t.Context(), []string{"one", "two"}, "")
			pe, ok := errors.AsType[*provider.Error](err)
			require.True(t, ok, "want a *provider.Error, got %v", err)
			require.Equal(t, tc.class, pe.Class, "%v", err)
			require.Equal(t, tc.status, pe.Status)
			require.Equal(t, tc.retryAfter, pe.RetryAfter)
			require.Contains(t, err.Error(), tc.message)
			require.True(t, strings.HasPrefix(err.Error(), "tags "), err.Error())
			want := 1 // the client does not retry on its own
			if tc.repaired {
				want = 2
			}
			require.Equal(t, want, fake.Counts().Requests)
		})
	}
}

// TestOpenAIRepairsAMalformedAnswer: an answer that cannot be read is
// shown to the model with what is wrong, and its second answer counts.
func TestOpenAIRepairsAMalformedAnswer(t *testing.T) {
	t.Parallel()
	fake := fakeai.New(t, fakeai.Options{Behave: func(r fakeai.Request) fakeai.Behavior {
		if r.N == 1 {
			return fakeai.Behavior{Content: "Sure! bees, honey"}
		}
		return fakeai.Behavior{Content: `{"tags": [["bees"], ["honey"]]}`}
	}})
	tags, err := newOpenAI(t, fake).TagChunks(t.Context(), []string{"one", "two"}, "")
	require.NoError(t, err)
	require.Equal(t, [][]string{{"bees"}, {"honey"}}, tags)
	reqs := fake.Requests()
	require.Len(t, reqs, 2)
	m := reqs[1].Messages
	require.Len(t, m, 4)
	require.Equal(t, fakeai.Message{Role: "assistant", Content: "Sure! bees, honey"}, m[2])
	require.Equal(t, "user", m[3].Role)
	require.Contains(t, m[3].Content, "could not be read: not JSON")
	require.Contains(t, m[3].Content, "exactly 2 lists")
}

// TestOpenAIWithoutJSONMode: a model that refuses the JSON response
// format is asked again without it, and never with it after that.
func TestOpenAIWithoutJSONMode(t *testing.T) {
	t.Parallel()
	fake := fakeai.New(t, fakeai.Options{RefuseJSONMode: true, Behave: func(fakeai.Request) fakeai.Behavior {
		return fakeai.Behavior{Content: `{"tags": [["bees"]]}`}
	}})
	tg := newOpenAI(t, fake)
	for range 2 {
		tags, err := tg.TagChunks(t.Context(), []string{"one"}, "")
		require.NoError(t, err)
		require.Equal(t, [][]string{{"bees"}}, tags)
	}
	c := fake.Counts()
	require.Equal(t, 3, c.Requests, "one refused, then two without the format")
	require.Equal(t, 1, c.BadRequest)
	for _, r := range fake.Requests() {
		require.Empty(t, r.ResponseFormat)
	}
}

// TestOpenAIInstructionsAndNoKey: a batch's instructions follow the
// prompt; a tagger without a key sends no Authorization to a server that
// takes none.
func TestOpenAIInstructionsAndNoKey(t *testing.T) {
	t.Parallel()
	fake := fakeai.New(t, fakeai.Options{Keyless: true, Behave: func(fakeai.Request) fakeai.Behavior {
		return fakeai.Behavior{Content: `{"tags": [["bees"]]}`}
	}})
	tg := newOpenAI(t, fake, func(c *tagging.OpenAIConfig) { c.APIKey = "" })
	_, err := tg.TagChunks(t.Context(), []string{"one"}, "  Name the beekeepers.  ")
	require.NoError(t, err)
	r := fake.Requests()[0]
	require.False(t, r.Authorized)
	require.True(t, strings.HasSuffix(r.Messages[0].Content, "\nThe archive's own instructions for this batch:\nName the beekeepers."), r.Messages[0].Content)
}

func TestOpenAIDocumentTextIsBounded(t *testing.T) {
	t.Parallel()
	fake := fakeai.New(t, fakeai.Options{})
	tg := newOpenAI(t, fake, func(c *tagging.OpenAIConfig) { c.DocumentChars = 100 })
	_, err := tg.TagDocument(t.Context(), []string{strings.Repeat("é", 300), "second chunk"}, nil, "")
	require.NoError(t, err)
	var sent struct {
		Texts []string `json:"texts"`
	}
	require.NoError(t, json.Unmarshal([]byte(fake.Requests()[0].Messages[1].Content), &sent))
	require.Equal(t, "The document's beginning:\n\n"+strings.Repeat("é", 100), sent.Texts[0])

	none, err := tg.TagChunks(t.Context(), nil, "")
	require.NoError(t, err)
	require.Empty(t, none)
	require.Equal(t, 1, fake.Counts().Requests)
}

func TestNewOpenAIValidates(t *testing.T) {
	t.Parallel()
	for _, cfg := range []tagging.OpenAIConfig{{APIKey: "k"}, {URL: "ftp://api.example.com/v1"}} {
		_, err := tagging.NewOpenAI(cfg)
		require.ErrorContains(t, err, "tags: ")
	}
}

// TestOpenAIMetersUsage: each chat answer's usage goes to the context's
// meter (the fake answers 100 prompt and 20 completion tokens), a repair
// prompt's answer too.
func TestOpenAIMetersUsage(t *testing.T) {
	t.Parallel()
	var calls atomic.Int32
	fake := fakeai.New(t, fakeai.Options{Behave: func(fakeai.Request) fakeai.Behavior {
		switch calls.Add(1) {
		case 1:
			return fakeai.Behavior{Content: "not JSON"} // asked again with a repair prompt
		case 2:
			return fakeai.Behavior{Content: `{"tags": [["lighthouse"]]}`}
		}
		return fakeai.Behavior{}
	}})
	tg := newOpenAI(t, fake)
	meter := &provider.Meter{}
	ctx := provider.WithMeter(t.Context(), meter)
	_, err := tg.TagChunks(ctx, []string{"the lighthouse keeper"}, "")
	require.NoError(t, err)
	_, err = tg.TagDocument(ctx, []string{"the lighthouse keeper"}, [][]string{{"lighthouse"}}, "")
	require.NoError(t, err)
	models, usage := meter.Models()
	require.Equal(t, []string{tagging.DefaultModel}, models)
	require.Equal(t, []provider.Usage{{Requests: 3, PromptTokens: 300, CompletionTokens: 60}}, usage)
}
