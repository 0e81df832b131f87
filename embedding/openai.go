package embedding

import (
	"cmp"
	"context"
	"fmt"
	"math"
	"net/http"
	"strings"
	"sync/atomic"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/packages/param"

	"github.com/arke-institute/orchestrator/provider"
)

// Defaults for OpenAIConfig fields left zero.
const (
	DefaultModel      = "text-embedding-3-small"
	DefaultDimensions = 512
	// DefaultBatchSize is spec 003's: ten chunks per request.
	DefaultBatchSize = 10
	DefaultTimeout   = time.Minute
)

// OpenAIConfig configures an OpenAI-compatible embeddings provider.
type OpenAIConfig struct {
	// URL is the API base; requests go to {URL}/embeddings (e.g.
	// https://api.openai.com/v1). Required.
	URL string
	// APIKey is sent as "Authorization: Bearer {APIKey}"; empty, none is
	// sent (a local server). Never logged nor put in an error.
	APIKey string
	// Model is the model asked for (DefaultModel if empty).
	Model string
	// Dimensions is the vectors' length, sent as the "dimensions"
	// parameter (text-embedding-3-* shorten their vectors so) and checked
	// in every answer (DefaultDimensions if zero). A model that refuses
	// the parameter (400 naming it) is asked again without it, and from
	// then on never with it: its own vectors must then be this long.
	Dimensions int
	// BatchSize is the most texts one request carries (DefaultBatchSize if
	// zero); Embed sends a longer list as several requests, in order.
	BatchSize int
	// Timeout bounds one request (DefaultTimeout if zero).
	Timeout time.Duration
	// MaxAnswerBytes bounds an answer's body (provider.DefaultMaxAnswerBytes
	// if zero); a longer answer is a permanent error.
	MaxAnswerBytes int64
	// HTTPClient sends the requests (default: a pooled client).
	HTTPClient *http.Client
}

// OpenAI is an Embedder calling an OpenAI-compatible /embeddings API
// through the official openai-go client, with its own retries off:
// retrying is the caller's business, under its rate limiter. Every answer
// is checked: one vector per input, each index once, each of Dimensions
// finite values.
type OpenAI struct {
	cfg    OpenAIConfig
	client *provider.Client
	svc    openai.EmbeddingService
	// native is set once the model refused the dimensions parameter.
	native atomic.Bool
}

var _ Embedder = (*OpenAI)(nil)

// NewOpenAI validates cfg, fills its defaults and returns the embedder. It
// reads no environment variables.
func NewOpenAI(cfg OpenAIConfig) (*OpenAI, error) {
	cfg.Model = cmp.Or(cfg.Model, DefaultModel)
	cfg.Dimensions = cmp.Or(cfg.Dimensions, DefaultDimensions)
	cfg.BatchSize = cmp.Or(cfg.BatchSize, DefaultBatchSize)
	cfg.Timeout = cmp.Or(cfg.Timeout, DefaultTimeout)
	if cfg.Dimensions < 1 || cfg.BatchSize < 1 {
		return nil, fmt.Errorf("embeddings: dimensions (%d) and batch size (%d) must be positive", cfg.Dimensions, cfg.BatchSize)
	}
	client, err := provider.NewClient("embeddings", provider.Config{
		URL:            cfg.URL,
		APIKey:         cfg.APIKey,
		Timeout:        cfg.Timeout,
		MaxAnswerBytes: cfg.MaxAnswerBytes,
		HTTPClient:     cfg.HTTPClient,
	})
	if err != nil {
		return nil, err
	}
	return &OpenAI{cfg: cfg, client: client, svc: openai.NewEmbeddingService(client.Options()...)}, nil
}

// Dimensions is cfg.Dimensions.
func (e *OpenAI) Dimensions() int { return e.cfg.Dimensions }

// Provider is the provider URL's host.
func (e *OpenAI) Provider() string { return e.client.Host() }

// Model is cfg.Model.
func (e *OpenAI) Model() string { return e.cfg.Model }

// BatchSize is the most texts one request carries.
func (e *OpenAI) BatchSize() int { return e.cfg.BatchSize }

// Embed sends texts in requests of at most BatchSize. An empty text is a
// permanent error (the API refuses it), found before anything is sent.
func (e *OpenAI) Embed(ctx context.Context, texts []string) ([][]float32, error) {
	for i, t := range texts {
		if strings.TrimSpace(t) == "" {
			return nil, e.client.Errorf(provider.Permanent, "text %d of %d is empty", i, len(texts))
		}
	}
	out := make([][]float32, 0, len(texts))
	for start := 0; start < len(texts); start += e.cfg.BatchSize {
		batch := texts[start:min(start+e.cfg.BatchSize, len(texts))]
		vectors, err := e.embedBatch(ctx, batch)
		if err != nil {
			return nil, err
		}
		out = append(out, vectors...)
	}
	return out, nil
}

func (e *OpenAI) embedBatch(ctx context.Context, texts []string) ([][]float32, error) {
	params := openai.EmbeddingNewParams{
		Model:          e.cfg.Model,
		Input:          openai.EmbeddingNewParamsInputUnion{OfArrayOfStrings: texts},
		EncodingFormat: openai.EmbeddingNewParamsEncodingFormatFloat,
	}
	native := e.native.Load()
	if !native {
		params.Dimensions = openai.Int(int64(e.cfg.Dimensions))
	}
	var answer *openai.CreateEmbeddingResponse
	call := func(ctx context.Context) error {
		var err error
		answer, err = e.svc.New(ctx, params)
		return err
	}
	err := e.client.Call(ctx, call)
	if !native && provider.Refused(err, "dimensions") {
		e.native.Store(true)
		native, params.Dimensions = true, param.Opt[int64]{}
		err = e.client.Call(ctx, call)
	}
	if err != nil {
		return nil, err
	}
	u := answer.Usage
	provider.Record(ctx, e.cfg.Model, provider.Answered(u.PromptTokens, 0, u.TotalTokens))
	if len(answer.Data) != len(texts) {
		return nil, e.client.Errorf(provider.Permanent, "malformed answer: %d embeddings for %d inputs", len(answer.Data), len(texts))
	}
	out := make([][]float32, len(texts))
	for i, d := range answer.Data {
		if !d.JSON.Index.Valid() || d.Index < 0 || d.Index >= int64(len(texts)) || out[d.Index] != nil {
			return nil, e.client.Errorf(provider.Permanent, "malformed answer: embedding %d has index %s", i, cmp.Or(d.JSON.Index.Raw(), "missing"))
		}
		if len(d.Embedding) != e.cfg.Dimensions {
			if native {
				return nil, e.client.Errorf(provider.Permanent, "model %s does not take the dimensions parameter and answers vectors of %d dimensions, not %d: configure %d dimensions", e.cfg.Model, len(d.Embedding), e.cfg.Dimensions, len(d.Embedding))
			}
			return nil, e.client.Errorf(provider.Permanent, "malformed answer: embedding %d has %d dimensions, not %d", d.Index, len(d.Embedding), e.cfg.Dimensions)
		}
		v := make([]float32, len(d.Embedding))
		var norm float64
		for j, x := range d.Embedding {
			if math.IsNaN(x) || math.IsInf(x, 0) {
				return nil, e.client.Errorf(provider.Permanent, "malformed answer: embedding %d is not finite", d.Index)
			}
			v[j] = float32(x)
			norm += x * x
		}
		if norm == 0 {
			return nil, e.client.Errorf(provider.Permanent, "malformed answer: embedding %d is zero", d.Index)
		}
		out[d.Index] = v
	}
	return out, nil
}
