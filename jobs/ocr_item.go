package jobs

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/arke-institute/orchestrator/blob"
	"github.com/arke-institute/orchestrator/config"
	"github.com/arke-institute/orchestrator/db"
	"github.com/arke-institute/orchestrator/ocr"
)

// ocrEngine is the OCR phase's item processing: read the ref, read the
// variant it names, transcribe it, and publish the ref with its text.
type ocrEngine struct {
	engine ocr.Engine
	// variants are the ref's variants to send, in order of preference:
	// the 800 px medium one to a provider (smaller uploads), the 1600 px
	// large one to tesseract (which reads small print poorly).
	variants []string
	store    blob.Store
	cfg      *config.Config
}

// Bounds on what an item reads: a ref is a small JSON document; an image
// larger than maxOCRImage is refused rather than sent (providers refuse
// them too).
const (
	maxRefBytes = 1 << 20
	maxOCRImage = 20 << 20
)

// NewOCREngine is the engine cfg asks for: an OpenAI-compatible provider
// at OCR_API_URL, else the local tesseract command. Without either, the
// engine is ocr.Unavailable, and every chunk stops with its message.
func NewOCREngine(cfg *config.Config) (ocr.Engine, error) {
	if cfg.OCR.APIURL != "" {
		return ocr.NewOpenAI(ocr.OpenAIConfig{URL: cfg.OCR.APIURL, APIKey: cfg.OCR.APIKey, Model: cfg.OCR.Model, Timeout: cfg.OCR.Timeout})
	}
	t, err := ocr.NewTesseract(ocr.TesseractConfig{Timeout: cfg.OCR.Timeout})
	if err != nil {
		return ocr.Unavailable{Name: "tesseract", Message: "no OCR engine: OCR_API_URL is not set and " + err.Error()}, err
	}
	return t, nil
}

// ocrVariants are the variants to send to engine, best first.
func ocrVariants(engine ocr.Engine) []string {
	if engine.Provider() == "tesseract" {
		return []string{"large", "medium"}
	}
	return []string{"medium", "large"}
}

// itemOutcome is how an item went: err is nil for a done item, classified
// (ocr.ClassOf) otherwise; called says whether the provider was asked,
// which is what the limiter hears about.
type itemOutcome struct {
	called        bool
	err           error
	retryAfter    time.Duration
	textLength    int
	publishedKey  string
	publishedSize int64
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

func (o ocrEngine) process(ctx context.Context, it db.ChunkItem) itemOutcome {
	ref, err := o.read(ctx, o.cfg.R2Bucket, it.R2Key, maxRefBytes, "the ref "+it.R2Key)
	if err != nil {
		return itemOutcome{err: err}
	}
	var doc map[string]json.RawMessage
	if err := json.Unmarshal(ref, &doc); err != nil || doc == nil {
		return itemOutcome{err: permanent("the ref %s is not a JSON object", it.R2Key)}
	}
	name, key, err := o.variant(doc)
	if err != nil {
		return itemOutcome{err: err}
	}
	img, err := o.read(ctx, o.cfg.CDNBucket, key, maxOCRImage, fmt.Sprintf("the %s variant %s", name, key))
	if err != nil {
		return itemOutcome{err: err}
	}
	res, err := o.engine.Transcribe(ctx, ocr.Image{Data: img})
	if err != nil {
		out := itemOutcome{called: true, err: err}
		if e, ok := errors.AsType[*ocr.Error](err); ok {
			out.retryAfter = e.RetryAfter
		}
		return out
	}
	record, err := json.Marshal(map[string]any{
		"text": res.Text, "model": res.Model, "provider": res.Provider, "at": time.Now().UTC().Format(time.RFC3339),
	})
	if err != nil {
		return itemOutcome{called: true, err: permanent("encoding the text: %v", err)}
	}
	doc["ocr"] = record
	body, err := json.Marshal(doc)
	if err != nil {
		return itemOutcome{called: true, err: permanent("encoding the ref: %v", err)}
	}
	published := ocrRefKey(it.R2Key)
	if err := o.store.Put(ctx, o.cfg.R2Bucket, published, bytes.NewReader(body), int64(len(body)), "application/json"); err != nil {
		return itemOutcome{called: true, err: &ocr.Error{Class: ocr.Transient, Message: fmt.Sprintf("writing %s: %v", published, err), Err: err}}
	}
	return itemOutcome{called: true, textLength: len(res.Text), publishedKey: published, publishedSize: int64(len(body))}
}

// ocrRefKey is where a ref is published with its text: beside it, its
// name still ending in .ref.json.
func ocrRefKey(refKey string) string {
	return strings.TrimSuffix(refKey, ".ref.json") + ".ocr.ref.json"
}

// read reads an object of at most limit bytes.
func (o ocrEngine) read(ctx context.Context, bucket, key string, limit int64, what string) ([]byte, error) {
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
// outside CDN_PUBLIC_URL is refused: the orchestrator reads only its own
// bucket, never a URL a ref names.
func (o ocrEngine) variant(doc map[string]json.RawMessage) (name, key string, err error) {
	var variants map[string]string
	if raw, ok := doc["variants"]; !ok || json.Unmarshal(raw, &variants) != nil {
		return "", "", permanent("the ref has no variants")
	}
	for _, name := range o.variants {
		u, ok := variants[name]
		if !ok {
			continue
		}
		prefix := o.cfg.CDNPublicURL + "/"
		if o.cfg.CDNPublicURL == "" || !strings.HasPrefix(u, prefix) || strings.Contains(u[len(prefix):], "..") {
			return "", "", permanent("the %s variant's URL %q is not under CDN_PUBLIC_URL", name, u)
		}
		return name, strings.SplitN(u[len(prefix):], "?", 2)[0], nil
	}
	return "", "", permanent("the ref has none of the variants %s", strings.Join(o.variants, ", "))
}
