package phases

import (
	"encoding/json"
	"path"
	"testing"

	"github.com/stretchr/testify/require"
)

func pdfFile() File {
	return File{
		ID: 9, R2Key: "staging/b1/docs/report.pdf", LogicalPath: "/docs/report.pdf",
		FileName: "report.pdf", FileSize: 50000, ContentType: "application/pdf", CID: "bafyPDF",
		ProcessingConfig: cfg, DirectoryPath: "/docs", Tags: []string{"Manifest"},
	}
}

func TestPDFPhase(t *testing.T) {
	t.Parallel()
	require.Equal(t, PDFPages, pdfPages{}.Spec().Name)
	require.Equal(t, PDFPages, First(), "PDFs are split first")
	require.Equal(t, ImageProcessing, Next(TIFFConversion), "TIFF -> IMAGE stays a chunked transition")
	_, work := NextWithWork(PDFPages, []File{{FileName: "a-p1.jpg", ContentType: "image/jpeg", Tags: []string{TagPDFPage}}})
	require.Len(t, work, 1, "page JPEGs go on to IMAGE_PROCESSING")
}

func TestPDFDiscover(t *testing.T) {
	t.Parallel()

	tests := []struct {
		name  string
		files []File
		want  []string
	}{
		{
			name: "Extensions",
			files: []File{
				{FileName: "a.pdf"}, {FileName: "b.PDF"}, {FileName: "c.Pdf"}, {FileName: "a.b.pdf"},
			},
			want: []string{"a.pdf", "b.PDF", "c.Pdf", "a.b.pdf"},
		},
		{
			name: "ContentTypes",
			files: []File{
				{FileName: "scan", ContentType: "application/pdf"},
				{FileName: "upper", ContentType: "APPLICATION/PDF"},
				{FileName: "params", ContentType: "application/pdf; charset=binary"},
				{FileName: "spaced", ContentType: " application/pdf ;q=1"},
			},
			want: []string{"scan", "upper", "params", "spaced"},
		},
		{
			name: "NotMatched",
			files: []File{
				{FileName: "doc.pdf.bak"}, {FileName: "pdf"}, {FileName: "notes.pdfx"},
				{FileName: "page.jpg", ContentType: "image/jpeg"},
				{FileName: "x", ContentType: "application/pdfx"},
				{FileName: "y", ContentType: "application/x-pdf-ish"},
				{FileName: "scan.tif", ContentType: "image/tiff"},
			},
			want: []string{},
		},
		{
			name: "SkipsSplitSource",
			files: []File{
				{FileName: "done.pdf", Tags: []string{TagPDFSource}},
				{FileName: "todo.pdf", Tags: []string{TagTIFFSource}},
				{FileName: "done-p1.jpg", ContentType: "image/jpeg", Tags: []string{TagPDFPage}},
				{FileName: "done-p1.txt", ContentType: pdfTextContentType, Tags: []string{TagPDFText}},
			},
			want: []string{"todo.pdf"},
		},
		{
			name:  "KeepsListOrder",
			files: []File{{FileName: "z.pdf"}, {FileName: "x.tif"}, {FileName: "a.pdf"}},
			want:  []string{"z.pdf", "a.pdf"},
		},
		{name: "Empty", files: nil, want: []string{}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			require.Equal(t, tt.want, fileNames(pdfPages{}.Discover(tt.files)))
		})
	}
}

