package phases

import (
	"cmp"
	"encoding/json"
	"fmt"
	"path"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"
)

// PDFPages splits each PDF into one JPEG per page (and the page's text
// layer), before IMAGE_PROCESSING, so that the image phase makes variants of
// every page.
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
//
// A page's files lie next to the PDF, named PDFPageName(pdf, page, ext)
// unless the page says otherwise, so a page costs about 50 bytes and the
// result of a PDF_MAX_PAGES PDF stays well under the callback's 1 MiB.
type PDFResult struct {
	PageCount   int            `json:"page_count"`
	Pages       []PDFPage      `json:"pages"`
	Performance map[string]any `json:"performance,omitempty"`
}

// PDFPage is one rendered page: its JPEG, and its text file when the page
// has a non-empty text layer (TextFileSize > 0); a scan has only its JPEG.
type PDFPage struct {
	Page     int   `json:"page"` // 1-based
	FileSize int64 `json:"file_size"`
	// FileName is set when the JPEG's name is not the usual one (a worker
	// that found that name taken by other bytes chose another): a plain
	// name, next to the PDF, that starts with the usual name's stem.
	FileName     string `json:"file_name,omitempty"`
	TextFileSize int64  `json:"text_file_size,omitempty"`
	TextFileName string `json:"text_file_name,omitempty"`
}

// PDFPageName is the usual name of page's file with extension ext (".jpg",
// ".txt") for the PDF named pdfName: report.pdf gives report-p1.jpg.
func PDFPageName(pdfName string, page int, ext string) string {
	return PDFStem(pdfName) + "-p" + strconv.Itoa(page) + ext
}

// JPEGName is the page's JPEG name for the PDF named pdfName.
func (p PDFPage) JPEGName(pdfName string) string {
	return cmp.Or(p.FileName, PDFPageName(pdfName, p.Page, ".jpg"))
}

// TextName is the page's text file name for the PDF named pdfName, "" for
// a page without text.
func (p PDFPage) TextName(pdfName string) string {
	if p.TextFileSize <= 0 {
		return ""
	}
	return cmp.Or(p.TextFileName, PDFPageName(pdfName, p.Page, ".txt"))
}

// maxPDFPages bounds PDF_MAX_PAGES so that a result fits a callback body.
const maxPDFPages = 10000

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
		Executor:   "pool",
		Worker:     "pdf",
		Defaults: Defaults{
			FlyAppName:       "arke-pdf-worker",
			WorkerImage:      "registry.fly.io/arke-pdf-worker:latest",
			BatchSize:        1000,
			AlarmDelay:       5 * time.Second,
			TaskTimeout:      300 * time.Second,
			TaskTimeoutPerGB: 300 * time.Second,
			Guest:            Guest{MemoryMB: 2048, CPUs: 2, CPUKind: "shared"},
		},
		Settings: []Setting{
			{Name: "PDF_RENDER_DPI", Default: 200, Min: 1, Max: 1200, Doc: "resolution of the page JPEGs"},
			{Name: "PDF_MAX_PAGES", Default: 2000, Min: 1, Max: maxPDFPages, Doc: "a PDF with more pages fails its task and passes through unchanged; a split makes up to two files a page, so keep MAX_OUTPUTS_PER_TASK at least twice this"},
		},
	}
}

// Discover finds PDFs by file name (.pdf in any case) or content type
// (application/pdf, ignoring case and parameters), skipping any already
// split, so a re-run over a later generation never splits a PDF twice.
func (p pdfPages) Discover(files []File) []File { return filter(files, p.MayWork) }

