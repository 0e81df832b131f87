package phases

import (
	"encoding/json"
	"fmt"
	"path"
	"slices"
	"strconv"
	"strings"
	"time"
)

// PDFPages splits each PDF into one JPEG per page (and the page's text
// layer), between TIFF_CONVERSION and IMAGE_PROCESSING, so that the image
// phase makes variants of every page.
const PDFPages Name = "PDF_PAGES"

// Tags of the PDF phase.
const (
	// TagPDFSource marks a PDF that has been split: it stays in the list for
	// the archive, but no phase processes it again.
	TagPDFSource = "PdfPages:source"
	// TagPDFPage marks a page JPEG produced by the PDF phase.
	TagPDFPage = "PdfPages"
	// TagPDFText marks a page's text layer produced by the PDF phase.
	TagPDFText = "PdfPages:text"
)

// Content types of the PDF phase's outputs.
const (
	pdfPageContentType = "image/jpeg"
	pdfTextContentType = "text/plain; charset=utf-8"
)

// PDFResult is the PDF worker's success callback body. Fields the transform
// does not need (task_id, status, ...) are ignored when decoding.
type PDFResult struct {
	PageCount   int            `json:"page_count"`
	Pages       []PDFPage      `json:"pages"`
	Performance map[string]any `json:"performance,omitempty"`
}

// PDFPage is one rendered page. The text fields are set only when the page
// has a non-empty text layer; a scanned page without one has only its JPEG.
type PDFPage struct {
	Page         int    `json:"page"` // 1-based
	R2Key        string `json:"r2_key"`
	FileName     string `json:"file_name"`
	FileSize     int64  `json:"file_size"`
	TextR2Key    string `json:"text_r2_key,omitempty"`
	TextFileName string `json:"text_file_name,omitempty"`
	TextFileSize int64  `json:"text_file_size,omitempty"`
}

// pdfContentType is the media type the PDF phase discovers by.
const pdfContentType = "application/pdf"

// pdfPages renders PDFs to page JPEGs and text files. Its transform
// augments: the PDF stays for the archive, tagged so that no phase
// processes it again.
type pdfPages struct{}

var _ Phase = pdfPages{}

// Spec: one machine per PDF running `worker pdf`, which renders at
// PDF_RENDER_DPI and refuses PDFs over PDF_MAX_PAGES. It runs before
// IMAGE_PROCESSING, which then processes the page JPEGs.
func (pdfPages) Spec() Spec {
	return Spec{
		Name:       PDFPages,
		TaskPrefix: "pdf",
		Short:      "PDF",
		Title:      "PDF splitting into page JPEGs and text",
		Executor:   Machine,
		Worker:     "pdf",
		Defaults: Defaults{
			FlyAppName:  "arke-pdf-worker",
			WorkerImage: "registry.fly.io/arke-pdf-worker:latest",
			BatchSize:   1000,
			AlarmDelay:  5 * time.Second,
			TaskTimeout: 300 * time.Second,
			Guest:       Guest{MemoryMB: 2048, CPUs: 2, CPUKind: "shared"},
		},
		Settings: []Setting{
			{Name: "PDF_RENDER_DPI", Default: 200, Min: 1, Max: 1200, Doc: "resolution of the page JPEGs"},
			{Name: "PDF_MAX_PAGES", Default: 2000, Min: 1, Max: 1000000, Doc: "a PDF with more pages fails its task and passes through unchanged"},
		},
	}
}

// Discover finds PDFs by file name (.pdf in any case) or content type
// (application/pdf, ignoring case and parameters), skipping any already
// split, so a re-run over a later generation never splits a PDF twice.
func (pdfPages) Discover(files []File) []File {
	var out []File
	for _, f := range files {
		if isPDF(f) && !hasTag(f, TagPDFSource) {
			out = append(out, f)
		}
	}
	return out
}

// isPDF reports whether a file is a PDF by its name or its content type.
func isPDF(f File) bool {
	if strings.HasSuffix(strings.ToLower(f.FileName), ".pdf") {
		return true
	}
	media, _, _ := strings.Cut(f.ContentType, ";")
	return strings.EqualFold(strings.TrimSpace(media), pdfContentType)
}