func TestPDFTransform(t *testing.T) {
	t.Parallel()

	src := pdfFile()
	tagged := func(f File) File {
		f.Tags = append(append([]string{}, f.Tags...), TagPDFSource)
		return f
	}
	page := func(f File, key, name string, size int64) File {
		return File{
			R2Key: key, LogicalPath: path.Join(path.Dir(f.LogicalPath), name), FileName: name, FileSize: size,
			ContentType: "image/jpeg", ProcessingConfig: f.ProcessingConfig, DirectoryPath: f.DirectoryPath,
			Tags: []string{TagPDFPage},
		}
	}
	text := func(f File, key, name string, size int64) File {
		return File{
			R2Key: key, LogicalPath: path.Join(path.Dir(f.LogicalPath), name), FileName: name, FileSize: size,
			ContentType: "text/plain; charset=utf-8", ProcessingConfig: f.ProcessingConfig, DirectoryPath: f.DirectoryPath,
			Tags: []string{TagPDFText},
		}
	}
	completed := func(v any) *Task {
		return &Task{FileID: src.ID, Status: TaskCompleted, Result: mustJSON(t, v)}
	}
	p := func(n int, withText bool) PDFPage {
		pg := PDFPage{Page: n, FileSize: int64(100 * n)}
		if withText {
			pg.TextFileSize = int64(10 * n)
		}
		return pg
	}
	named := func(name string) PDFPage { return PDFPage{Page: 1, FileSize: 1, FileName: name} }
	wantPages := []File{
		tagged(src),
		page(src, "staging/b1/docs/report-p1.jpg", "report-p1.jpg", 100),
		text(src, "staging/b1/docs/report-p1.txt", "report-p1.txt", 10),
		page(src, "staging/b1/docs/report-p2.jpg", "report-p2.jpg", 200),
		page(src, "staging/b1/docs/report-p3.jpg", "report-p3.jpg", 300),
		text(src, "staging/b1/docs/report-p3.txt", "report-p3.txt", 30),
	}

	root := File{ID: 1, R2Key: "k/x.PDF", LogicalPath: "/x.PDF", FileName: "x.PDF", ProcessingConfig: cfg}
	dotted := File{ID: 2, R2Key: "k/d/a.b.pdf", LogicalPath: "/d/a.b.pdf", FileName: "a.b.pdf", DirectoryPath: "/d"}
	already := File{ID: 3, R2Key: "k/y.pdf", LogicalPath: "/y.pdf", FileName: "y.pdf", Tags: []string{TagPDFSource, "Other"}}

	tests := []struct {
		name    string
		file    File
		task    *Task
		want    []File
		wantErr string
	}{
		{name: "PreserveNoTask", file: src, task: nil, want: []File{src}},
		{name: "PreserveFailed", file: src, task: &Task{FileID: 9, Status: TaskFailed}, want: []File{src}},
		{name: "PreservePending", file: src, task: &Task{FileID: 9, Status: TaskPending}, want: []File{src}},
		{name: "PreserveProcessing", file: src, task: &Task{FileID: 9, Status: TaskProcessing}, want: []File{src}},
		{
			name: "AugmentCompleted",
			file: src,
			task: completed(map[string]any{
				"task_id": "pdf_1", "batch_id": "b1", "status": "success",
				"page_count": 3, "pages": []PDFPage{p(1, true), p(2, false), p(3, true)},
				"performance": map[string]any{"total_time_ms": 3400},
			}),
			want: wantPages,
		},
		{
			name: "AugmentInPageOrder",
			file: src,
			task: completed(PDFResult{PageCount: 3, Pages: []PDFPage{p(3, true), p(1, true), p(2, false)}}),
			want: wantPages,
		},
		{
			name: "AugmentOnePageAtRoot",
			file: root,
			task: completed(PDFResult{PageCount: 1, Pages: []PDFPage{{Page: 1, FileSize: 7}}}),
			want: []File{tagged(root), page(root, "k/x-p1.jpg", "x-p1.jpg", 7)},
		},
		{
			name: "AugmentDottedName",
			file: dotted,
			task: completed(PDFResult{PageCount: 1, Pages: []PDFPage{{Page: 1, FileSize: 5, TextFileSize: 2}}}),
			want: []File{tagged(dotted), page(dotted, "k/d/a.b-p1.jpg", "a.b-p1.jpg", 5), text(dotted, "k/d/a.b-p1.txt", "a.b-p1.txt", 2)},
		},
		{
			name: "AugmentNoDuplicateTag",
			file: already,
			task: completed(PDFResult{PageCount: 1, Pages: []PDFPage{{Page: 1, FileSize: 1}}}),
			want: []File{already, page(already, "k/y-p1.jpg", "y-p1.jpg", 1)},
		},
		{
			name: "AugmentChosenNames",
			file: src,
			task: completed(PDFResult{PageCount: 1, Pages: []PDFPage{{
				Page: 1, FileSize: 1, FileName: "report-p1-1.jpg", TextFileSize: 2, TextFileName: "report-p1-2.txt",
			}}}),
			want: []File{
				tagged(src),
				page(src, "staging/b1/docs/report-p1-1.jpg", "report-p1-1.jpg", 1),
				text(src, "staging/b1/docs/report-p1-2.txt", "report-p1-2.txt", 2),
			},
		},
		{
			name:    "ErrorZeroPageCount",
			file:    src,
			task:    completed(PDFResult{PageCount: 0, Pages: []PDFPage{}}),
			wantErr: "page_count is 0",
		},
		{
			name:    "ErrorMissingPageCount",
			file:    src,
			task:    completed(map[string]any{"pages": []PDFPage{p(1, false)}}),
			wantErr: "page_count is 0",
		},
		{
			name:    "ErrorFewerPagesThanCount",
			file:    src,
			task:    completed(PDFResult{PageCount: 3, Pages: []PDFPage{p(1, false), p(2, false)}}),
			wantErr: "2 pages listed for page_count 3",
		},
		{
			name:    "ErrorMorePagesThanCount",
			file:    src,
			task:    completed(PDFResult{PageCount: 1, Pages: []PDFPage{p(1, false), p(2, false)}}),
			wantErr: "2 pages listed for page_count 1",
		},
		{
			name:    "ErrorPageZero",
			file:    src,
			task:    completed(PDFResult{PageCount: 2, Pages: []PDFPage{p(1, false), p(0, false)}}),
			wantErr: "pages[1]: page 0 is outside 1..2",
		},
		{
			name:    "ErrorPageOverCount",
			file:    src,
			task:    completed(PDFResult{PageCount: 2, Pages: []PDFPage{p(3, false), p(1, false)}}),
			wantErr: "pages[0]: page 3 is outside 1..2",
		},
		{
			name:    "ErrorDuplicatePage",
			file:    src,
			task:    completed(PDFResult{PageCount: 2, Pages: []PDFPage{p(2, false), p(2, true)}}),
			wantErr: "pages[1]: page 2 is listed twice",
		},
		{
			name:    "ErrorTooManyPages",
			file:    src,
			task:    completed(PDFResult{PageCount: 10001, Pages: []PDFPage{p(1, false)}}),
			wantErr: "page_count is 10001; at most 10000",
		},
		{
			name:    "ErrorNegativeSize",
			file:    src,
			task:    completed(PDFResult{PageCount: 1, Pages: []PDFPage{{Page: 1, FileSize: -1}}}),
			wantErr: "page 1 has a negative size",
		},
		{
			name:    "ErrorTextNameWithoutText",
			file:    src,
			task:    completed(PDFResult{PageCount: 1, Pages: []PDFPage{{Page: 1, FileSize: 1, TextFileName: "report-p1.txt"}}}),
			wantErr: "page 1 names a text file of no size",
		},
		{
			name:    "ErrorNameLeavesTheDirectory",
			file:    src,
			task:    completed(PDFResult{PageCount: 1, Pages: []PDFPage{named("../../other/report-p1.jpg")}}),
			wantErr: `file_name "../../other/report-p1.jpg" must be a plain name next to the PDF`,
		},
		{
			name:    "ErrorNameBackslash",
			file:    src,
			task:    completed(PDFResult{PageCount: 1, Pages: []PDFPage{named(`report-p1\x.jpg`)}}),
			wantErr: "must be a plain name",
		},
		{
			name:    "ErrorNameControlCharacter",
			file:    src,
			task:    completed(PDFResult{PageCount: 1, Pages: []PDFPage{named("report-p1\n.jpg")}}),
			wantErr: "must be a plain name",
		},
		{
			name:    "ErrorNameOtherStem",
			file:    src,
			task:    completed(PDFResult{PageCount: 1, Pages: []PDFPage{named("invoice-p1.jpg")}}),
			wantErr: `file_name "invoice-p1.jpg" must be "report-p1.jpg" or start with "report-p1-" and end in ".jpg"`,
		},
		{
			name:    "ErrorNameOfAnotherPage",
			file:    src,
			task:    completed(PDFResult{PageCount: 1, Pages: []PDFPage{named("report-p10.jpg")}}),
			wantErr: `start with "report-p1-"`,
		},
		{
			name:    "ErrorNameOtherKind",
			file:    src,
			task:    completed(PDFResult{PageCount: 1, Pages: []PDFPage{named("report-p1.png")}}),
			wantErr: `file_name "report-p1.png" must end in ".jpg"`,
		},
		{
			name: "ErrorTextNameOtherPage",
			file: src,
			task: completed(PDFResult{PageCount: 1, Pages: []PDFPage{{
				Page: 1, FileSize: 1, TextFileSize: 1, TextFileName: "report-p2.txt",
			}}}),
			wantErr: `text_file_name "report-p2.txt" must be "report-p1.txt"`,
		},
		{
			name:    "ErrorMalformedJSON",
			file:    src,
			task:    &Task{FileID: 9, Status: TaskCompleted, Result: json.RawMessage(`{"page_count": "two"}`)},
			wantErr: "decoding result",
		},
		{
			name:    "ErrorEmptyResult",
			file:    src,
			task:    &Task{FileID: 9, Status: TaskCompleted},
			wantErr: "no result",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got, err := pdfPages{}.Transform(tt.file, tt.task)
			if tt.wantErr != "" {
				require.ErrorContains(t, err, tt.wantErr)
				require.Nil(t, got)
				return
			}
			require.NoError(t, err)
			require.Equal(t, tt.want, got)
		})
	}
}

