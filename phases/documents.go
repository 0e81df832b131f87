package phases

import (
	"encoding/json"
	"errors"
	"path"
	"strconv"
	"strings"
)

// DocumentIndexing indexes the text of files whose directory asked for a
// description (issue 18, spec 003), last, after OCR: each .md and .txt
// file, each split PDF from its pages' text, each OCR'd ref from its OCR
// text. Each becomes one document, processed by the document step jobs.
const DocumentIndexing Name = "DOCUMENT_INDEXING"

// DocumentSource says how a document's text is assembled when it is not
// the content of the object at its key. It is stored with the document
// (documents.source) and read by the document's download step.
type DocumentSource struct {
	// Pages are a PDF's pages, page 1 first: the key of each page's text,
	// a .txt object read as it is or an OCR'd ref whose OCR text is read,
	// "" for a page without text. The pages are joined with page markers
	// (textchunk.JoinPages).
	Pages []string `json:"pages,omitempty"`
	// OCRRef says the document's key is an OCR'd ref: the text is the
	// ref's OCR text (its "ocr" member's "text").
	OCRRef bool `json:"ocr_ref,omitempty"`
}

// DocumentWork is one document a batch's DOCUMENT_INDEXING phase makes.
type DocumentWork struct {
	// File is the file the document indexes: it gains the document's id.
	File File
	// Source is nil when the document's text is the file's object.
	Source *DocumentSource
}

// DocumentResult is what the transform reads of an indexed file's
// completed document.
type DocumentResult struct {
	DocumentID int64 `json:"document_id"`
}

// Documenter is a Documents phase: it finds the documents to make of a
// file list, which the document step jobs then index.
type Documenter interface {
	Phase
	Documents(files []File) []DocumentWork
}

// documentIndexing runs in-process as document step jobs (jobs'
// document_step).
type documentIndexing struct{}

var _ Documenter = documentIndexing{}

// Spec: no machines and no settings of its own: the document settings
// (DOCUMENT_MAX_BYTES, DOCUMENT_CHUNK_TOKENS, the providers') apply.
func (documentIndexing) Spec() Spec {
	return Spec{
		Name:       DocumentIndexing,
		TaskPrefix: "doc",
		Short:      "DOCUMENT",
		Title:      "document indexing of text, PDFs and OCR text",
		Executor:   "documents",
	}
}

// Discover is the files Documents makes documents of, in list order.
func (d documentIndexing) Discover(files []File) []File {
	works := d.Documents(files)
	out := make([]File, len(works))
	for i, w := range works {
		out[i] = w.File
	}
	return out
}

// MayWork is a file to describe that has no document yet (Screener): a
// document's files are among those, though which of them make one depends
// on the files beside them (a split PDF and its pages).
func (documentIndexing) MayWork(f File) bool { return f.ProcessingConfig.Describe && f.DocumentID == 0 }

// Documents is DocumentsOf.
func (documentIndexing) Documents(files []File) []DocumentWork { return DocumentsOf(files) }

// DocumentsOf finds, in list order, the documents to make of files whose
// processing_config.describe is on and that have none yet (so a re-run
// indexes nothing twice): each .md or .txt file but a PDF page's text;
// each split PDF with text on at least one page, made of its pages' text
// files, or for a scanned page its OCR'd ref; each OCR'd ref that is not
// such a PDF's page. Kept files (File.Kept) are left out, but for a kept
// PDF one of whose pages' text is not kept: its text comes from a rerun.
func DocumentsOf(files []File) []DocumentWork {
	pdfs := pdfPagesOf(files)
	var out []DocumentWork
	for i, f := range files {
		if !f.ProcessingConfig.Describe || f.DocumentID != 0 {
			continue
		}
		switch {
		case isTextDocument(f) && !f.Kept:
			out = append(out, DocumentWork{File: f})
		case hasTag(f, TagPDFSource):
			if pages, ok := pdfs.pages[i]; ok && (!f.Kept || pdfs.rerun[i]) {
				out = append(out, DocumentWork{File: f, Source: &DocumentSource{Pages: pages}})
			}
		case isOCRText(f) && !pdfs.isPage[i] && !f.Kept:
			out = append(out, DocumentWork{File: f, Source: &DocumentSource{OCRRef: true}})
		}
	}
	return out
}

// isTextDocument is a .md or .txt file that is not a PDF page's text.
func isTextDocument(f File) bool {
	name := strings.ToLower(f.FileName)
	return (strings.HasSuffix(name, ".md") || strings.HasSuffix(name, ".txt")) && !hasTag(f, TagPDFText)
}