// Transform returns the tagged source followed by each page's JPEG (and
// text file, when the page has one) in page order when the task completed,
// and the file unchanged otherwise. A result that does not account for
// every page exactly once is refused: a split with a missing page would
// silently lose part of the document.
func (pdfPages) Transform(file File, task *Task) ([]File, error) {
	var res PDFResult
	ok, err := completedResult(task, &res)
	if !ok {
		return []File{file}, nil
	}
	if err != nil {
		return nil, err
	}
	pages, err := checkPDFResult(res)
	if err != nil {
		return nil, fmt.Errorf("completed PDF result: %w", err)
	}

	source := file
	source.Tags = withTag(file.Tags, TagPDFSource)
	result := make([]File, 0, 1+2*len(pages))
	result = append(result, source)
	dir := path.Dir(file.LogicalPath)
	output := func(key, name string, size int64, contentType, tag string) File {
		return File{
			R2Key:            key,
			LogicalPath:      path.Join(dir, name),
			FileName:         name,
			FileSize:         size,
			ContentType:      contentType,
			ProcessingConfig: file.ProcessingConfig,
			DirectoryPath:    file.DirectoryPath,
			Tags:             []string{tag},
		}
	}
	for _, p := range pages {
		result = append(result, output(p.R2Key, p.FileName, p.FileSize, pdfPageContentType, TagPDFPage))
		if p.TextR2Key != "" {
			result = append(result, output(p.TextR2Key, p.TextFileName, p.TextFileSize, pdfTextContentType, TagPDFText))
		}
	}
	return result, nil
}

// checkPDFResult returns the result's pages in page order, or why they
// cannot be used.
func checkPDFResult(res PDFResult) ([]PDFPage, error) {
	if res.PageCount < 1 {
		return nil, fmt.Errorf("page_count is %d; a split PDF has at least one page", res.PageCount)
	}
	if len(res.Pages) != res.PageCount {
		return nil, fmt.Errorf("%d pages listed for page_count %d", len(res.Pages), res.PageCount)
	}
	seen := make([]bool, res.PageCount+1)
	for i, p := range res.Pages {
		switch {
		case p.Page < 1 || p.Page > res.PageCount:
			return nil, fmt.Errorf("pages[%d]: page %d is outside 1..%d", i, p.Page, res.PageCount)
		case seen[p.Page]:
			return nil, fmt.Errorf("pages[%d]: page %d is listed twice", i, p.Page)
		case p.R2Key == "" || p.FileName == "":
			return nil, fmt.Errorf("page %d lacks r2_key or file_name", p.Page)
		case (p.TextR2Key == "") != (p.TextFileName == ""):
			return nil, fmt.Errorf("page %d has only one of text_r2_key and text_file_name", p.Page)
		}
		seen[p.Page] = true
	}
	pages := slices.Clone(res.Pages)
	slices.SortFunc(pages, func(a, b PDFPage) int { return a.Page - b.Page })
	return pages, nil
}

// SampleResult is a plausible success body for f, without the envelope
// fields (task_id, batch_id, status) that the poster adds: two pages next
// to f.R2Key, page 1 with a text layer and page 2 (a scan) without. Fake
// workers report it so that tests exercise both kinds of page.
func (pdfPages) SampleResult(f File) json.RawMessage {
	dir, base := path.Split(f.R2Key)
	stem := PDFStem(base)
	key := func(page int, ext string) string { return dir + stem + "-p" + strconv.Itoa(page) + ext }
	res := PDFResult{
		PageCount: 2,
		Pages: []PDFPage{
			{
				Page: 1, R2Key: key(1, ".jpg"), FileName: path.Base(key(1, ".jpg")), FileSize: 4242,
				TextR2Key: key(1, ".txt"), TextFileName: path.Base(key(1, ".txt")), TextFileSize: 321,
			},
			{Page: 2, R2Key: key(2, ".jpg"), FileName: path.Base(key(2, ".jpg")), FileSize: 5353},
		},
		Performance: map[string]any{"total_time_ms": 12, "download_time_ms": 3, "conversion_time_ms": 7, "upload_time_ms": 2},
	}
	data, _ := json.Marshal(res) // plain values: cannot fail
	return data
}

// PDFStem is a PDF's file name without its .pdf suffix (in any case), the
// stem of its page files: "a.b.PDF" gives "a.b". A name without the suffix
// (a PDF found by content type) is its own stem.
func PDFStem(name string) string {
	if len(name) > len(".pdf") && strings.EqualFold(name[len(name)-len(".pdf"):], ".pdf") {
		return name[:len(name)-len(".pdf")]
	}
	return name
}