func TestPDFTransformDoesNotMutateInput(t *testing.T) {
	t.Parallel()
	src := pdfFile()
	src.Tags = make([]string, 1, 4) // spare capacity a careless append would write into
	src.Tags[0] = "Manifest"
	pages := []PDFPage{{Page: 2, FileSize: 2}, {Page: 1, FileSize: 1}}
	result := mustJSON(t, PDFResult{PageCount: 2, Pages: pages})
	task := &Task{FileID: src.ID, Status: TaskCompleted, Result: result}

	got, err := pdfPages{}.Transform(src, task)
	require.NoError(t, err)
	require.Equal(t, []string{"report.pdf", "report-p1.jpg", "report-p2.jpg"}, fileNames(got))
	require.Equal(t, []string{"Manifest"}, src.Tags)
	require.Empty(t, src.Tags[:cap(src.Tags)][1], "the input's backing array is untouched")
	require.Equal(t, []string{"Manifest", TagPDFSource}, got[0].Tags)
}

func TestPDFSampleResult(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name  string
		file  File
		names []string
		keys  []string
	}{
		{
			name:  "Nested",
			file:  pdfFile(),
			names: []string{"report.pdf", "report-p1.jpg", "report-p1.txt", "report-p2.jpg"},
			keys:  []string{"staging/b1/docs/report.pdf", "staging/b1/docs/report-p1.jpg", "staging/b1/docs/report-p1.txt", "staging/b1/docs/report-p2.jpg"},
		},
		{
			name:  "UpperCaseDotted",
			file:  File{ID: 4, R2Key: "staging/b1/a.b.PDF", LogicalPath: "/a.b.PDF", FileName: "a.b.PDF"},
			names: []string{"a.b.PDF", "a.b-p1.jpg", "a.b-p1.txt", "a.b-p2.jpg"},
			keys:  []string{"staging/b1/a.b.PDF", "staging/b1/a.b-p1.jpg", "staging/b1/a.b-p1.txt", "staging/b1/a.b-p2.jpg"},
		},
		{
			name:  "KeyOnly",
			file:  File{R2Key: "in.pdf"},
			names: []string{"", "in-p1.jpg", "in-p1.txt", "in-p2.jpg"},
			keys:  []string{"in.pdf", "in-p1.jpg", "in-p1.txt", "in-p2.jpg"},
		},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			body := pdfPages{}.SampleResult(tt.file)
			var res PDFResult
			require.NoError(t, json.Unmarshal(body, &res))
			require.Equal(t, 2, res.PageCount)

			got, err := pdfPages{}.Transform(tt.file, &Task{FileID: tt.file.ID, Status: TaskCompleted, Result: body})
			require.NoError(t, err)
			require.Equal(t, tt.names, fileNames(got))
			keys := make([]string, len(got))
			for i, f := range got {
				keys[i] = f.R2Key
			}
			require.Equal(t, tt.keys, keys)
			require.Equal(t, []string{TagPDFSource}, got[0].Tags[len(got[0].Tags)-1:])
			require.Equal(t, []string{TagPDFPage}, got[1].Tags)
			require.Equal(t, []string{TagPDFText}, got[2].Tags)
			require.Equal(t, []string{TagPDFPage}, got[3].Tags)
		})
	}
}