// isOCRText is a ref carrying OCR text: OCR'd, and not found to have none.
func isOCRText(f File) bool {
	return hasTag(f, TagOCR) && !hasTag(f, TagOCRNoText) && strings.HasSuffix(f.FileName, ".ref.json")
}

// splitPDFs are the pages of a file list's split PDFs: by the PDF's
// index, its pages' text keys (only PDFs with some text), and whether the
// text of one of them is not kept (File.Kept); and the indexes of the
// files that are their pages' text.
type splitPDFs struct {
	pages  map[int][]string
	rerun  map[int]bool
	isPage map[int]bool
}

// pdfPagesOf matches page files to the split PDFs they came from: a page
// file lies in its PDF's directory and is named {stem}-p{N} and then "."
// or "-" (a name a worker chose: checkPageName). A page's text is its
// text file (PdfPages:text), else its OCR'd ref; its JPEG or ref without
// OCR only shows that the page exists. Where two PDFs' stems could claim
// a name, the longer stem wins.
func pdfPagesOf(files []File) splitPDFs {
	type pdfKey struct{ dir, stem string }
	byStem := map[pdfKey]int{}
	for i, f := range files {
		if hasTag(f, TagPDFSource) && f.ProcessingConfig.Describe {
			byStem[pdfKey{path.Dir(f.LogicalPath), PDFStem(f.FileName)}] = i
		}
	}
	out := splitPDFs{pages: map[int][]string{}, rerun: map[int]bool{}, isPage: map[int]bool{}}
	if len(byStem) == 0 {
		return out
	}
	type pageText struct{ key, from string }
	texts := map[int]map[int]pageText{} // pdf -> page -> text
	count := map[int]int{}              // pdf -> pages seen
	for i, f := range files {
		isText, isImage := hasTag(f, TagPDFText), hasTag(f, TagPDFPage) || hasTag(f, TagImageProcessor) || hasTag(f, TagOCR)
		if !isText && !isImage {
			continue
		}
		pdf, page, ok := pageOf(f.FileName, func(stem string) (int, bool) {
			j, ok := byStem[pdfKey{path.Dir(f.LogicalPath), stem}]
			return j, ok
		})
		if !ok {
			continue
		}
		count[pdf] = max(count[pdf], page)
		var t pageText
		switch {
		case isText && strings.HasSuffix(f.FileName, ".txt"):
			t = pageText{f.R2Key, "text"}
		case isOCRText(f):
			t = pageText{f.R2Key, "ocr"}
			out.isPage[i] = true
		default:
			continue
		}
		if texts[pdf] == nil {
			texts[pdf] = map[int]pageText{}
		}
		if prev, dup := texts[pdf][page]; !dup || prev.from == "ocr" && t.from == "text" {
			texts[pdf][page] = t
		}
		if !f.Kept {
			out.rerun[pdf] = true
		}
	}
	for pdf, byPage := range texts {
		pages := make([]string, count[pdf])
		for n, t := range byPage {
			pages[n-1] = t.key
		}
		out.pages[pdf] = pages
	}
	return out
}

// pageOf reads a page file's name as {stem}-p{N}, then "." or "-", for a
// stem that pdf knows, trying the longest stem first.
func pageOf(name string, pdf func(stem string) (int, bool)) (index, page int, ok bool) {
	for i := strings.LastIndex(name, "-p"); i > 0; i = strings.LastIndex(name[:i], "-p") {
		rest := name[i+2:]
		n := 0
		for n < len(rest) && rest[n] >= '0' && rest[n] <= '9' {
			n++
		}
		if n == 0 || n == len(rest) || rest[n] != '.' && rest[n] != '-' {
			continue
		}
		p, err := strconv.Atoi(rest[:n])
		if err != nil || p < 1 || p > maxPDFPages {
			continue
		}
		if j, ok := pdf(name[:i]); ok {
			return j, p, true
		}
	}
	return 0, 0, false
}

// Transform gives an indexed file its document's id when the document
// completed; a failed document leaves the file as it was.
func (documentIndexing) Transform(file File, task *Task) ([]File, error) {
	var res DocumentResult
	ok, err := completedResult(task, &res)
	if !ok {
		return []File{file}, nil
	}
	if err != nil {
		return nil, err
	}
	if res.DocumentID <= 0 {
		return nil, errors.New("completed document lacks document_id")
	}
	out := file
	out.DocumentID = res.DocumentID
	return []File{out}, nil
}

// SampleResult is a completed document of id 1.
func (documentIndexing) SampleResult(File) json.RawMessage {
	b, _ := json.Marshal(DocumentResult{DocumentID: 1})
	return b
}
