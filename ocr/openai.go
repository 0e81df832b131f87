package ocr

import (
	"bytes"
	"context"
	"encoding/base64"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/openai/openai-go/v3"

	"github.com/arke-institute/orchestrator/provider"
)

// Defaults for OpenAIConfig fields left zero.
const (
	DefaultModel          = "allenai/olmOCR-2-7B-1025"
	DefaultPrompt         = "Transcribe all the text on this page image, in reading order, as plain text. Answer with the text only."
	DefaultTimeout        = 2 * time.Minute
	DefaultMaxAnswerBytes = 4 << 20
)

// OpenAIConfig configures an OpenAI-compatible chat-completions provider.
type OpenAIConfig struct {
	// URL is the API base; requests go to {URL}/chat/completions
	// (e.g. https://api.deepinfra.com/v1/openai). Required.
	URL string
	// APIKey is sent as "Authorization: Bearer {APIKey}". Required. It is
	// never logged nor put in an error.
	APIKey string
	// Model is the model asked for (DefaultModel if empty).
	Model string
	// Prompt is the instruction sent with the image (DefaultPrompt if empty).
	Prompt string
	// Timeout bounds one call, answer included (DefaultTimeout if zero).
	Timeout time.Duration
	// MaxAnswerBytes bounds the answer's body, error answers included
	// (DefaultMaxAnswerBytes if zero); a longer answer is a permanent error.
	MaxAnswerBytes int64
	// HTTPClient sends the requests (default: a pooled client whose
	// timeout is Timeout's, through the context).
	HTTPClient *http.Client
}

// OpenAI is an Engine calling an OpenAI-compatible provider through the
// official openai-go client, with the client's own retries off: retrying
// is the caller's business, under its rate limiter.
type OpenAI struct {
	cfg    OpenAIConfig
	client *provider.Client
	chat   openai.ChatCompletionService
}

var _ Engine = (*OpenAI)(nil)

// NewOpenAI validates cfg, fills its defaults and returns the engine. It
// reads no environment variables (the openai-go defaults are not used).
func NewOpenAI(cfg OpenAIConfig) (*OpenAI, error) {
	if cfg.Model == "" {
		cfg.Model = DefaultModel
	}
	if cfg.Prompt == "" {
		cfg.Prompt = DefaultPrompt
	}
	if cfg.Timeout <= 0 {
		cfg.Timeout = DefaultTimeout
	}
	if cfg.MaxAnswerBytes <= 0 {
		cfg.MaxAnswerBytes = DefaultMaxAnswerBytes
	}
	client, err := provider.NewClient("ocr", provider.Config{
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

// Provider is the name results carry: the provider URL's host.
func (e *OpenAI) Provider() string { return e.client.Host() }

// Transcribe sends img as a data: URL with the prompt and returns the
// first choice's text.
func (e *OpenAI) Transcribe(ctx context.Context, img Image) (Result, error) {
	mediaType, err := imageType(img)
	if err != nil {
		return Result{}, err
	}
	dataURL := "data:" + mediaType + ";base64," + base64.StdEncoding.EncodeToString(img.Data)
	params := openai.ChatCompletionNewParams{
		Model: e.cfg.Model,
		Messages: []openai.ChatCompletionMessageParamUnion{
			openai.UserMessage([]openai.ChatCompletionContentPartUnionParam{
				openai.TextContentPart(Prompt(e.cfg.Prompt, img.Instructions)),
				openai.ImageContentPart(openai.ChatCompletionContentPartImageImageURLParam{URL: dataURL}),
			}),
		},
	}
	var answer *openai.ChatCompletion
	err = e.client.Call(ctx, func(ctx context.Context) error {
		var err error
		answer, err = e.chat.New(ctx, params)
		return err
	})
	if err != nil {
		return Result{}, asError(err)
	}
	u := answer.Usage
	provider.Record(ctx, e.cfg.Model, provider.Answered(u.PromptTokens, u.CompletionTokens, u.TotalTokens))
	if len(answer.Choices) == 0 {
		return Result{}, &Error{Class: Permanent, Message: "the answer has no choices"}
	}
	model := answer.Model
	if model == "" {
		model = e.cfg.Model
	}
	return Result{Text: answer.Choices[0].Message.Content, Model: model, Provider: e.client.Host()}, nil
}

// imageType returns img's media type, sniffed when not given, and refuses
// what is not an image before anything is sent.
func imageType(img Image) (string, error) {
	if len(img.Data) == 0 {
		return "", &Error{Class: Permanent, Message: "empty image"}
	}
	mediaType := img.MediaType
	if mediaType == "" {
		mediaType = http.DetectContentType(img.Data)
		if bytes.HasPrefix(img.Data, []byte("II*\x00")) || bytes.HasPrefix(img.Data, []byte("MM\x00*")) {
			mediaType = "image/tiff" // not among net/http's sniffed types
		}
	}
	if !strings.HasPrefix(mediaType, "image/") {
		return "", &Error{Class: Permanent, Message: fmt.Sprintf("not an image (%s)", mediaType)}
	}
	return mediaType, nil
}

// Prompt is base followed by a batch's own instructions, if any.
func Prompt(base, instructions string) string {
	if instructions = strings.TrimSpace(instructions); instructions != "" {
		return base + "\nThe archive's own instructions for this batch:\n" + instructions
	}
	return base
}
