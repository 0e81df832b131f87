package provider

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
)

// Defaults for Config fields left zero.
const (
	DefaultTimeout        = time.Minute
	DefaultMaxAnswerBytes = 4 << 20
)

// Config configures a Client for an OpenAI-compatible API.
type Config struct {
	// URL is the API base; requests go to {URL}/chat/completions,
	// {URL}/embeddings... (e.g. https://api.openai.com/v1). Required.
	URL string
	// APIKey is sent as "Authorization: Bearer {APIKey}"; empty, no
	// Authorization is sent (a local server: Ollama, vLLM, llama.cpp). It
	// is never logged nor put in an error.
	APIKey string
	// Timeout bounds one call, answer included (DefaultTimeout if zero).
	Timeout time.Duration
	// MaxAnswerBytes bounds the answer's body, error answers included
	// (DefaultMaxAnswerBytes if zero); a longer answer is a permanent error.
	MaxAnswerBytes int64
	// HTTPClient sends the requests (default: a pooled client; the timeout
	// is Timeout's, through the context).
	HTTPClient *http.Client
}

// Client is the shared setup of an openai-go service for one provider: its
// options (base URL, key, no retries of its own, the guard middleware) and
// Call, which bounds a call and classifies its failure. Retrying is the
// caller's business, under its rate limiter. A Client is safe for
// concurrent use.
type Client struct {
	service string
	host    string
	cfg     Config
}

// NewClient validates cfg and fills its defaults. service names the kind
// of call in errors ("embeddings", "tags"). It reads no environment
// variables (the openai-go defaults are not used).
func NewClient(service string, cfg Config) (*Client, error) {
	u, err := url.Parse(cfg.URL)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("%s: provider URL %q is not an http(s) URL", service, cfg.URL)
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
	return &Client{service: service, host: u.Host, cfg: cfg}, nil
}

// Host is the provider URL's host: the provider's name, what its rate
// limit is keyed by.
func (c *Client) Host() string { return c.host }

// Timeout is the bound of one call.
func (c *Client) Timeout() time.Duration { return c.cfg.Timeout }

// Options are the openai-go request options for a service of this
// provider (openai.NewEmbeddingService(c.Options()...)).
func (c *Client) Options() []option.RequestOption {
	opts := []option.RequestOption{
		option.WithBaseURL(strings.TrimSuffix(c.cfg.URL, "/") + "/"),
		option.WithHTTPClient(c.cfg.HTTPClient),
		option.WithMaxRetries(0),
		option.WithMiddleware(c.guard),
	}
	if c.cfg.APIKey != "" {
		opts = append(opts, option.WithAPIKey(c.cfg.APIKey))
	} else {
		opts = append(opts, option.WithHeaderDel("Authorization"))
	}
	return opts
}

// KeyMissing reports that a provider at url needs a key it was not given:
// one reached over https (a service on the internet) does; a plain http
// one (a server of your own: Ollama, vLLM, llama.cpp) may take none.
func KeyMissing(url, key string) bool {
	return key == "" && strings.HasPrefix(strings.ToLower(url), "https://")
}

// Errorf is a classified error of this client's service.
func (c *Client) Errorf(class Class, format string, args ...any) *Error {
	return &Error{Service: c.service, Class: class, Message: fmt.Sprintf(format, args...)}
}

// Call runs do with a context bounded by the Timeout and classifies its
// failure: an *Error, except that a cancelled ctx yields an error wrapping
// ctx.Err() (the caller's deadline is not the provider's fault). A
// timeout is transient; an answer openai-go cannot decode is permanent.
func (c *Client) Call(ctx context.Context, do func(ctx context.Context) error) error {
	callCtx, cancel := context.WithTimeout(ctx, c.cfg.Timeout)
	defer cancel()
	err := do(callCtx)
	if err == nil {
		return nil
	}
	switch {
	case ctx.Err() != nil:
		return fmt.Errorf("%s: calling %s: %w", c.service, c.host, ctx.Err())
	case callCtx.Err() != nil:
		return &Error{Service: c.service, Class: Transient, Timeout: true, Message: fmt.Sprintf("no answer from %s within %s", c.host, c.cfg.Timeout), Err: err}
	}
	if pe, ok := errors.AsType[*Error](err); ok {
		return pe
	}
	if ae, ok := errors.AsType[*openai.Error](err); ok { // not expected: guard answers every status >= 300
		return StatusError(c.service, ae.StatusCode, ae.Response.Header, []byte(ae.RawJSON()))
	}
	return &Error{Service: c.service, Class: Permanent, Message: "undecodable answer: " + err.Error(), Err: err}
}

// guard is the client middleware that owns the HTTP side: it classifies
// transport errors and error statuses itself (openai-go would lose the
// status of an answer whose body is not its JSON error shape), and bounds
// every answer's body.
func (c *Client) guard(req *http.Request, next option.MiddlewareNext) (*http.Response, error) {
	res, err := next(req)
	if err != nil {
		if req.Context().Err() != nil {
			return nil, err // Call tells a timeout from a cancellation
		}
		return nil, &Error{Service: c.service, Class: Transient, Message: "calling the provider: " + err.Error(), Err: err}
	}
	if res.StatusCode >= 300 {
		body, readErr := io.ReadAll(io.LimitReader(res.Body, c.cfg.MaxAnswerBytes))
		_ = res.Body.Close()
		if readErr != nil && req.Context().Err() == nil {
			return nil, &Error{Service: c.service, Class: Transient, Status: res.StatusCode, Message: "reading the provider's error answer: " + readErr.Error(), Err: readErr}
		}
		return nil, StatusError(c.service, res.StatusCode, res.Header, body)
	}
	res.Body = &boundedBody{rc: res.Body, left: c.cfg.MaxAnswerBytes, service: c.service}
	return res, nil
}

// StatusError classifies an answer with an error status: 429 is
// RateLimited (with its Retry-After), 401 and 403 Auth, 408 and 5xx
// Transient (a 503 with its Retry-After), any other Permanent (400, 404,
// 413, 415, 422: what retrying cannot mend).
func StatusError(service string, status int, h http.Header, body []byte) *Error {
	e := &Error{Service: service, Status: status, Message: AnswerMessage(status, body)}
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
	default:
		e.Class = Permanent
	}
	return e
}

// AnswerMessage is the provider's own words from an error answer:
// {"error": {"message": ...}}, {"error": "..."}, {"message": ...},
// {"detail": ...} or a short plain-text body; else the status text.
func AnswerMessage(status int, body []byte) string {
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

// boundedBody fails a read past its limit with a permanent error (an
// answer of megabytes is a broken provider) and classifies a broken
// connection mid-answer as transient.
type boundedBody struct {
	rc      io.ReadCloser
	left    int64
	service string
}

func (b *boundedBody) Read(p []byte) (int, error) {
	if b.left <= 0 {
		// One byte more tells a body of exactly the limit from a longer one.
		var one [1]byte
		if n, _ := b.rc.Read(one[:]); n > 0 {
			return 0, &Error{Service: b.service, Class: Permanent, Message: "the answer is larger than the limit"}
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
			err = &Error{Service: b.service, Class: Transient, Message: "reading the answer: " + err.Error(), Err: err}
		}
	}
	return n, err
}

func (b *boundedBody) Close() error { return b.rc.Close() }