func TestPDFStem(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]string{
		"report.pdf": "report", "X.PDF": "X", "a.b.Pdf": "a.b", "scan": "scan",
		"doc.pdf.bak": "doc.pdf.bak", ".pdf": ".pdf", "x-p1.pdf": "x-p1",
	} {
		require.Equal(t, want, PDFStem(in), in)
	}
}

// TestPDFValidateResult: a callback's result is checked before its task is
// read, without the PDF's name: chosen names must still be plain names of
// the right kind; their stem is checked when the phase ends.
func TestPDFValidateResult(t *testing.T) {
	t.Parallel()
	body := func(name string) json.RawMessage {
		return mustJSON(t, PDFResult{PageCount: 1, Pages: []PDFPage{{Page: 1, FileSize: 1, FileName: name}}})
	}
	require.NoError(t, ValidateResult(PDFPages, body("")))
	require.NoError(t, ValidateResult(PDFPages, body("report-p1-1.jpg")))
	require.ErrorContains(t, ValidateResult(PDFPages, body("../report-p1.jpg")), "must be a plain name")
	require.ErrorContains(t, ValidateResult(PDFPages, body("..")), "must be a plain name")
	require.ErrorContains(t, ValidateResult(PDFPages, body("report-p1.txt")), `must end in ".jpg"`)
}
