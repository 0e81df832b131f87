package tagging

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync/atomic"
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
	// APIKey is sent as "Authorization: Bearer {APIKey}"; empty, none is
	// sent (a local server). Never logged nor put in an error.
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
// TagChunks or TagDocument call is one request, or two when the first
// answer could not be read (see ask). An answer that is not
// {"tags": [[...], ...]} with one list per text, twice, is a permanent
// error.
type OpenAI struct {
	cfg    OpenAIConfig
	client *provider.Client
	chat   openai.ChatCompletionService
	// plain is set once the model refused the JSON response format.
	plain atomic.Bool
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
func (o *OpenAI) TagChunks(ctx context.Context, texts []string, instructions string) ([][]string, error) {
	if len(texts) == 0 {
		return [][]string{}, nil
	}
	return o.ask(ctx, texts, MaxChunkTags, instructions)
}

// TagDocument asks for a document's tags in one request, showing the
// model the tags its chunks got (most frequent first) and the start of its
// text.
func (o *OpenAI) TagDocument(ctx context.Context, texts []string, chunkTags [][]string, instructions string) ([]string, error) {
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
	tags, err := o.ask(ctx, []string{b.String()}, MaxDocumentTags, instructions)
	if err != nil {
		return nil, err
	}
	return tags[0], nil
}

// repairPrompt follows an answer that could not be read: the model is
// shown its answer and asked again.
const repairPrompt = `That answer could not be read: %s.
Answer again with JSON only: {"tags": [[...], ...]}, exactly %d lists, one per text, in the order of the texts.`

// ask sends texts and reads their tags, with the batch's instructions
// after the prompt. A model that refuses the JSON
// response format (400 naming it) is asked again without it, and from then
// on never with it. An answer that cannot be read is shown to the model
// with what is wrong, once (repairPrompt); a second such answer is a
// permanent error.
func (o *OpenAI) ask(ctx context.Context, texts []string, limit int, instructions string) ([][]string, error) {
	input, err := json.Marshal(map[string]any{"texts": texts})
	if err != nil {
		return nil, err
	}
	messages := []openai.ChatCompletionMessageParamUnion{
		openai.SystemMessage(system(limit, instructions)),
		openai.UserMessage(string(input)),
	}
	for attempt := 1; ; attempt++ {
		content, finish, err := o.complete(ctx, messages)
		if err != nil {
			return nil, err
		}
		tags, err := parseTags(content, len(texts))
		if err == nil {
			for i := range tags {
				tags[i] = Normalize(tags[i], limit)
			}
			return tags, nil
		}
		if finish == "length" {
			return nil, o.client.Errorf(provider.Permanent, "malformed answer, cut at the model's length limit: %v", err)
		}
		if attempt == 2 {
			return nil, o.client.Errorf(provider.Permanent, "malformed answer, also after a repair prompt: %v", err)
		}
		messages = append(messages, openai.AssistantMessage(content), openai.UserMessage(fmt.Sprintf(repairPrompt, err, len(texts))))
	}
}

// system is the system message: the prompt, then the batch's own
// instructions, if any.
func system(limit int, instructions string) string {
	p := fmt.Sprintf(prompt, limit)
	if instructions = strings.TrimSpace(instructions); instructions != "" {
		p += "\nThe archive's own instructions for this batch:\n" + instructions
	}
	return p
}

// complete makes one chat request and returns the first choice's content
// and finish reason.
func (o *OpenAI) complete(ctx context.Context, messages []openai.ChatCompletionMessageParamUnion) (content, finish string, err error) {
	params := openai.ChatCompletionNewParams{Model: o.cfg.Model, Messages: messages}
	plain := o.plain.Load()
	if !plain {
		params.ResponseFormat = openai.ChatCompletionNewParamsResponseFormatUnion{OfJSONObject: &shared.ResponseFormatJSONObjectParam{}}
	}
	var answer *openai.ChatCompletion
	call := func(ctx context.Context) error {
		var err error
		answer, err = o.chat.New(ctx, params)
		return err
	}
	err = o.client.Call(ctx, call)
	if !plain && provider.Refused(err, "response_format") {
		o.plain.Store(true)
		params.ResponseFormat = openai.ChatCompletionNewParamsResponseFormatUnion{}
		err = o.client.Call(ctx, call)
	}
	if err != nil {
		return "", "", err
	}
	u := answer.Usage
	provider.Record(ctx, o.cfg.Model, provider.Answered(u.PromptTokens, u.CompletionTokens, u.TotalTokens))
	if len(answer.Choices) == 0 {
		return "", "", o.client.Errorf(provider.Permanent, "malformed answer: no choices")
	}
	return answer.Choices[0].Message.Content, string(answer.Choices[0].FinishReason), nil
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
