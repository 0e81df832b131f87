package tagging

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/shared"

	"github.com/arke-institute/orchestrator/provider"
)

// Defaults for OpenAIConfig fields left zero.
const (
	DefaultModel   = "gpt-4o-mini"
	DefaultTimeout = time.Minute
	// DefaultDocumentChars is how much of a document's text (from its
	// start) the document's request carries beside its chunks' tags.
	DefaultDocumentChars = 6000
)

// prompt is the system message; the user message is {"texts": [...]}.
const prompt = `You tag passages of archival documents for search.
The user sends JSON {"texts": [...]}. For each text, give up to %d tags: short lowercase keywords or phrases (one to three words) naming its topics, people, places, organisations and periods, most important first.
Answer with JSON only: {"tags": [[...], [...]]}, one list per text, in the order of the texts.`

// OpenAIConfig configures an OpenAI-compatible chat-completions provider
// of tags.
type OpenAIConfig struct {
	// URL is the API base; requests go to {URL}/chat/completions. Required.
	URL string
	// APIKey is sent as "Authorization: Bearer {APIKey}". Required; never
	// logged nor put in an error.
	APIKey string
	// Model is the model asked for (DefaultModel if empty). It must
	// follow instructions to answer JSON; the request also asks for the
	// json_object response format.
	Model string
	// DocumentChars is how much of a document's text its request carries
	// (DefaultDocumentChars if zero).
	DocumentChars int
	// Timeout bounds one request (DefaultTimeout if zero).
	Timeout time.Duration
	// MaxAnswerBytes bounds an answer's body (provider.DefaultMaxAnswerBytes
	// if zero).
	MaxAnswerBytes int64
	// HTTPClient sends the requests (default: a pooled client).
	HTTPClient *http.Client
}

// OpenAI is a Tagger asking an OpenAI-compatible chat model for JSON
// through the official openai-go client, with its own retries off. Each
// TagChunks or TagDocument call is one request. An answer that is not
// {"tags": [[...], ...]} with one list per text is a permanent error.
type OpenAI struct {
	cfg    OpenAIConfig
	client *provider.Client
	chat   openai.ChatCompletionService
}

var _ Tagger = (*OpenAI)(nil)

// NewOpenAI validates cfg, fills its defaults and returns the tagger. It
// reads no environment variables.
func NewOpenAI(cfg OpenAIConfig) (*OpenAI, error) {
	cfg.Model = cmp.Or(cfg.Model, DefaultModel)
	cfg.DocumentChars = cmp.Or(cfg.DocumentChars, DefaultDocumentChars)
	cfg.Timeout = cmp.Or(cfg.Timeout, DefaultTimeout)
	client, err := provider.NewClient("tags", provider.Config{
		URL:            cfg.URL,
		APIKey:         cfg.APIKey,
		Timeout:        cfg.Timeout,
		MaxAnswerBytes: cfg.MaxAnswerBytes,
		HTTPClient:     cfg.HTTPClient,
	})
	if err != nil {
		return nil, err
	}
	return &OpenAI{cfg: cfg, client: client, chat: openai.NewChatCompletionService(client.Options()...)}, nil
}

// Provider is the provider URL's host.
func (o *OpenAI) Provider() string { return o.client.Host() }

// Model is cfg.Model.
func (o *OpenAI) Model() string { return o.cfg.Model }

// TagChunks asks for the tags of texts in one request.
func (o *OpenAI) TagChunks(ctx context.Context, texts []string) ([][]string, error) {
	if len(texts) == 0 {
		return [][]string{}, nil
	}
	return o.ask(ctx, texts, MaxChunkTags)
}

