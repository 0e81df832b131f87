package phases

import (
	"encoding/json"
	"errors"
	"path"
	"regexp"
	"strconv"
	"strings"
)

// OCR transcribes the text of image refs whose directory asked for OCR
// (spec 004), after IMAGE_PROCESSING made the refs.
const OCR Name = "OCR"

// TagOCR marks a ref whose published version carries its OCR text.
const TagOCR = "OCR"

// TagOCRNoText marks, beside TagOCR, a ref in which OCR found no text (a
// photograph, a blank page): it is OCR'd, so never sent again, and has no
// text to index, so it makes no document.
const TagOCRNoText = "OCR:no-text"

// DefaultOCRChunkSize bounds an OCR chunk unless OCR_CHUNK_SIZE (directory
// groups, spec 004's PIs) and OCR_CHUNK_REFS say otherwise: a chunk is the
// unit of the phase's concurrency (it keeps MAX_CONCURRENT_PER_ALARM refs
// in flight), so a directory of thousands of pages is split into many.
var DefaultOCRChunkSize = ChunkSize{Groups: 10, Refs: 50}

// SkipTextLayer is why a PDF page is skipped: the PDF phase already wrote
// its text layer next to it.
const SkipTextLayer = "page has a text layer"

// OCRResult is the outcome of one OCR item: the body Transform reads from
// a done item's task. Error is set instead of the ref fields when the item
// failed.
type OCRResult struct {
	TextLength int    `json:"text_length"`
	RefR2Key   string `json:"ref_r2_key,omitempty"` // the published ref, a new object
	RefSize    int64  `json:"ref_size,omitempty"`
	Error      string `json:"error,omitempty"`
}

// ChunkItem is one ref of a chunk. Index is its position in the file list
// it was chunked from; SkipReason, when set, means it is not sent.
type ChunkItem struct {
	Index      int
	Ref        File
	SkipReason string
}

// Chunk is one chunk of a batch's OCR phase: ID is its index ("0",
// "1", ...), Groups the directory paths it holds, Items their refs in
// list order.
type Chunk struct {
	ID     string
	Groups []string
	Items  []ChunkItem
}

// ocr runs in-process in chunks (the chunked executor), its items
// processed by the "ocr" engine.
type ocr struct{}

var _ Chunker = ocr{}

// Spec: chunks of DefaultOCRChunkSize, no machines.
func (ocr) Spec() Spec {
	return Spec{
		Name:       OCR,
		TaskPrefix: "ocr",
		Short:      "OCR",
		Title:      "OCR of image refs",
		Executor:   "chunked",
		Engine:     "ocr",
		Defaults:   Defaults{ChunkSize: DefaultOCRChunkSize},
	}
}

// Discover finds image refs (PDF pages included) whose directory asked
// for OCR and that carry no OCR yet, so a re-run never sends a ref twice.
func (ocr) Discover(files []File) []File { return filter(files, isOCRRef) }

// MayWork is an image's ref to OCR (Screener).
func (ocr) MayWork(f File) bool { return isOCRRef(f) }

func isOCRRef(f File) bool {
	return f.ProcessingConfig.OCR && hasTag(f, TagImageProcessor) && !hasTag(f, TagOCR) &&
		strings.HasSuffix(f.FileName, ".ref.json")
}

// pdfPageRef matches a PDF page's ref name, capturing "{stem}-p{N}".
var pdfPageRef = regexp.MustCompile(`^(.+-p[0-9]+)\.jpg\.ref\.json$`)

// OCRSkipped returns, by index into files, the refs Discover finds that
// need no OCR and why: a PDF page {stem}-p{N}.jpg.ref.json whose text
// {stem}-p{N}.txt, tagged PdfPages:text, lies in the same directory.
func OCRSkipped(files []File) map[int]string {
	texts := map[string]bool{}
	for _, f := range files {
		if hasTag(f, TagPDFText) {
			texts[path.Join(path.Dir(f.LogicalPath), f.FileName)] = true
		}
	}
	out := map[int]string{}
	for i, f := range files {
		if !isOCRRef(f) {
			continue
		}
		m := pdfPageRef.FindStringSubmatch(f.FileName)
		if m != nil && texts[path.Join(path.Dir(f.LogicalPath), m[1]+".txt")] {
			out[i] = SkipTextLayer
		}
	}
	return out
}

// OCRChunks groups the refs Work finds (kept ones are no items) by their
// manifest directory (DirectoryPath), in order of first appearance, and
// packs them, group after group in list order, into chunks of at most
// size.Groups groups and size.Refs refs (each at least 1) with ids "0",
// "1", ... in order, as spec 004 chunks PIs, but splitting a group of more
// refs than a chunk holds. Skipped refs are items too, marked.
func OCRChunks(files []File, size ChunkSize) []Chunk {
	size.Groups, size.Refs = max(size.Groups, 1), max(size.Refs, 1)
	skipped := OCRSkipped(files)
	var order []string
	groups := map[string][]ChunkItem{}
	for i, f := range files {
		if !isOCRRef(f) || f.Kept {
			continue
		}
		if _, ok := groups[f.DirectoryPath]; !ok {
			order = append(order, f.DirectoryPath)
		}
		groups[f.DirectoryPath] = append(groups[f.DirectoryPath], ChunkItem{Index: i, Ref: f, SkipReason: skipped[i]})
	}
	var chunks []Chunk
	var c *Chunk
	for _, g := range order {
		for items := groups[g]; len(items) > 0; {
			if c == nil || len(c.Groups) == size.Groups || len(c.Items) == size.Refs {
				chunks = append(chunks, Chunk{ID: strconv.Itoa(len(chunks))})
				c = &chunks[len(chunks)-1]
			}
			n := min(len(items), size.Refs-len(c.Items))
			c.Groups = append(c.Groups, g)
			c.Items = append(c.Items, items[:n:n]...)
			items = items[n:]
		}
	}
	return chunks
}

// Chunks is OCRChunks.
func (ocr) Chunks(files []File, size ChunkSize) []Chunk { return OCRChunks(files, size) }

// Transform replaces a done item's ref by its published version: the new
// object and size, tagged OCR, and OCR:no-text when OCR found none. A failed or skipped item (no completed
// task) passes through unchanged.
func (ocr) Transform(file File, task *Task) ([]File, error) {
	var res OCRResult
	ok, err := completedResult(task, &res)
	if !ok {
		return []File{file}, nil
	}
	if err != nil {
		return nil, err
	}
	if res.Error != "" {
		return []File{file}, nil
	}
	if res.RefR2Key == "" || res.RefSize <= 0 {
		return nil, errors.New("done OCR item lacks ref_r2_key or ref_size")
	}
	out := file
	out.R2Key, out.FileSize = res.RefR2Key, res.RefSize
	out.Tags = withTag(file.Tags, TagOCR)
	if res.TextLength == 0 {
		out.Tags = withTag(out.Tags, TagOCRNoText)
	}
	return []File{out}, nil
}

// SampleResult is the input's ref published with its text, as a new
// object next to it whose name still ends in .ref.json.
func (ocr) SampleResult(in File) json.RawMessage {
	key := strings.TrimSuffix(in.R2Key, ".ref.json") + ".ocr.ref.json"
	b, _ := json.Marshal(OCRResult{TextLength: 42, RefR2Key: key, RefSize: in.FileSize + 100})
	return b
}
