// Package ocrrefs is the engine of the OCR phase (spec 004), a chunked
// phase: an item is an image ref (the image phase's .ref.json); the engine
// reads it, reads the variant it names from the CDN bucket, transcribes it
// (package ocr: an OpenAI-compatible provider, or the local tesseract),
// and publishes the ref with its text beside it as a new object, which
// the phase's transform puts in the file list.
package ocrrefs

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/url"
	"strings"
	"time"

	"github.com/arke-institute/orchestrator/blob"
	"github.com/arke-institute/orchestrator/executor/chunked"
	"github.com/arke-institute/orchestrator/jobs"
	"github.com/arke-institute/orchestrator/ocr"
	"github.com/arke-institute/orchestrator/phases"
	"github.com/arke-institute/orchestrator/ratelimit"
)

// Name is the engine's name, which the OCR phase's Spec.Engine gives.
const Name = "ocr"

// Engine is the OCR phase's item processing: read the ref, read the
// variant it names, transcribe it, and publish the ref with its text.
type Engine struct {
	engine ocr.Engine
	// variants are the ref's variants to send, in order of preference:
	// the 800 px medium one to a provider (smaller uploads), the 1600 px
	// large one to tesseract (which reads small print poorly).
	variants []string
	store    blob.Store
	cfg      Config
	// buckets and cdnPublicURL say where refs and variants are.
	buckets      map[phases.Bucket]string
	cdnPublicURL string
}

var _ chunked.Engine = (*Engine)(nil)

// New is the engine of cfg over the transcriber engine (nil: the one cfg
// asks for, NewTranscriber; without one, every chunk stops with why),
// reading and writing the buckets of settings in store.
func New(cfg Config, settings jobs.Settings, store blob.Store, engine ocr.Engine, logger *slog.Logger) *Engine {
	if engine == nil {
		var err error
		if engine, err = NewTranscriber(cfg); err != nil {
			logger.Warn("the OCR phase has no engine: its chunks will stop with this error", "error", err)
		}
	}
	return &Engine{engine: engine, variants: variantsFor(engine), store: store, cfg: cfg,
		buckets: settings.Buckets, cdnPublicURL: settings.CDNPublicURL}
}

// Name is Name.
func (o *Engine) Name() string { return Name }

// Provider is the transcriber's: "tesseract" or the API's host.
func (o *Engine) Provider() string { return o.engine.Provider() }

// Tuning is the OCR_* settings' (spec 004's).
func (o *Engine) Tuning() chunked.Tuning { return o.cfg.Tuning }

// LimitKey is the limiter bucket a batch's OCR chunk takes its tokens
// from: "ocr:" (or the shared bucket's name) and the provider (OCR_API_URL's
// host, or "tesseract"), one for every chunk of every process; with
// OCR_LIMIT_PER_CHUNK, one per chunk as spec 004 has it
// ("ocr:<provider>:<batch>:<chunk>").
func (o *Engine) LimitKey(batchID, chunkID string) string {
	provider := "tesseract"
	if u, err := url.Parse(o.cfg.APIURL); err == nil && o.cfg.APIURL != "" {
		provider = u.Host
	}
	key := cmp.Or(o.cfg.Bucket, ratelimit.RoleOCR) + ":" + provider
	if o.cfg.LimitPerChunk {
		key += ":" + batchID + ":" + chunkID
	}
	return key
}

// Bounds on what an item reads: a ref is a small JSON document; an image
// larger than maxOCRImage is refused rather than sent (providers refuse
// them too).
const (
	maxRefBytes = 1 << 20
	maxOCRImage = 20 << 20
)

// NewTranscriber is the transcriber cfg asks for: an OpenAI-compatible
// provider at OCR_API_URL, else the local tesseract command. Without
// either, it is ocr.Unavailable, and every chunk stops with its message.
func NewTranscriber(cfg Config) (ocr.Engine, error) {
	if cfg.APIURL != "" {
		return ocr.NewOpenAI(ocr.OpenAIConfig{URL: cfg.APIURL, APIKey: cfg.APIKey, Model: cfg.Model, Timeout: cfg.Tuning.Timeout})
	}
	t, err := ocr.NewTesseract(ocr.TesseractConfig{Timeout: cfg.Tuning.Timeout})
	if err != nil {
		return ocr.Unavailable{Name: "tesseract", Message: "no OCR engine: OCR_API_URL is not set and " + err.Error()}, err
	}
	return t, nil
}

// variantsFor are the variants to send to engine, best first.
func variantsFor(engine ocr.Engine) []string {
	if engine.Provider() == "tesseract" {
		return []string{"large", "medium"}
	}
	return []string{"medium", "large"}
}

// permanent is an item failure no retry mends: the ref or its variant is
// missing or malformed.
func permanent(format string, args ...any) error {
	return &ocr.Error{Class: ocr.Permanent, Message: fmt.Sprintf(format, args...)}
}

// storageError classifies a storage failure: a missing object is
// permanent (what, e.g. "the ref", says which), anything else transient.
func storageError(what string, err error) error {
	if errors.Is(err, blob.ErrNotFound) {
		return permanent("%s is missing", what)
	}
	return &ocr.Error{Class: ocr.Transient, Message: fmt.Sprintf("reading %s: %v", what, err), Err: err}
}