// MayWork is a PDF not split yet (Screener).
func (pdfPages) MayWork(f File) bool { return isPDF(f) && !hasTag(f, TagPDFSource) }

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
	pdfName := ""
	if file.R2Key != "" { // ValidateResult's probe has no key
		pdfName = path.Base(file.R2Key)
	}
	pages, err := checkPDFResult(res, pdfName)
	if err != nil {
		return nil, fmt.Errorf("completed PDF result: %w", err)
	}

	source := file
	source.Tags = withTag(file.Tags, TagPDFSource)
	result := make([]File, 0, 1+2*len(pages))
	result = append(result, source)
	keyDir, base := path.Split(file.R2Key)
	dir := path.Dir(file.LogicalPath)
	output := func(name string, size int64, contentType, tag string) File {
		return File{
			R2Key:            keyDir + name,
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
		result = append(result, output(p.JPEGName(base), p.FileSize, pdfPageContentType, TagPDFPage))
		if name := p.TextName(base); name != "" {
			result = append(result, output(name, p.TextFileSize, pdfTextContentType, TagPDFText))
		}
	}
	return result, nil
}

// checkPDFResult returns the result's pages in page order, or why they
// cannot be used. Names a worker chose are checked like any untrusted
// input: a plain name next to the PDF, of the page's stem and kind.
func checkPDFResult(res PDFResult, pdfName string) ([]PDFPage, error) {
	if res.PageCount < 1 {
		return nil, fmt.Errorf("page_count is %d; a split PDF has at least one page", res.PageCount)
	}
	if res.PageCount > maxPDFPages {
		return nil, fmt.Errorf("page_count is %d; at most %d pages are split", res.PageCount, maxPDFPages)
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
		case p.FileSize < 0 || p.TextFileSize < 0:
			return nil, fmt.Errorf("page %d has a negative size", p.Page)
		case p.TextFileName != "" && p.TextFileSize == 0:
			return nil, fmt.Errorf("page %d names a text file of no size", p.Page)
		}
		if err := checkPageName(p.FileName, pdfName, p.Page, ".jpg"); err != nil {
			return nil, fmt.Errorf("page %d: file_name %w", p.Page, err)
		}
		if err := checkPageName(p.TextFileName, pdfName, p.Page, ".txt"); err != nil {
			return nil, fmt.Errorf("page %d: text_file_name %w", p.Page, err)
		}
		seen[p.Page] = true
	}
	pages := slices.Clone(res.Pages)
	slices.SortFunc(pages, func(a, b PDFPage) int { return a.Page - b.Page })
	return pages, nil
}

// checkPageName refuses a chosen page file name ("" is the usual one) that
// is not a plain name: the usual one, or the usual one's stem, a "-" and
// more (as worker.PutUnique picks when the usual name is taken), with ext.
// Without the PDF's name (pdfName "", as when a callback is checked before
// its task is read) only the plain-name rules apply.
func checkPageName(name, pdfName string, page int, ext string) error {
	if name == "" {
		return nil
	}
	switch {
	case len(name) > 255 || !utf8.ValidString(name):
		return fmt.Errorf("%q is not a file name", name)
	case strings.ContainsAny(name, `/\`) || strings.ContainsFunc(name, unicode.IsControl) || name == "." || name == "..":
		return fmt.Errorf("%q must be a plain name next to the PDF", name)
	case !strings.HasSuffix(name, ext):
		return fmt.Errorf("%q must end in %q", name, ext)
	case pdfName == "":
		return nil
	}
	usual := PDFPageName(pdfName, page, ext)
	stem := strings.TrimSuffix(usual, ext) + "-"
	if name != usual && (!strings.HasPrefix(name, stem) || len(name) < len(stem)+len(ext)) {
		return fmt.Errorf("%q must be %q or start with %q and end in %q", name, usual, stem, ext)
	}
	return nil
}

// SampleResult is a plausible success body for f, without the envelope
// fields (task_id, batch_id, status) that the poster adds: two pages next
// to f.R2Key, page 1 with a text layer and page 2 (a scan) without. Fake
// workers report it so that tests exercise both kinds of page.
func (pdfPages) SampleResult(f File) json.RawMessage {
	res := PDFResult{
		PageCount:   2,
		Pages:       []PDFPage{{Page: 1, FileSize: 4242, TextFileSize: 321}, {Page: 2, FileSize: 5353}},
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
