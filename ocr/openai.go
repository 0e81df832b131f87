package ocr

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
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
	cfg      OpenAIConfig
	provider string
	chat     openai.ChatCompletionService
}

var _ Engine = (*OpenAI)(nil)

// NewOpenAI validates cfg, fills its defaults and returns the engine. It
// reads no environment variables (the openai-go defaults are not used).
func NewOpenAI(cfg OpenAIConfig) (*OpenAI, error) {
	u, err := url.Parse(cfg.URL)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("ocr: provider URL %q is not an http(s) URL", cfg.URL)
	}
	if cfg.APIKey == "" {
		return nil, errors.New("ocr: the provider needs an API key")
	}
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
	if cfg.HTTPClient == nil {
		tr := http.DefaultTransport.(*http.Transport).Clone()
		tr.MaxIdleConnsPerHost = 64
		cfg.HTTPClient = &http.Client{Transport: tr}
	}
	e := &OpenAI{cfg: cfg, provider: u.Host}
	e.chat = openai.NewChatCompletionService(
		option.WithBaseURL(strings.TrimSuffix(cfg.URL, "/")+"/"),
		option.WithAPIKey(cfg.APIKey),
		option.WithHTTPClient(cfg.HTTPClient),
		option.WithMaxRetries(0),
		option.WithMiddleware(e.guard),
	)
	return e, nil
}

// Provider is the name results carry: the provider URL's host.
func (e *OpenAI) Provider() string { return e.provider }

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
				openai.TextContentPart(e.cfg.Prompt),
				openai.ImageContentPart(openai.ChatCompletionContentPartImageImageURLParam{URL: dataURL}),
			}),
		},
	}
	callCtx, cancel := context.WithTimeout(ctx, e.cfg.Timeout)
	defer cancel()
	answer, err := e.chat.New(callCtx, params)
	if err != nil {
		switch {
		case ctx.Err() != nil:
			return Result{}, fmt.Errorf("ocr: calling %s: %w", e.provider, ctx.Err())
		case callCtx.Err() != nil:
			return Result{}, &Error{Class: Transient, Message: fmt.Sprintf("no answer from %s within %s", e.provider, e.cfg.Timeout), Err: err}
		}
		if oe, ok := errors.AsType[*Error](err); ok {
			return Result{}, oe
		}
		if ae, ok := errors.AsType[*openai.Error](err); ok { // not expected: guard answers every status >= 400
			return Result{}, statusError(ae.StatusCode, ae.Response.Header, []byte(ae.RawJSON()))
		}
		return Result{}, &Error{Class: Permanent, Message: "undecodable answer: " + err.Error(), Err: err}
	}
	if len(answer.Choices) == 0 {
		return Result{}, &Error{Class: Permanent, Message: "the answer has no choices"}
	}
	model := answer.Model
	if model == "" {
		model = e.cfg.Model
	}
	return Result{Text: answer.Choices[0].Message.Content, Model: model, Provider: e.provider}, nil
}

// guard is the client middleware that owns the HTTP side: it classifies
// transport errors and error statuses itself (openai-go would lose the
// status of an answer whose body is not its JSON error shape), and bounds
// every answer's body.
func (e *OpenAI) guard(req *http.Request, next option.MiddlewareNext) (*http.Response, error) {
	res, err := next(req)
	if err != nil {
		if req.Context().Err() != nil {
			return nil, err // Transcribe tells a timeout from a cancellation
		}
		return nil, &Error{Class: Transient, Message: "calling the provider: " + err.Error(), Err: err}
	}
	if res.StatusCode >= 300 {
		body, readErr := io.ReadAll(io.LimitReader(res.Body, e.cfg.MaxAnswerBytes))
		_ = res.Body.Close()
		if readErr != nil && req.Context().Err() == nil {
			return nil, &Error{Class: Transient, Status: res.StatusCode, Message: "reading the provider's error answer: " + readErr.Error(), Err: readErr}
		}
		return nil, statusError(res.StatusCode, res.Header, body)
	}
	res.Body = &boundedBody{rc: res.Body, left: e.cfg.MaxAnswerBytes}
	return res, nil
}