// Process transcribes one ref's image and publishes the ref with its text;
// the outcome's result is phases.OCRResult.
func (o *Engine) Process(ctx context.Context, it chunked.Item) chunked.Outcome {
	ref, err := o.read(ctx, o.buckets[phases.StagingBucket], it.R2Key, maxRefBytes, "the ref "+it.R2Key)
	if err != nil {
		return chunked.Outcome{Err: err}
	}
	var doc map[string]json.RawMessage
	if err := json.Unmarshal(ref, &doc); err != nil || doc == nil {
		return chunked.Outcome{Err: permanent("the ref %s is not a JSON object", it.R2Key)}
	}
	name, key, err := o.variant(doc, it.BatchID)
	if err != nil {
		return chunked.Outcome{Err: err}
	}
	img, err := o.read(ctx, o.buckets[phases.CDNBucket], key, maxOCRImage, fmt.Sprintf("the %s variant %s", name, key))
	if err != nil {
		return chunked.Outcome{Err: err}
	}
	res, err := o.engine.Transcribe(ctx, ocr.Image{Data: img, Instructions: it.Instructions})
	if err != nil {
		out := chunked.Outcome{Called: true, Err: err}
		if e, ok := errors.AsType[*ocr.Error](err); ok {
			out.RetryAfter = e.RetryAfter
		}
		return out
	}
	record, err := json.Marshal(map[string]any{
		"text": res.Text, "model": res.Model, "provider": res.Provider, "at": time.Now().UTC().Format(time.RFC3339),
	})
	if err != nil {
		return chunked.Outcome{Called: true, Err: permanent("encoding the text: %v", err)}
	}
	doc["ocr"] = record
	body, err := json.Marshal(doc)
	if err != nil {
		return chunked.Outcome{Called: true, Err: permanent("encoding the ref: %v", err)}
	}
	published := ocrRefKey(it.R2Key)
	if err := o.store.Put(ctx, o.buckets[phases.StagingBucket], published, bytes.NewReader(body), int64(len(body)), "application/json"); err != nil {
		return chunked.Outcome{Called: true, Err: &ocr.Error{Class: ocr.Transient, Message: fmt.Sprintf("writing %s: %v", published, err), Err: err}}
	}
	result, err := json.Marshal(phases.OCRResult{TextLength: len(strings.TrimSpace(res.Text)), RefR2Key: published, RefSize: int64(len(body))})
	if err != nil {
		return chunked.Outcome{Called: true, Err: permanent("encoding the result: %v", err)}
	}
	return chunked.Outcome{Called: true, Result: result}
}

// ocrRefKey is where a ref is published with its text: beside it, its
// name still ending in .ref.json.
func ocrRefKey(refKey string) string {
	return strings.TrimSuffix(refKey, ".ref.json") + ".ocr.ref.json"
}

// read reads an object of at most limit bytes.
func (o *Engine) read(ctx context.Context, bucket, key string, limit int64, what string) ([]byte, error) {
	rc, size, err := o.store.Open(ctx, bucket, key)
	if err != nil {
		return nil, storageError(what, err)
	}
	defer rc.Close()
	if size > limit {
		return nil, permanent("%s is %d bytes, more than the %d allowed", what, size, limit)
	}
	b, err := io.ReadAll(io.LimitReader(rc, limit+1))
	if err != nil {
		return nil, storageError(what, err)
	}
	if int64(len(b)) > limit {
		return nil, permanent("%s is more than the %d bytes allowed", what, limit)
	}
	return b, nil
}

// variant picks the variant to send from a ref's variants (the image
// phase's RefData) and turns its URL into its key in the CDN bucket. A URL
// outside CDN_PUBLIC_URL, or a key outside batchID's variants
// (phases.CheckKey), is refused: the orchestrator reads only its own
// bucket's objects of the batch, never a URL a ref names (a worker wrote
// the ref).
func (o *Engine) variant(doc map[string]json.RawMessage, batchID string) (name, key string, err error) {
	var variants map[string]string
	if raw, ok := doc["variants"]; !ok || json.Unmarshal(raw, &variants) != nil {
		return "", "", permanent("the ref has no variants")
	}
	for _, name := range o.variants {
		u, ok := variants[name]
		if !ok {
			continue
		}
		prefix := o.cdnPublicURL + "/"
		if o.cdnPublicURL == "" || !strings.HasPrefix(u, prefix) {
			return "", "", permanent("the %s variant's URL %q is not under CDN_PUBLIC_URL", name, u)
		}
		key := strings.SplitN(u[len(prefix):], "?", 2)[0]
		if err := phases.CheckKey(key, phases.BatchPrefix(phases.CDNBucket, batchID)); err != nil {
			return "", "", permanent("the %s variant's URL %q is not one of the batch's variants: %v", name, u, err)
		}
		return name, key, nil
	}
	return "", "", permanent("the ref has none of the variants %s", strings.Join(o.variants, ", "))
}
