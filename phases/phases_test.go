package phases

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// mustJSON encodes v as a task result.
func mustJSON(t *testing.T, v any) json.RawMessage {
	t.Helper()
	b, err := json.Marshal(v)
	require.NoError(t, err)
	return b
}

// fileNames lists the file names of files, for compact assertions.
func fileNames(files []File) []string {
	names := make([]string, 0, len(files))
	for _, f := range files {
		names = append(names, f.FileName)
	}
	return names
}

// removePhase is a test-only phase showing the "remove" transform pattern:
// it drops every file whose name starts with "drop".
type removePhase struct{}

func (removePhase) Spec() Spec                        { return Spec{Name: "REMOVE_TEST"} }
func (removePhase) SampleResult(File) json.RawMessage { return nil }
func (removePhase) Discover(files []File) []File {
	return files
}
func (removePhase) Transform(f File, _ *Task) ([]File, error) {
	if strings.HasPrefix(f.FileName, "drop") {
		return []File{}, nil
	}
	return []File{f}, nil
}

var cfg = ProcessingConfig{OCR: true, Pinax: true}

func tiffFile() File {
	return File{
		ID: 7, R2Key: "staging/b1/images/photo1.tiff", LogicalPath: "/images/photo1.tiff",
		FileName: "photo1.tiff", FileSize: 9000, ContentType: "image/tiff", CID: "bafyTIFF",
		ProcessingConfig: cfg, Tags: []string{"Manifest"},
	}
}

func jpegFile() File {
	return File{
		ID: 8, R2Key: "staging/b1/images/cat.jpg", LogicalPath: "/images/cat.jpg",
		FileName: "cat.jpg", FileSize: 1234, ContentType: "image/jpeg", CID: "bafyJPEG",
		ProcessingConfig: cfg,
	}
}

func TestRegistry(t *testing.T) {
	t.Parallel()

	var names []Name
	for _, p := range All() {
		names = append(names, p.Spec().Name)
	}
	require.Equal(t, []Name{PDFPages, TIFFConversion, ImageProcessing, OCR, DocumentIndexing}, names)
	require.Equal(t, PDFPages, First())
	require.NoError(t, checkRegistry(All()))

	tests := []struct {
		name     string
		phase    Name
		wantOK   bool
		wantNext Name
	}{
		{name: "PDFPages", phase: PDFPages, wantOK: true, wantNext: TIFFConversion},
		{name: "TIFFConversion", phase: TIFFConversion, wantOK: true, wantNext: ImageProcessing},
		{name: "ImageProcessing", phase: ImageProcessing, wantOK: true, wantNext: OCR},
		{name: "OCR", phase: OCR, wantOK: true, wantNext: DocumentIndexing},
		{name: "DocumentIndexing", phase: DocumentIndexing, wantOK: true, wantNext: ""},
		{name: "Unknown", phase: "DONE", wantOK: false},
		{name: "Empty", phase: "", wantOK: false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			p, ok := Get(tt.phase)
			require.Equal(t, tt.wantOK, ok)
			require.Equal(t, tt.wantNext, Next(tt.phase))
			if !ok {
				require.Nil(t, p)
				return
			}
			require.Equal(t, tt.phase, p.Spec().Name)
		})
	}
}

// renamed is a registered phase under another spec, to build bad registries.
type renamed struct {
	Phase
	spec Spec
}

func (r renamed) Spec() Spec { return r.spec }

// renamedChunker is renamed for a chunked phase.
type renamedChunker struct {
	Chunker
	spec Spec
}

func (r renamedChunker) Spec() Spec { return r.spec }

func TestCheckRegistryRefuses(t *testing.T) {
	t.Parallel()

	tiff := tiffConversion{}.Spec()
	with := func(edit func(*Spec)) Phase {
		s := tiff
		s.Name, s.TaskPrefix, s.Short, s.Worker = "OTHER_PHASE", "other", "OTHER", "other"
		edit(&s)
		return renamed{Phase: tiffConversion{}, spec: s}
	}
	tests := []struct {
		name  string
		other Phase
		want  string
	}{
		{"DuplicatePrefix", with(func(s *Spec) { s.TaskPrefix = "tiff" }), `task prefix "tiff" of OTHER_PHASE is also TIFF_CONVERSION's`},
		{"DuplicateName", with(func(s *Spec) { s.Name = TIFFConversion }), `name "TIFF_CONVERSION"`},
		{"DuplicateShort", with(func(s *Spec) { s.Short = "TIFF" }), `short name "TIFF"`},
		{"DuplicateWorker", with(func(s *Spec) { s.Worker = "tiff" }), `worker "tiff"`},
		{"PrefixWithUnderscore", with(func(s *Spec) { s.TaskPrefix = "other_x" }), "must be lower-case letters and digits"},
		{"StatusAsName", with(func(s *Spec) { s.Name = "DONE" }), "not a batch status"},
		{"NoExecutor", with(func(s *Spec) { s.Executor = "" }), "OTHER_PHASE names no executor"},
		{"SettingDefaultOutOfRange", with(func(s *Spec) { s.Settings = []Setting{{Name: "OTHER_X", Default: 0, Min: 1, Max: 2}} }), "default 0 outside [1, 2]"},
		{"SettingOfAnotherName", with(func(s *Spec) { s.Settings = []Setting{{Name: "TASK_ID", Default: 1, Min: 1, Max: 2}} }), "setting TASK_ID of OTHER_PHASE must start with OTHER_"},
		{"ReservedShort", with(func(s *Spec) { s.Short = "R2" }), `short name "R2" of OTHER_PHASE is reserved`},
		{"ShortOfTwoWords", with(func(s *Spec) { s.Short = "MY_PDF" }), "not one upper-case word"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			require.ErrorContains(t, checkRegistry([]Phase{tiffConversion{}, tt.other}), tt.want)
		})
	}
	require.NoError(t, checkRegistry([]Phase{tiffConversion{}, with(func(*Spec) {})}))
}

