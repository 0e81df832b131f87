package phases

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestDocumentsOf(t *testing.T) {
	t.Parallel()

	describe := ProcessingConfig{Describe: true, OCR: true}
	file := func(name string, tags ...string) File {
		return File{R2Key: "staging/b/docs/" + name, LogicalPath: "/docs/" + name, FileName: name, DirectoryPath: "/docs",
			ProcessingConfig: describe, Tags: tags}
	}
	off := func(f File) File { f.ProcessingConfig.Describe = false; return f }
	indexed := func(f File) File { f.DocumentID = 9; return f }
	kept := func(f File) File { f.Kept = true; return f }
	key := func(name string) string { return "staging/b/docs/" + name }
	pages := func(keys ...string) *DocumentSource { return &DocumentSource{Pages: keys} }
	ocrRef := &DocumentSource{OCRRef: true}

	tests := []struct {
		name  string
		files []File
		want  []DocumentWork
	}{
		{"TextAndMarkdown", []File{file("a.txt"), file("b.MD"), file("c.json"), file("d.jpg")},
			[]DocumentWork{{File: file("a.txt")}, {File: file("b.MD")}}},
		{"DescribeOff", []File{off(file("a.txt")), off(file("s.jpg.ref.json", TagImageProcessor, TagOCR))}, nil},
		{"AlreadyIndexed", []File{indexed(file("a.txt"))}, nil},
		{"OCRRef", []File{file("s.jpg.ref.json", TagImageProcessor, TagOCR), file("t.jpg.ref.json", TagImageProcessor)},
			[]DocumentWork{{File: file("s.jpg.ref.json", TagImageProcessor, TagOCR), Source: ocrRef}}},
		{"OCRRefWithoutText", []File{file("s.jpg.ref.json", TagImageProcessor, TagOCR, TagOCRNoText)}, nil},
		{"PDFOfScannedPagesWithoutText", []File{
			file("r.pdf", TagPDFSource), file("r-p1.jpg.ref.json", TagImageProcessor, TagOCR, TagOCRNoText),
		}, nil},
		{"PDFOfTextAndScannedPages", []File{
			file("r.pdf", TagPDFSource),
			file("r-p1.jpg.ref.json", TagImageProcessor), file("r-p1.txt", TagPDFText),
			file("r-p2.jpg.ref.json", TagImageProcessor, TagOCR), // scanned, OCR'd
			file("r-p3.jpg.ref.json", TagImageProcessor),         // scanned, no text
			file("r-p4.jpg.ref.json", TagImageProcessor), file("r-p4-1.txt", TagPDFText),
		}, []DocumentWork{{File: file("r.pdf", TagPDFSource), Source: pages(key("r-p1.txt"), key("r-p2.jpg.ref.json"), "", key("r-p4-1.txt"))}}},
		{"PDFWithoutText", []File{file("r.pdf", TagPDFSource), file("r-p1.jpg.ref.json", TagImageProcessor)}, nil},
		{"UnsplitPDF", []File{file("r.pdf"), file("r-p1.txt")}, []DocumentWork{{File: file("r-p1.txt")}}},
		{"PDFDescribeOffKeepsOCRRefsOut", []File{off(file("r.pdf", TagPDFSource)), off(file("r-p1.jpg.ref.json", TagImageProcessor, TagOCR))}, nil},
		{"LongerStemWins", []File{
			file("a.pdf", TagPDFSource), file("a-p1.pdf", TagPDFSource),
			file("a-p1.txt", TagPDFText), file("a-p1-p2.txt", TagPDFText),
		}, []DocumentWork{
			{File: file("a.pdf", TagPDFSource), Source: pages(key("a-p1.txt"))},
			{File: file("a-p1.pdf", TagPDFSource), Source: pages("", key("a-p1-p2.txt"))},
		}},
		{"KeptIsNoWork", []File{kept(file("a.txt")), kept(file("s.jpg.ref.json", TagImageProcessor, TagOCR)), file("b.md")},
			[]DocumentWork{{File: file("b.md")}}},
		{"KeptPDFWithKeptPages", []File{kept(file("r.pdf", TagPDFSource)), kept(file("r-p1.txt", TagPDFText))}, nil},
		{"KeptPDFWithRerunPage", []File{ // its page's OCR ran again: the PDF's text comes from the rerun
			kept(file("r.pdf", TagPDFSource)), file("r-p1.jpg.ref.json", TagImageProcessor, TagOCR),
		}, []DocumentWork{{File: kept(file("r.pdf", TagPDFSource)), Source: pages(key("r-p1.jpg.ref.json"))}}},
		{"PageOfAnotherDirectory", []File{file("r.pdf", TagPDFSource), {R2Key: "k", LogicalPath: "/other/r-p1.txt", FileName: "r-p1.txt",
			ProcessingConfig: describe, Tags: []string{TagPDFText}}}, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got := DocumentsOf(tt.files)
			require.Equal(t, tt.want, got)
			p, _ := Get(DocumentIndexing)
			require.Len(t, p.Discover(tt.files), len(tt.want))
		})
	}
}

func TestDocumentTransform(t *testing.T) {
	t.Parallel()

	p, _ := Get(DocumentIndexing)
	f := File{ID: 3, R2Key: "staging/b/a.txt", FileName: "a.txt", Tags: []string{"Manifest"}}
	result := func(id int64) json.RawMessage { b, _ := json.Marshal(DocumentResult{DocumentID: id}); return b }

	out, err := p.Transform(f, &Task{FileID: 3, Status: TaskCompleted, Result: result(42)})
	require.NoError(t, err)
	want := f
	want.DocumentID = 42
	require.Equal(t, []File{want}, out)

	out, err = p.Transform(f, &Task{FileID: 3, Status: TaskFailed})
	require.NoError(t, err)
	require.Equal(t, []File{f}, out, "a failed document leaves the file as it was")

	_, err = p.Transform(f, &Task{FileID: 3, Status: TaskCompleted, Result: result(0)})
	require.ErrorContains(t, err, "lacks document_id")

	out, err = p.Transform(f, &Task{FileID: 3, Status: TaskCompleted, Result: p.SampleResult(f)})
	require.NoError(t, err)
	require.Equal(t, int64(1), out[0].DocumentID)
}