// TagDocument asks for a document's tags in one request, showing the
// model the tags its chunks got (most frequent first) and the start of its
// text.
func (o *OpenAI) TagDocument(ctx context.Context, texts []string, chunkTags [][]string) ([]string, error) {
	counts := map[string]int{}
	var order []string
	for _, tags := range chunkTags {
		for _, t := range tags {
			if counts[t] == 0 {
				order = append(order, t)
			}
			counts[t]++
		}
	}
	slices.SortStableFunc(order, func(a, b string) int { return counts[b] - counts[a] })
	var b strings.Builder
	if len(order) > 0 {
		b.WriteString("Tags of the document's passages, most frequent first: ")
		b.WriteString(strings.Join(order[:min(len(order), 50)], ", "))
		b.WriteString("\n\n")
	}
	b.WriteString("The document's beginning:\n\n")
	start := strings.Join(texts, "\n\n")
	if r := []rune(start); len(r) > o.cfg.DocumentChars {
		start = string(r[:o.cfg.DocumentChars])
	}
	b.WriteString(start)
	tags, err := o.ask(ctx, []string{b.String()}, MaxDocumentTags)
	if err != nil {
		return nil, err
	}
	return tags[0], nil
}

func (o *OpenAI) ask(ctx context.Context, texts []string, limit int) ([][]string, error) {
	input, err := json.Marshal(map[string]any{"texts": texts})
	if err != nil {
		return nil, err
	}
	params := openai.ChatCompletionNewParams{
		Model: o.cfg.Model,
		Messages: []openai.ChatCompletionMessageParamUnion{
			openai.SystemMessage(fmt.Sprintf(prompt, limit)),
			openai.UserMessage(string(input)),
		},
		ResponseFormat: openai.ChatCompletionNewParamsResponseFormatUnion{OfJSONObject: &shared.ResponseFormatJSONObjectParam{}},
	}
	var answer *openai.ChatCompletion
	err = o.client.Call(ctx, func(ctx context.Context) error {
		var err error
		answer, err = o.chat.New(ctx, params)
		return err
	})
	if err != nil {
		return nil, err
	}
	if len(answer.Choices) == 0 {
		return nil, o.client.Errorf(provider.Permanent, "malformed answer: no choices")
	}
	choice := answer.Choices[0]
	tags, err := parseTags(choice.Message.Content, len(texts))
	if err != nil {
		if choice.FinishReason == "length" {
			return nil, o.client.Errorf(provider.Permanent, "malformed answer, cut at the model's length limit: %v", err)
		}
		return nil, o.client.Errorf(provider.Permanent, "malformed answer: %v", err)
	}
	for i := range tags {
		tags[i] = Normalize(tags[i], limit)
	}
	return tags, nil
}

// parseTags reads {"tags": [[...], ...]} with n lists from a model's
// answer, forgiving a markdown code fence around it, and, for one text, a
// flat {"tags": [...]}.
func parseTags(content string, n int) ([][]string, error) {
	content = strings.TrimSpace(content)
	if body, ok := strings.CutPrefix(content, "```"); ok {
		body = strings.TrimPrefix(body, "json")
		content = strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(body), "```"))
	}
	if content == "" {
		return nil, fmt.Errorf("empty content")
	}
	var shaped struct {
		Tags json.RawMessage `json:"tags"`
	}
	if err := json.Unmarshal([]byte(content), &shaped); err != nil {
		return nil, fmt.Errorf("not JSON: %s", excerpt(content))
	}
	if shaped.Tags == nil {
		return nil, fmt.Errorf(`no "tags": %s`, excerpt(content))
	}
	var lists [][]string
	if err := json.Unmarshal(shaped.Tags, &lists); err != nil {
		var flat []string
		if n != 1 || json.Unmarshal(shaped.Tags, &flat) != nil {
			return nil, fmt.Errorf(`"tags" is not a list of lists of strings: %s`, excerpt(string(shaped.Tags)))
		}
		lists = [][]string{flat}
	}
	if len(lists) != n {
		return nil, fmt.Errorf("%d tag lists for %d texts", len(lists), n)
	}
	return lists, nil
}

// excerpt is the start of a model's answer, for an error.
func excerpt(s string) string {
	if r := []rune(s); len(r) > 120 {
		return string(r[:120]) + "..."
	}
	return s
}