// TestCheckRegistryWithoutWorkers: phases whose work runs in-process
// have no worker, and two of them are no duplicate; they keep the other
// rules. (What a kind of executor needs of a phase, its package checks.)
func TestCheckRegistryWithoutWorkers(t *testing.T) {
	t.Parallel()

	chunked := func(name Name, prefix, short string) Phase {
		s := Spec{Name: name, TaskPrefix: prefix, Short: short, Title: "chunks", Executor: "chunked", Defaults: Defaults{ChunkSize: ChunkSize{Groups: 10, Refs: 50}}}
		return renamedChunker{Chunker: ocr{}, spec: s}
	}
	require.NoError(t, checkRegistry([]Phase{tiffConversion{}, chunked("CHUNKY", "chunky", "CHUNKY"), chunked("LUMPY", "lumpy", "LUMPY")}))
	require.ErrorContains(t, checkRegistry([]Phase{tiffConversion{}, chunked("CHUNKY", "tiff", "CHUNKY")}), `task prefix "tiff" of CHUNKY is also TIFF_CONVERSION's`)
	require.ErrorContains(t, checkRegistry([]Phase{tiffConversion{}, chunked("CHUNKY", "chunky", "")}), "CHUNKY lacks a short name")
}

// TestSampleResults: every phase's sample body is one its own Transform
// accepts and that changes the file list, so fakes built on it exercise
// the real transform.
func TestSampleResults(t *testing.T) {
	t.Parallel()
	for _, p := range All() {
		t.Run(string(p.Spec().Name), func(t *testing.T) {
			t.Parallel()
			in := File{ID: 3, R2Key: "staging/b1/docs/in.bin", LogicalPath: "/docs/in.bin", FileName: "in.bin", FileSize: 10, ContentType: "application/octet-stream"}
			out, err := p.Transform(in, &Task{FileID: 3, Status: TaskCompleted, Result: p.SampleResult(in)})
			require.NoError(t, err)
			require.NotEqual(t, []File{in}, out)
			if p.Spec().Worker != "" {
				require.NoError(t, ValidateResult(p.Spec().Name, p.SampleResult(in)))
			}
		})
	}
}

func TestOfTask(t *testing.T) {
	t.Parallel()
	for _, p := range All() {
		s := p.Spec()
		require.Equal(t, s.Name, OfTask(s.TaskPrefix+"_01jabc"))
		require.Equal(t, s.TaskPrefix, TaskIDPrefix(s.Name))
	}
	require.Equal(t, Name(""), OfTask("nounderscore"))
	require.Equal(t, Name(""), OfTask("nosuch_01jabc"))
	require.Equal(t, "", TaskIDPrefix("DONE"))
}

func TestStatuses(t *testing.T) {
	t.Parallel()
	require.Equal(t, []BatchStatus{"PENDING", "PDF_PAGES", "TIFF_CONVERSION", "IMAGE_PROCESSING", "OCR", "DOCUMENT_INDEXING", "DONE", "ERROR"}, Statuses())
	require.True(t, BatchDone.Terminal())
	require.True(t, BatchError.Terminal())
	require.False(t, ImageProcessing.Status().Terminal())
	_, ok := BatchPending.Phase()
	require.False(t, ok)
	p, ok := TIFFConversion.Status().Phase()
	require.True(t, ok)
	require.Equal(t, TIFFConversion, p.Spec().Name)
}

func TestDiscover(t *testing.T) {
	t.Parallel()

	tests := []struct {
		name  string
		phase Name
		files []File
		want  []string
	}{
		{
			name:  "TIFFExtensions",
			phase: TIFFConversion,
			files: []File{
				{FileName: "a.tif"}, {FileName: "b.TIF"}, {FileName: "c.tiff"},
				{FileName: "d.TIFF"}, {FileName: "e.Tif"},
			},
			want: []string{"a.tif", "b.TIF", "c.tiff", "d.TIFF", "e.Tif"},
		},
		{
			name:  "TIFFNotMatched",
			phase: TIFFConversion,
			files: []File{
				{FileName: "scan.tiff.bak"}, {FileName: "tiff"}, {FileName: "notes.tiffx"},
				{FileName: "doc.pdf", ContentType: "application/pdf"},
				{FileName: "scan", ContentType: "image/tiff"},
			},
			want: []string{},
		},
		{
			name:  "TIFFSkipsConvertedSource",
			phase: TIFFConversion,
			files: []File{
				{FileName: "done.tiff", Tags: []string{TagTIFFSource}},
				{FileName: "todo.tiff", Tags: []string{"Other"}},
			},
			want: []string{"todo.tiff"},
		},
		{
			name:  "TIFFKeepsListOrder",
			phase: TIFFConversion,
			files: []File{{FileName: "z.tif"}, {FileName: "x.pdf"}, {FileName: "a.tif"}},
			want:  []string{"z.tif", "a.tif"},
		},
		{
			name:  "ImageTypes",
			phase: ImageProcessing,
			files: []File{
				{FileName: "a.jpg", ContentType: "image/jpeg"},
				{FileName: "b.png", ContentType: "image/png"},
				{FileName: "c.webp", ContentType: "image/webp"},
				{FileName: "d.jpg", ContentType: "IMAGE/JPEG"},
				{FileName: "e.png", ContentType: "image/png; charset=binary"},
				{FileName: "f.jpg", ContentType: " image/jpeg ;q=1"},
			},
			want: []string{"a.jpg", "b.png", "c.webp", "d.jpg", "e.png", "f.jpg"},
		},
		{
			name:  "ImageNotMatched",
			phase: ImageProcessing,
			files: []File{
				{FileName: "doc.pdf", ContentType: "application/pdf"},
				{FileName: "scan.tiff", ContentType: "image/tiff"},
				{FileName: "anim.gif", ContentType: "image/gif"},
				{FileName: "photo.jpg", ContentType: ""},
				{FileName: "meta.json", ContentType: "application/json"},
			},
			want: []string{},
		},
		{
			name:  "ImageSkipsTIFFSource",
			phase: ImageProcessing,
			files: []File{
				{FileName: "src.jpg", ContentType: "image/jpeg", Tags: []string{TagTIFFSource}},
				{FileName: "out.jpg", ContentType: "image/jpeg", Tags: []string{TagTIFFConverter}},
			},
			want: []string{"out.jpg"},
		},
		{
			name:  "Empty",
			phase: ImageProcessing,
			files: nil,
			want:  []string{},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			p, ok := Get(tt.phase)
			require.True(t, ok)
			require.Equal(t, tt.want, fileNames(p.Discover(tt.files)))
		})
	}
}