// statusError classifies an answer with an error status.
func statusError(status int, h http.Header, body []byte) *Error {
	e := &Error{Status: status, Message: providerMessage(status, body)}
	switch {
	case status == http.StatusTooManyRequests:
		e.Class = RateLimited
		e.RetryAfter = ParseRetryAfter(h.Get("Retry-After"), time.Now())
	case status == http.StatusUnauthorized || status == http.StatusForbidden:
		e.Class = Auth
	case status == http.StatusRequestTimeout || status >= 500:
		e.Class = Transient
		if status == http.StatusServiceUnavailable {
			e.RetryAfter = ParseRetryAfter(h.Get("Retry-After"), time.Now())
		}
	default: // 400, 404, 413, 415, 422 and the other statuses retrying cannot mend
		e.Class = Permanent
	}
	return e
}

// providerMessage is the provider's own words from an error answer:
// {"error": {"message": ...}}, {"error": "..."}, {"message": ...} or a short
// plain-text body; else the status text.
func providerMessage(status int, body []byte) string {
	var shaped struct {
		Error   json.RawMessage `json:"error"`
		Message string          `json:"message"`
		Detail  string          `json:"detail"`
	}
	if json.Unmarshal(body, &shaped) == nil {
		var inner struct {
			Message string `json:"message"`
		}
		var s string
		switch {
		case json.Unmarshal(shaped.Error, &inner) == nil && inner.Message != "":
			return inner.Message
		case json.Unmarshal(shaped.Error, &s) == nil && s != "":
			return s
		case shaped.Message != "":
			return shaped.Message
		case shaped.Detail != "":
			return shaped.Detail
		}
	} else if text := strings.TrimSpace(string(body)); text != "" && utf8.ValidString(text) && !bytes.ContainsAny(body, "<>") {
		const limit = 300
		if len(text) > limit {
			text = text[:limit] + "..."
		}
		return text
	}
	return http.StatusText(status)
}

// ParseRetryAfter reads a Retry-After header value, delay-seconds or an
// HTTP date, as a duration from now; 0 when empty, unparsable or past.
func ParseRetryAfter(v string, now time.Time) time.Duration {
	v = strings.TrimSpace(v)
	if v == "" {
		return 0
	}
	if n, err := strconv.ParseInt(v, 10, 64); err == nil {
		if n <= 0 {
			return 0
		}
		return time.Duration(min(n, 24*3600)) * time.Second
	}
	if t, err := http.ParseTime(v); err == nil && t.After(now) {
		return t.Sub(now)
	}
	return 0
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

// boundedBody fails a read past its limit with a permanent error (a page's
// text is kilobytes; megabytes is a broken provider) and classifies a
// broken connection mid-answer as transient.
type boundedBody struct {
	rc   io.ReadCloser
	left int64
}

func (b *boundedBody) Read(p []byte) (int, error) {
	if b.left <= 0 {
		// One byte more tells a body of exactly the limit from a longer one.
		var one [1]byte
		if n, _ := b.rc.Read(one[:]); n > 0 {
			return 0, &Error{Class: Permanent, Message: "the answer is larger than the limit"}
		}
		return 0, io.EOF
	}
	if int64(len(p)) > b.left {
		p = p[:b.left]
	}
	n, err := b.rc.Read(p)
	b.left -= int64(n)
	if err != nil && !errors.Is(err, io.EOF) {
		if _, ok := errors.AsType[*Error](err); !ok {
			err = &Error{Class: Transient, Message: "reading the answer: " + err.Error(), Err: err}
		}
	}
	return n, err
}

func (b *boundedBody) Close() error { return b.rc.Close() }
