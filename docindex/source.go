package docindex

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"strings"
	"unicode/utf8"

	"github.com/arke-institute/orchestrator/blob"
	"github.com/arke-institute/orchestrator/db"
	"github.com/arke-institute/orchestrator/phases"
	"github.com/arke-institute/orchestrator/textchunk"
)

// A document's text is assembled by its download step when the document
// is not one object's content (documents.source, phases.DocumentSource): a
// PDF's pages, an OCR'd ref's text. Assembling in the step, rather than
// writing the text to an object first, keeps the phase's transition free
// of object I/O (it holds the batch's exclusive lock), needs no job or
// object of its own, and a retried download reads the parts again.

// text is doc's text: the object at its key, or assembled from its
// source; at most DOCUMENT_MAX_BYTES of UTF-8.
func (w *DocumentStepWorker) text(ctx context.Context, doc db.Document) ([]byte, error) {
	limit := w.cfg.MaxBytes
	if len(doc.Source) == 0 {
		return w.readText(ctx, doc.R2Key, limit)
	}
	var src phases.DocumentSource
	if err := json.Unmarshal(doc.Source, &src); err != nil {
		return nil, permanentf("reading the document's source: %v", err)
	}
	if src.OCRRef {
		t, err := w.ocrText(ctx, doc.R2Key, limit)
		return []byte(t), err
	}
	pages := make([]string, len(src.Pages))
	total := int64(0)
	for i, key := range src.Pages {
		var err error
		switch {
		case key == "":
		case strings.HasSuffix(key, ".ref.json"):
			pages[i], err = w.ocrText(ctx, key, limit-total)
		default:
			var b []byte
			b, err = w.readText(ctx, key, limit-total)
			pages[i] = string(b)
		}
		if err != nil {
			return nil, err
		}
		total += int64(len(pages[i]))
	}
	text := textchunk.JoinPages(pages)
	if int64(len(text)) > limit {
		return nil, permanentf("document is more than DOCUMENT_MAX_BYTES (%d) bytes", limit)
	}
	return []byte(text), nil
}

// readText reads the object at key: UTF-8 text of at most limit bytes.
func (w *DocumentStepWorker) readText(ctx context.Context, key string, limit int64) ([]byte, error) {
	bucket := w.deps.Settings.StagingBucket()
	body, size, err := w.deps.Store.Open(ctx, bucket, key)
	if errors.Is(err, blob.ErrNotFound) {
		return nil, permanentf("document s3://%s/%s does not exist", bucket, key)
	}
	if err != nil {
		return nil, err
	}
	defer body.Close()
	maxBytes := w.cfg.MaxBytes
	if size > limit {
		return nil, permanentf("document is more than DOCUMENT_MAX_BYTES (%d) bytes", maxBytes)
	}
	data, err := io.ReadAll(io.LimitReader(body, limit+1))
	if err != nil {
		return nil, err
	}
	if int64(len(data)) > limit {
		return nil, permanentf("document is more than DOCUMENT_MAX_BYTES (%d) bytes", maxBytes)
	}
	if !utf8.Valid(data) {
		return nil, permanentf("document s3://%s/%s is not UTF-8 text", bucket, key)
	}
	return data, nil
}

// ocrText is the OCR text of the ref at key (its "ocr" member's "text",
// as the OCR phase publishes it), of at most limit bytes.
func (w *DocumentStepWorker) ocrText(ctx context.Context, key string, limit int64) (string, error) {
	// The ref's JSON around the text is small; a ref is read up to the
	// limit and a little more.
	data, err := w.readText(ctx, key, limit+64<<10)
	if err != nil {
		return "", err
	}
	var ref struct {
		OCR *struct {
			Text *string `json:"text"`
		} `json:"ocr"`
	}
	if err := json.Unmarshal(data, &ref); err != nil {
		return "", permanentf("the ref %s is not JSON: %v", key, err)
	}
	if ref.OCR == nil || ref.OCR.Text == nil {
		return "", permanentf("the ref %s has no OCR text", key)
	}
	if int64(len(*ref.OCR.Text)) > limit {
		return "", permanentf("document is more than DOCUMENT_MAX_BYTES (%d) bytes", w.cfg.MaxBytes)
	}
	return *ref.OCR.Text, nil
}