func TestTIFFTransform(t *testing.T) {
	t.Parallel()

	src := tiffFile()
	taggedSrc := src
	taggedSrc.Tags = []string{"Manifest", TagTIFFSource}
	jpeg := func(key, name, logical string, size int64) File {
		return File{
			R2Key: key, LogicalPath: logical, FileName: name, FileSize: size,
			ContentType: "image/jpeg", ProcessingConfig: cfg, Tags: []string{TagTIFFConverter},
		}
	}
	completed := func(v any) *Task {
		return &Task{FileID: src.ID, Status: TaskCompleted, Result: mustJSON(t, v)}
	}

	tests := []struct {
		name    string
		file    File
		task    *Task
		want    []File
		wantErr string
	}{
		{name: "PreserveNoTask", file: src, task: nil, want: []File{src}},
		{name: "PreserveFailed", file: src, task: &Task{FileID: 7, Status: TaskFailed}, want: []File{src}},
		{name: "PreservePending", file: src, task: &Task{FileID: 7, Status: TaskPending}, want: []File{src}},
		{name: "PreserveProcessing", file: src, task: &Task{FileID: 7, Status: TaskProcessing}, want: []File{src}},
		{
			name: "AugmentCompleted",
			file: src,
			task: completed(map[string]any{
				"task_id": "tiff_1", "status": "success",
				"output_r2_key": "staging/b1/images/photo1.jpg", "output_file_name": "photo1.jpg",
				"output_file_size": 245678, "performance": map[string]any{"total_time_ms": 3400},
			}),
			want: []File{taggedSrc, jpeg("staging/b1/images/photo1.jpg", "photo1.jpg", "/images/photo1.jpg", 245678)},
		},
		{
			name: "AugmentAtRoot",
			file: File{ID: 1, R2Key: "k/a.tif", LogicalPath: "/a.tif", FileName: "a.tif", ProcessingConfig: cfg},
			task: completed(TIFFResult{OutputR2Key: "k/a.jpg", OutputFileName: "a.jpg", OutputFileSize: 10}),
			want: []File{
				{ID: 1, R2Key: "k/a.tif", LogicalPath: "/a.tif", FileName: "a.tif", ProcessingConfig: cfg, Tags: []string{TagTIFFSource}},
				jpeg("k/a.jpg", "a.jpg", "/a.jpg", 10),
			},
		},
		{
			name: "AugmentNoDuplicateTag",
			file: File{ID: 2, LogicalPath: "/x/b.tif", FileName: "b.tif", ProcessingConfig: cfg, Tags: []string{TagTIFFSource, "Other"}},
			task: completed(TIFFResult{OutputR2Key: "k/b.jpg", OutputFileName: "b.jpg", OutputFileSize: 3}),
			want: []File{
				{ID: 2, LogicalPath: "/x/b.tif", FileName: "b.tif", ProcessingConfig: cfg, Tags: []string{TagTIFFSource, "Other"}},
				jpeg("k/b.jpg", "b.jpg", "/x/b.jpg", 3),
			},
		},
		{
			name: "AugmentMultiPageInPageOrder",
			file: src,
			task: completed(TIFFResult{
				OutputR2Key: "ignored.jpg", OutputFileName: "ignored.jpg",
				Outputs: []TIFFOutput{
					{R2Key: "k/photo1_p3.jpg", FileName: "photo1_p3.jpg", FileSize: 30, Page: 3},
					{R2Key: "k/photo1_p1.jpg", FileName: "photo1_p1.jpg", FileSize: 10, Page: 1},
					{R2Key: "k/photo1_p2.jpg", FileName: "photo1_p2.jpg", FileSize: 20, Page: 2},
				},
			}),
			want: []File{
				taggedSrc,
				jpeg("k/photo1_p1.jpg", "photo1_p1.jpg", "/images/photo1_p1.jpg", 10),
				jpeg("k/photo1_p2.jpg", "photo1_p2.jpg", "/images/photo1_p2.jpg", 20),
				jpeg("k/photo1_p3.jpg", "photo1_p3.jpg", "/images/photo1_p3.jpg", 30),
			},
		},
		{
			name:    "ErrorMissingOutputKey",
			file:    src,
			task:    completed(map[string]any{"output_file_name": "photo1.jpg"}),
			wantErr: "lacks output_r2_key or output_file_name",
		},
		{
			name:    "ErrorMissingOutputFileName",
			file:    src,
			task:    completed(map[string]any{"output_r2_key": "k/photo1.jpg"}),
			wantErr: "lacks output_r2_key or output_file_name",
		},
		{
			name: "ErrorMultiPageOutputMissingKey",
			file: src,
			task: completed(TIFFResult{Outputs: []TIFFOutput{
				{R2Key: "k/p1.jpg", FileName: "p1.jpg", Page: 1},
				{FileName: "p2.jpg", Page: 2},
			}}),
			wantErr: "page 2",
		},
		{
			name:    "ErrorMalformedJSON",
			file:    src,
			task:    &Task{FileID: 7, Status: TaskCompleted, Result: json.RawMessage(`{"output_r2_key": 5`)},
			wantErr: "decoding result",
		},
		{
			name:    "ErrorEmptyResult",
			file:    src,
			task:    &Task{FileID: 7, Status: TaskCompleted},
			wantErr: "no result",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got, err := tiffConversion{}.Transform(tt.file, tt.task)
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

func TestImageTransform(t *testing.T) {
	t.Parallel()

	src := jpegFile()
	refData := json.RawMessage(`{"url":"https://cdn.arke.institute/x","ipfs_cid":"bafy","type":"image/jpeg","size":1234,"filename":"cat.jpg","extra":true}`)
	ref := func(size int64) File {
		return File{
			R2Key: "staging/b1/images/cat.jpg.ref.json", LogicalPath: "/images/cat.jpg.ref.json",
			FileName: "cat.jpg.ref.json", FileSize: size, ContentType: "application/json",
			ProcessingConfig: cfg, Tags: []string{TagImageProcessor},
		}
	}
	completed := func(v any) *Task {
		return &Task{FileID: src.ID, Status: TaskCompleted, Result: mustJSON(t, v)}
	}

	tests := []struct {
		name    string
		task    *Task
		want    []File
		wantErr string
	}{
		{name: "PreserveNoTask", task: nil, want: []File{src}},
		{name: "PreserveFailed", task: &Task{FileID: 8, Status: TaskFailed}, want: []File{src}},
		{name: "PreservePending", task: &Task{FileID: 8, Status: TaskPending}, want: []File{src}},
		{
			name: "ReplaceWithReportedSize",
			task: completed(ImageResult{
				RefJSONR2Key: "staging/b1/images/cat.jpg.ref.json", RefData: refData,
				ArchiveR2Key: "archive/cat.jpg", RefJSONSize: 321,
			}),
			want: []File{ref(321)},
		},
		{
			name: "ReplaceSizeFromRefData",
			task: completed(ImageResult{RefJSONR2Key: "staging/b1/images/cat.jpg.ref.json", RefData: refData}),
			want: []File{ref(int64(len(refData)))},
		},
		{
			name:    "ErrorMissingRefKey",
			task:    completed(ImageResult{RefData: refData}),
			wantErr: "lacks ref_json_r2_key",
		},
		{
			name:    "ErrorMalformedJSON",
			task:    &Task{FileID: 8, Status: TaskCompleted, Result: json.RawMessage(`[1,2`)},
			wantErr: "decoding result",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got, err := imageProcessing{}.Transform(src, tt.task)
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

func TestTransformDoesNotMutateInput(t *testing.T) {
	t.Parallel()

	tests := []struct {
		name   string
		phase  Phase
		file   File
		result any
	}{
		{
			name:   "TIFFConversion",
			phase:  tiffConversion{},
			file:   tiffFile(),
			result: TIFFResult{OutputR2Key: "k/photo1.jpg", OutputFileName: "photo1.jpg"},
		},
		{
			name:   "ImageProcessing",
			phase:  imageProcessing{},
			file:   jpegFile(),
			result: ImageResult{RefJSONR2Key: "k/cat.jpg.ref.json"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			// Spare capacity would let a careless append write into the
			// caller's backing array.
			tags := make([]string, 1, 8)
			tags[0] = "Manifest"
			in := tt.file
			in.Tags = tags
			task := &Task{FileID: in.ID, Status: TaskCompleted, Result: mustJSON(t, tt.result)}

			out, err := tt.phase.Transform(in, task)
			require.NoError(t, err)
			for i := range out {
				for j := range out[i].Tags {
					out[i].Tags[j] = "Scribbled"
				}
				out[i].Tags = append(out[i].Tags, "Appended")
			}
			require.Equal(t, []string{"Manifest"}, in.Tags)
			require.Equal(t, "Manifest", tags[:cap(tags)][0])
			require.Empty(t, tags[1:cap(tags)][0], "no write past the input's length")
		})
	}
}

func TestApply(t *testing.T) {
	t.Parallel()

	tif := tiffFile()
	jpg := jpegFile()
	pdf := File{ID: 9, R2Key: "k/doc.pdf", LogicalPath: "/doc.pdf", FileName: "doc.pdf", ContentType: "application/pdf", Tags: []string{}}
	lineage := func(f File, parent int64) File {
		f.ID = 0
		f.ParentID = parent
		return f
	}

	tests := []struct {
		name         string
		phase        Phase
		files        []File
		tasks        map[int64]Task
		want         []File
		wantProblems []string
	}{
		{
			name:  "PreserveWithoutTasks",
			phase: tiffConversion{},
			files: []File{tif, pdf},
			tasks: nil,
			want:  []File{lineage(tif, 7), lineage(pdf, 9)},
		},
		{
			name:  "PreserveFailedTask",
			phase: imageProcessing{},
			files: []File{jpg},
			tasks: map[int64]Task{8: {FileID: 8, Status: TaskFailed}},
			want:  []File{lineage(jpg, 8)},
		},
		{
			name:  "ReplaceImage",
			phase: imageProcessing{},
			files: []File{pdf, jpg},
			tasks: map[int64]Task{8: {FileID: 8, Status: TaskCompleted, Result: mustJSON(t, ImageResult{RefJSONR2Key: "k/cat.jpg.ref.json", RefJSONSize: 99})}},
			want: []File{
				lineage(pdf, 9),
				{ParentID: 8, R2Key: "k/cat.jpg.ref.json", LogicalPath: "/images/cat.jpg.ref.json", FileName: "cat.jpg.ref.json",
					FileSize: 99, ContentType: "application/json", ProcessingConfig: cfg, Tags: []string{TagImageProcessor}},
			},
		},
		{
			name:  "AugmentTIFF",
			phase: tiffConversion{},
			files: []File{tif, pdf},
			tasks: map[int64]Task{7: {FileID: 7, Status: TaskCompleted, Result: mustJSON(t, TIFFResult{OutputR2Key: "k/photo1.jpg", OutputFileName: "photo1.jpg", OutputFileSize: 5})}},
			want: []File{
				func() File { f := lineage(tif, 7); f.Tags = []string{"Manifest", TagTIFFSource}; return f }(),
				{ParentID: 7, R2Key: "k/photo1.jpg", LogicalPath: "/images/photo1.jpg", FileName: "photo1.jpg", FileSize: 5,
					ContentType: "image/jpeg", ProcessingConfig: cfg, Tags: []string{TagTIFFConverter}},
				lineage(pdf, 9),
			},
		},
		{
			name:  "RemoveKeepsLineageOfOthers",
			phase: removePhase{},
			files: []File{
				{ID: 1, FileName: "keep1"},
				{ID: 2, FileName: "drop2"},
				{ID: 3, FileName: "keep3"},
			},
			want: []File{{ParentID: 1, FileName: "keep1"}, {ParentID: 3, FileName: "keep3"}},
		},
		{
			name:  "RemoveAll",
			phase: removePhase{},
			files: []File{{ID: 1, FileName: "drop1"}},
			want:  []File{},
		},
		{
			name:  "ErrorPassesFileThrough",
			phase: tiffConversion{},
			files: []File{tif, pdf},
			tasks: map[int64]Task{7: {FileID: 7, Status: TaskCompleted, Result: mustJSON(t, map[string]any{"output_file_size": 1})}},
			want:  []File{lineage(tif, 7), lineage(pdf, 9)},
			wantProblems: []string{
				"transforming staging/b1/images/photo1.tiff in phase TIFF_CONVERSION: completed TIFF result lacks output_r2_key or output_file_name",
			},
		},
		{
			name:  "ErrorsReportedPerFile",
			phase: imageProcessing{},
			files: []File{
				{ID: 1, R2Key: "k/a.png", FileName: "a.png", ContentType: "image/png"},
				{ID: 2, R2Key: "k/b.png", FileName: "b.png", ContentType: "image/png"},
			},
			tasks: map[int64]Task{
				1: {FileID: 1, Status: TaskCompleted, Result: json.RawMessage(`not json`)},
				2: {FileID: 2, Status: TaskCompleted, Result: json.RawMessage(`{}`)},
			},
			want: []File{
				{ParentID: 1, R2Key: "k/a.png", FileName: "a.png", ContentType: "image/png"},
				{ParentID: 2, R2Key: "k/b.png", FileName: "b.png", ContentType: "image/png"},
			},
			wantProblems: []string{"k/a.png", "k/b.png"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			next, problems := Apply(tt.phase, tt.files, tt.tasks)
			require.Equal(t, tt.want, next)
			require.Len(t, problems, len(tt.wantProblems))
			for i, want := range tt.wantProblems {
				require.ErrorContains(t, problems[i], want)
				var te *TransformError
				require.True(t, errors.As(problems[i], &te))
				require.Equal(t, tt.phase.Spec().Name, te.Phase)
				require.Equal(t, tt.files[i].R2Key, te.R2Key)
				require.Equal(t, tt.files[i].ID, te.FileID)
				require.Error(t, errors.Unwrap(te))
			}
		})
	}
}

func TestApplyDoesNotShareTags(t *testing.T) {
	t.Parallel()

	in := []File{{ID: 1, FileName: "doc.pdf", Tags: make([]string, 1, 4)}}
	in[0].Tags[0] = "Manifest"
	next, problems := Apply(imageProcessing{}, in, nil)
	require.Empty(t, problems)
	next[0].Tags[0] = "Scribbled"
	_ = append(next[0].Tags, "Appended")
	require.Equal(t, []string{"Manifest"}, in[0].Tags)
	require.Empty(t, in[0].Tags[:2][1])
}

func TestNextWithWork(t *testing.T) {
	t.Parallel()

	tif := File{FileName: "scan.tif", ContentType: "image/tiff"}
	convertedTIF := File{FileName: "scan.tif", ContentType: "image/tiff", Tags: []string{TagTIFFSource}}
	jpg := File{FileName: "a.jpg", ContentType: "image/jpeg"}
	png := File{FileName: "b.png", ContentType: "image/png"}
	pdf := File{FileName: "doc.pdf", ContentType: "application/pdf"}
	splitPDF := File{FileName: "doc.pdf", ContentType: "application/pdf", Tags: []string{TagPDFSource}}
	kept := func(f File) File { f.Kept = true; return f }

	tests := []struct {
		name      string
		from      Name
		files     []File
		wantPhase Name // "" means no phase
		wantFiles []string
	}{
		{name: "EmptyFromMeansFirst", from: "", files: []File{pdf, tif, jpg}, wantPhase: PDFPages, wantFiles: []string{"doc.pdf"}},
		{name: "SplitPDFSkipsToTIFF", from: "", files: []File{splitPDF, tif, jpg}, wantPhase: TIFFConversion, wantFiles: []string{"scan.tif"}},
		{name: "OnlyJPEGsSkipsTIFF", from: "", files: []File{jpg, png}, wantPhase: ImageProcessing, wantFiles: []string{"a.jpg", "b.png"}},
		{name: "OnlyPDFs", from: "", files: []File{pdf, pdf}, wantPhase: PDFPages, wantFiles: []string{"doc.pdf", "doc.pdf"}},
		{name: "SplitPDFsOnly", from: "", files: []File{splitPDF, splitPDF}, wantPhase: ""},
		{name: "NoFiles", from: "", files: nil, wantPhase: ""},
		{name: "FromIsInclusive", from: ImageProcessing, files: []File{tif, jpg}, wantPhase: ImageProcessing, wantFiles: []string{"a.jpg"}},
		{name: "ConvertedTIFFOnly", from: TIFFConversion, files: []File{convertedTIF, splitPDF}, wantPhase: ""},
		{name: "LastPhaseNoWork", from: ImageProcessing, files: []File{tif, pdf}, wantPhase: ""},
		{name: "UnknownPhase", from: "DONE", files: []File{tif, jpg}, wantPhase: ""},
		{name: "KeptFilesAreNoWork", from: "", files: []File{kept(pdf), kept(tif), png, kept(jpg)}, wantPhase: ImageProcessing, wantFiles: []string{"b.png"}},
		{name: "AllKept", from: "", files: []File{kept(pdf), kept(tif), kept(jpg)}, wantPhase: ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			p, work := NextWithWork(tt.from, tt.files)
			if tt.wantPhase == "" {
				require.Nil(t, p)
				require.Nil(t, work)
				return
			}
			require.NotNil(t, p)
			require.Equal(t, tt.wantPhase, p.Spec().Name)
			require.Equal(t, tt.wantFiles, fileNames(work))
		})
	}
}

// TestWorkedExample runs spec 000 §3.2 (TIFF → IMAGE; a text file passes
// through, as the spec's PDF did before PDFs had a phase) the way the
// orchestrator does: find the phase with work, complete its tasks, apply the
// transform, store the generation (IDs assigned as a database would), repeat.
func TestWorkedExample(t *testing.T) {
	t.Parallel()

	nextID := int64(0)
	store := func(files []File) []File {
		for i := range files {
			require.Zero(t, files[i].ID, "Apply output is not yet stored")
			nextID++
			files[i].ID = nextID
		}
		return files
	}

	gen := store([]File{
		{R2Key: "staging/b1/photo.tiff", LogicalPath: "/photo.tiff", FileName: "photo.tiff", FileSize: 900, ContentType: "image/tiff", CID: "bafyTIFF", ProcessingConfig: cfg},
		{R2Key: "staging/b1/notes.txt", LogicalPath: "/notes.txt", FileName: "notes.txt", FileSize: 50, ContentType: "text/plain", CID: "bafyTXT"},
	})

	// TIFF_CONVERSION discovers photo.tiff only.
	p, work := NextWithWork("", gen)
	require.NotNil(t, p)
	require.Equal(t, TIFFConversion, p.Spec().Name)
	require.Equal(t, []string{"photo.tiff"}, fileNames(work))
	tasks := map[int64]Task{work[0].ID: {
		FileID: work[0].ID, Status: TaskCompleted,
		Result: mustJSON(t, map[string]any{
			"task_id": "tiff_abc123", "batch_id": "b1", "status": "success",
			"output_r2_key": "staging/b1/photo.jpg", "output_file_name": "photo.jpg", "output_file_size": 245678,
		}),
	}}
	next, problems := Apply(p, gen, tasks)
	require.Empty(t, problems)
	require.Equal(t, []File{
		{ParentID: 1, R2Key: "staging/b1/photo.tiff", LogicalPath: "/photo.tiff", FileName: "photo.tiff", FileSize: 900, ContentType: "image/tiff", CID: "bafyTIFF", ProcessingConfig: cfg, Tags: []string{TagTIFFSource}},
		{ParentID: 1, R2Key: "staging/b1/photo.jpg", LogicalPath: "/photo.jpg", FileName: "photo.jpg", FileSize: 245678, ContentType: "image/jpeg", ProcessingConfig: cfg, Tags: []string{TagTIFFConverter}},
		{ParentID: 2, R2Key: "staging/b1/notes.txt", LogicalPath: "/notes.txt", FileName: "notes.txt", FileSize: 50, ContentType: "text/plain", CID: "bafyTXT"},
	}, next)
	gen = store(next)

	// IMAGE_PROCESSING discovers photo.jpg only, skipping the TIFF source.
	p, work = NextWithWork(Next(p.Spec().Name), gen)
	require.NotNil(t, p)
	require.Equal(t, ImageProcessing, p.Spec().Name)
	require.Equal(t, []string{"photo.jpg"}, fileNames(work))
	require.Equal(t, int64(4), work[0].ID)
	refData := json.RawMessage(`{"url":"https://cdn.arke.institute/photo.jpg","type":"image/jpeg","size":245678,"filename":"photo.jpg"}`)
	tasks = map[int64]Task{work[0].ID: {
		FileID: work[0].ID, Status: TaskCompleted,
		Result: mustJSON(t, ImageResult{RefJSONR2Key: "staging/b1/photo.jpg.ref.json", RefData: refData, ArchiveR2Key: "archive/b1/photo.jpg"}),
	}}
	next, problems = Apply(p, gen, tasks)
	require.Empty(t, problems)
	require.Equal(t, []File{
		{ParentID: 3, R2Key: "staging/b1/photo.tiff", LogicalPath: "/photo.tiff", FileName: "photo.tiff", FileSize: 900, ContentType: "image/tiff", CID: "bafyTIFF", ProcessingConfig: cfg, Tags: []string{TagTIFFSource}},
		{ParentID: 4, R2Key: "staging/b1/photo.jpg.ref.json", LogicalPath: "/photo.jpg.ref.json", FileName: "photo.jpg.ref.json", FileSize: int64(len(refData)), ContentType: "application/json", ProcessingConfig: cfg, Tags: []string{TagImageProcessor}},
		{ParentID: 5, R2Key: "staging/b1/notes.txt", LogicalPath: "/notes.txt", FileName: "notes.txt", FileSize: 50, ContentType: "text/plain", CID: "bafyTXT"},
	}, next)
	gen = store(next)

	// Phase 4: the directory asked for OCR, so the ref is transcribed in
	// one chunk, and its published version replaces it, tagged.
	p, work = NextWithWork(Next(p.Spec().Name), gen)
	require.NotNil(t, p)
	require.Equal(t, OCR, p.Spec().Name)
	require.Equal(t, []string{"photo.jpg.ref.json"}, fileNames(work))
	chunks := p.(Chunker).Chunks(gen, DefaultOCRChunkSize)
	require.Len(t, chunks, 1)
	require.Equal(t, []ChunkItem{{Index: 1, Ref: gen[1]}}, chunks[0].Items)
	tasks = map[int64]Task{gen[1].ID: {FileID: gen[1].ID, Status: TaskCompleted,
		Result: mustJSON(t, OCRResult{TextLength: 12, RefR2Key: "staging/b1/photo.jpg.ocr.ref.json", RefSize: 400})}}
	next, problems = Apply(p, gen, tasks)
	require.Empty(t, problems)
	require.Equal(t, File{ParentID: gen[1].ID, R2Key: "staging/b1/photo.jpg.ocr.ref.json", LogicalPath: "/photo.jpg.ref.json", FileName: "photo.jpg.ref.json",
		FileSize: 400, ContentType: "application/json", ProcessingConfig: cfg, Tags: []string{TagImageProcessor, TagOCR}}, next[1])
	gen = store(next)

	// The directory asked for no description: DOCUMENT_INDEXING, the last
	// phase, has no work, and the batch goes to ingest.
	require.Equal(t, DocumentIndexing, Next(p.Spec().Name))
	require.Equal(t, Name(""), Next(DocumentIndexing))
	p, work = NextWithWork(TIFFConversion, gen)
	require.Nil(t, p)
	require.Nil(t, work)
}

func TestValidateResult(t *testing.T) {
	tests := []struct {
		name    string
		phase   Name
		body    string
		wantErr string
	}{
		{"TIFFSuccess", TIFFConversion, `{"status":"success","output_r2_key":"s/a.jpg","output_file_name":"a.jpg","output_file_size":10}`, ""},
		{"TIFFMultiPage", TIFFConversion, `{"status":"success","outputs":[{"r2_key":"s/a-1.jpg","file_name":"a-1.jpg","file_size":1,"page":1}]}`, ""},
		{"TIFFMissingKey", TIFFConversion, `{"status":"success","output_file_name":"a.jpg"}`, "lacks output_r2_key"},
		{"TIFFWrongType", TIFFConversion, `{"status":"success","output_r2_key":5}`, "output_r2_key"},
		{"ImageSuccess", ImageProcessing, `{"status":"success","ref_json_r2_key":"s/a.jpg.ref.json","ref_data":{"url":"https://cdn/a.jpg"},"archive_r2_key":"a.jpg"}`, ""},
		{"ImageMissingRef", ImageProcessing, `{"status":"success","ref_data":{}}`, "ref_json_r2_key"},
		{"UnknownPhase", Name("NOPE"), `{}`, "unknown phase"},
		{"ChunkedPhase", OCR, `{"text_length":1,"ref_r2_key":"s/a.ocr.ref.json","ref_size":9}`, "takes no callbacks"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := ValidateResult(tt.phase, json.RawMessage(tt.body))
			if tt.wantErr == "" {
				require.NoError(t, err)
				return
			}
			require.ErrorContains(t, err, tt.wantErr)
		})
	}
}

// TestValidateBatchResult: the keys a worker chose must lie under its
// batch's staging prefix, without a segment that climbs out; the names it
// chose must be plain; a TIFF may not become more than
// MAX_OUTPUTS_PER_TASK JPEGs.
func TestValidateBatchResult(t *testing.T) {
	t.Parallel()
	tiff := func(key, name string) string {
		return fmt.Sprintf(`{"status":"success","output_r2_key":%q,"output_file_name":%q,"output_file_size":10}`, key, name)
	}
	image := func(ref, archive string) string {
		return fmt.Sprintf(`{"status":"success","ref_json_r2_key":%q,"ref_data":{"url":"https://cdn/a.jpg"},"archive_r2_key":%q}`, ref, archive)
	}
	pages := func(n int) string {
		return `{"status":"success","outputs":[` + strings.TrimSuffix(strings.Repeat(`{"r2_key":"staging/B/p.jpg","file_name":"p.jpg","file_size":1,"page":1},`, n), ",") + `]}`
	}
	tests := []struct {
		name, phase, body, wantErr string
	}{
		{"TIFFInBatch", string(TIFFConversion), tiff("staging/B/scans/a.jpg", "a.jpg"), ""},
		{"TIFFOtherBatch", string(TIFFConversion), tiff("staging/OTHER/a.jpg", "a.jpg"), `key "staging/OTHER/a.jpg" is not under the batch's prefix "staging/B/"`},
		{"TIFFClimbsOut", string(TIFFConversion), tiff("staging/B/../OTHER/a.jpg", "a.jpg"), `has an empty, "." or ".." path segment`},
		{"TIFFNameWithSlash", string(TIFFConversion), tiff("staging/B/a.jpg", "../a.jpg"), `file_name "../a.jpg" must be a plain name`},
		{"TIFFNameNotJPEG", string(TIFFConversion), tiff("staging/B/a.exe", "a.exe"), `file_name "a.exe" must end in .jpg`},
		{"TIFFAllTheOutputsAllowed", string(TIFFConversion), pages(DefaultMaxOutputs), ""},
		{"TIFFTooManyOutputs", string(TIFFConversion), pages(DefaultMaxOutputs + 1), "the result lists 4002 output files, more than MAX_OUTPUTS_PER_TASK (4001)"},
		{"ImageInBatch", string(ImageProcessing), image("staging/B/a.jpg.ref.json", "staging/B/a.jpg"), ""},
		{"ImageRefElsewhere", string(ImageProcessing), image("staging/OTHER/a.jpg.ref.json", "staging/B/a.jpg"), "is not under the batch's prefix"},
		{"ImageArchiveElsewhere", string(ImageProcessing), image("staging/B/a.jpg.ref.json", "staging/OTHER/a.jpg"), "is not under the batch's prefix"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			err := ValidateBatchResult(Name(tt.phase), "B", json.RawMessage(tt.body), DefaultMaxOutputs)
			if tt.wantErr == "" {
				require.NoError(t, err)
				return
			}
			require.ErrorContains(t, err, tt.wantErr)
		})
	}
}

// TestMaxOutputsIsConfigurable: the cap on a result's output files is the
// caller's (MAX_OUTPUTS_PER_TASK), for a TIFF's JPEGs and for a PDF's page
// JPEGs and text files alike; a result within it passes.
func TestMaxOutputsIsConfigurable(t *testing.T) {
	t.Parallel()
	tiff := `{"status":"success","outputs":[
		{"r2_key":"staging/B/a-1.jpg","file_name":"a-1.jpg","file_size":1,"page":1},
		{"r2_key":"staging/B/a-2.jpg","file_name":"a-2.jpg","file_size":1,"page":2},
		{"r2_key":"staging/B/a-3.jpg","file_name":"a-3.jpg","file_size":1,"page":3}]}`
	// Two pages, the first with a text layer: three output files.
	pdf := `{"status":"success","page_count":2,"pages":[{"page":1,"file_size":5,"text_file_size":3},{"page":2,"file_size":5}]}`
	for _, tt := range []struct {
		name    string
		phase   Name
		body    string
		max     int
		wantErr string
	}{
		{"TIFFAtTheCap", TIFFConversion, tiff, 3, ""},
		{"TIFFOverTheCap", TIFFConversion, tiff, 2, "the result lists 3 output files, more than MAX_OUTPUTS_PER_TASK (2)"},
		{"PDFAtTheCap", PDFPages, pdf, 3, ""},
		{"PDFOverTheCap", PDFPages, pdf, 2, "the result lists 3 output files, more than MAX_OUTPUTS_PER_TASK (2)"},
		{"ImageAddsNoFile", ImageProcessing, `{"status":"success","ref_json_r2_key":"staging/B/a.jpg.ref.json","ref_data":{"url":"https://cdn/a.jpg"}}`, 0, ""},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			err := ValidateBatchResult(tt.phase, "B", json.RawMessage(tt.body), tt.max)
			if tt.wantErr == "" {
				require.NoError(t, err)
				return
			}
			require.EqualError(t, err, tt.wantErr)
		})
	}
}

// TestApplyPassesKeptOn: a kept file's outputs are kept, a rerun file's
// are not, whatever the transform builds.
func TestApplyPassesKeptOn(t *testing.T) {
	t.Parallel()
	p, _ := Get(ImageProcessing)
	img := File{ID: 4, R2Key: "staging/b/a.jpg", FileName: "a.jpg", LogicalPath: "/a.jpg", ContentType: "image/jpeg"}
	done := &Task{FileID: 4, Status: TaskCompleted, Result: p.SampleResult(img)}
	outs, err := ApplyOne(p, img, done)
	require.NoError(t, err)
	require.False(t, outs[0].Kept)
	keptImg := img
	keptImg.Kept = true
	outs, err = ApplyOne(p, keptImg, nil)
	require.NoError(t, err)
	require.True(t, outs[0].Kept)
	outs, err = ApplyOne(p, keptImg, done)
	require.NoError(t, err)
	require.True(t, outs[0].Kept, "the mark goes with the input, not with what the transform built")
}
