package phases

import (
	"encoding/json"
	"fmt"
	"path"
	"testing"

	"github.com/stretchr/testify/require"
)

// ref is an image ref at logical in manifest directory group.
func ref(id int64, group, logical string, ocrOn bool, tags ...string) File {
	return File{
		ID: id, R2Key: "staging/b1" + logical, LogicalPath: logical, FileName: path.Base(logical),
		FileSize: 300, ContentType: "application/json", DirectoryPath: group,
		ProcessingConfig: ProcessingConfig{OCR: ocrOn}, Tags: append([]string{TagImageProcessor}, tags...),
	}
}

// pageText is a PDF page's text layer at logical.
func pageText(id int64, group, logical string) File {
	return File{ID: id, R2Key: "staging/b1" + logical, LogicalPath: logical, FileName: path.Base(logical),
		FileSize: 20, ContentType: pdfTextContentType, DirectoryPath: group, ProcessingConfig: ProcessingConfig{OCR: true}, Tags: []string{TagPDFText}}
}

func TestOCRSpec(t *testing.T) {
	t.Parallel()
	s := ocr{}.Spec()
	require.Equal(t, OCR, s.Name)
	require.Equal(t, "chunked", s.Executor)
	require.Equal(t, "ocr", s.Engine)
	require.Equal(t, DefaultOCRChunkSize, s.Defaults.ChunkSize)
	require.Equal(t, OCR, Next(ImageProcessing), "OCR reads the refs IMAGE_PROCESSING makes")
	require.NoError(t, checkRegistry(All()))
}

func TestOCRDiscover(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		file File
		want bool
	}{
		{"ImageRef", ref(1, "/a", "/a/photo.jpg.ref.json", true), true},
		{"PDFPageRef", ref(2, "/a", "/a/report-p1.jpg.ref.json", true), true},
		{"OCROff", ref(3, "/a", "/a/photo.jpg.ref.json", false), false},
		{"AlreadyOCR", ref(4, "/a", "/a/photo.jpg.ref.json", true, TagOCR), false},
		{"NotARef", File{ID: 5, FileName: "photo.jpg", LogicalPath: "/a/photo.jpg", ProcessingConfig: ProcessingConfig{OCR: true}}, false},
		{"UntaggedRef", func() File { f := ref(6, "/a", "/a/x.jpg.ref.json", true); f.Tags = nil; return f }(), false},
		{"Text", pageText(7, "/a", "/a/report-p1.txt"), false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got := ocr{}.Discover([]File{tt.file})
			require.Equal(t, tt.want, len(got) == 1)
		})
	}
}

func TestOCRSkipped(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name  string
		files []File
		want  map[int]string
	}{
		{"PageWithText", []File{ref(1, "/a", "/a/r-p1.jpg.ref.json", true), pageText(2, "/a", "/a/r-p1.txt")}, map[int]string{0: SkipTextLayer}},
		{"TextFirst", []File{pageText(2, "/a", "/a/r-p1.txt"), ref(1, "/a", "/a/r-p1.jpg.ref.json", true)}, map[int]string{1: SkipTextLayer}},
		{"ScanWithoutText", []File{ref(1, "/a", "/a/r-p1.jpg.ref.json", true), pageText(2, "/a", "/a/r-p2.txt")}, map[int]string{}},
		{"TextInOtherDirectory", []File{ref(1, "/a", "/a/r-p1.jpg.ref.json", true), pageText(2, "/b", "/b/r-p1.txt")}, map[int]string{}},
		{"UntaggedText", []File{ref(1, "/a", "/a/r-p1.jpg.ref.json", true), func() File { f := pageText(2, "/a", "/a/r-p1.txt"); f.Tags = nil; return f }()}, map[int]string{}},
		{"NotAPage", []File{ref(1, "/a", "/a/r.jpg.ref.json", true), pageText(2, "/a", "/a/r.txt")}, map[int]string{}},
		{"NotDiscovered", []File{ref(1, "/a", "/a/r-p1.jpg.ref.json", false), pageText(2, "/a", "/a/r-p1.txt")}, map[int]string{}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			require.Equal(t, tt.want, OCRSkipped(tt.files))
		})
	}
}

func TestOCRChunks(t *testing.T) {
	t.Parallel()
	files := []File{
		ref(1, "/a", "/a/1.jpg.ref.json", true),
		ref(2, "/b", "/b/1.jpg.ref.json", true),
		pageText(3, "/a", "/a/r-p1.txt"),
		ref(4, "/a", "/a/r-p1.jpg.ref.json", true),
		ref(5, "/c", "/c/1.jpg.ref.json", false),
		ref(6, "/d", "/d/1.jpg.ref.json", true),
		ref(7, "/e", "/e/1.jpg.ref.json", true),
	}
	items := func(idx ...int) []ChunkItem {
		var out []ChunkItem
		for _, i := range idx {
			it := ChunkItem{Index: i, Ref: files[i]}
			if i == 3 {
				it.SkipReason = SkipTextLayer
			}
			out = append(out, it)
		}
		return out
	}
	tests := []struct {
		name string
		size int
		want []Chunk
	}{
		{"TwoGroupsEach", 2, []Chunk{
			{ID: "0", Groups: []string{"/a", "/b"}, Items: items(0, 3, 1)},
			{ID: "1", Groups: []string{"/d", "/e"}, Items: items(5, 6)},
		}},
		{"AllInOne", DefaultOCRChunkSize.Groups, []Chunk{{ID: "0", Groups: []string{"/a", "/b", "/d", "/e"}, Items: items(0, 3, 1, 5, 6)}}},
		{"OneGroupEach", 1, []Chunk{
			{ID: "0", Groups: []string{"/a"}, Items: items(0, 3)},
			{ID: "1", Groups: []string{"/b"}, Items: items(1)},
			{ID: "2", Groups: []string{"/d"}, Items: items(5)},
			{ID: "3", Groups: []string{"/e"}, Items: items(6)},
		}},
		{"ZeroMeansOne", 0, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got := OCRChunks(files, ChunkSize{Groups: tt.size, Refs: 1000})
			if tt.want == nil {
				require.Equal(t, OCRChunks(files, ChunkSize{Groups: 1, Refs: 1000}), got)
				return
			}
			require.Equal(t, tt.want, got)
		})
	}
	require.Empty(t, OCRChunks(files[2:3], DefaultOCRChunkSize))

	// Kept refs (a DONE batch's retry) are no items: the skipped page is
	// not made again, a kept group makes no chunk.
	rerun := append([]File(nil), files...)
	for _, i := range []int{0, 3, 5} {
		rerun[i].Kept = true
	}
	require.Equal(t, []Chunk{{ID: "0", Groups: []string{"/b", "/e"}, Items: []ChunkItem{{Index: 1, Ref: rerun[1]}, {Index: 6, Ref: rerun[6]}}}},
		OCRChunks(rerun, ChunkSize{Groups: 2, Refs: 1000}))
}

// TestOCRChunksSplitsLargeDirectories: a chunk holds at most size.Refs
// refs, a directory of more is split across chunks, and the next
// directory fills the rest of the last one's chunk.
func TestOCRChunksSplitsLargeDirectories(t *testing.T) {
	t.Parallel()
	var files []File
	for i := range 7 {
		files = append(files, ref(int64(i+1), "/big", fmt.Sprintf("/big/%d.jpg.ref.json", i), true))
	}
	files = append(files, ref(8, "/small", "/small/1.jpg.ref.json", true), ref(9, "/small", "/small/2.jpg.ref.json", true))
	items := func(from, to int) []ChunkItem {
		var out []ChunkItem
		for i := from; i < to; i++ {
			out = append(out, ChunkItem{Index: i, Ref: files[i]})
		}
		return out
	}
	require.Equal(t, []Chunk{
		{ID: "0", Groups: []string{"/big"}, Items: items(0, 3)},
		{ID: "1", Groups: []string{"/big"}, Items: items(3, 6)},
		{ID: "2", Groups: []string{"/big", "/small"}, Items: items(6, 9)},
	}, OCRChunks(files, ChunkSize{Groups: 10, Refs: 3}))
	require.Equal(t, []Chunk{
		{ID: "0", Groups: []string{"/big"}, Items: items(0, 3)},
		{ID: "1", Groups: []string{"/big"}, Items: items(3, 6)},
		{ID: "2", Groups: []string{"/big"}, Items: items(6, 7)},
		{ID: "3", Groups: []string{"/small"}, Items: items(7, 9)},
	}, OCRChunks(files, ChunkSize{Groups: 1, Refs: 3}), "one group a chunk: the rest of /big's chunk stays empty")
	require.Len(t, OCRChunks(files, ChunkSize{}), 9, "zero bounds mean one ref a chunk")
}

func TestOCRTransform(t *testing.T) {
	t.Parallel()
	in := ref(1, "/a", "/a/photo.jpg.ref.json", true)
	result := func(r OCRResult) json.RawMessage { b, _ := json.Marshal(r); return b }
	published := in
	published.R2Key, published.FileSize = "staging/b1/a/photo.jpg.g2.ref.json", 900
	published.Tags = []string{TagImageProcessor, TagOCR}
	noText := published
	noText.Tags = []string{TagImageProcessor, TagOCR, TagOCRNoText}
	tests := []struct {
		name    string
		task    *Task
		want    []File
		wantErr string
	}{
		{"Done", &Task{FileID: 1, Status: TaskCompleted, Result: result(OCRResult{TextLength: 12, RefR2Key: published.R2Key, RefSize: 900})}, []File{published}, ""},
		{"DoneWithoutText", &Task{FileID: 1, Status: TaskCompleted, Result: result(OCRResult{TextLength: 0, RefR2Key: published.R2Key, RefSize: 900})},
			[]File{noText}, ""},
		{"NoTask", nil, []File{in}, ""},
		{"Failed", &Task{FileID: 1, Status: TaskFailed}, []File{in}, ""},
		{"DoneWithError", &Task{FileID: 1, Status: TaskCompleted, Result: result(OCRResult{Error: "corrupt image"})}, []File{in}, ""},
		{"DoneWithoutKey", &Task{FileID: 1, Status: TaskCompleted, Result: result(OCRResult{TextLength: 3, RefSize: 10})}, nil, "lacks ref_r2_key"},
		{"Garbage", &Task{FileID: 1, Status: TaskCompleted, Result: json.RawMessage(`[`)}, nil, "decoding result"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got, err := ocr{}.Transform(in, tt.task)
			if tt.wantErr != "" {
				require.ErrorContains(t, err, tt.wantErr)
				return
			}
			require.NoError(t, err)
			require.Equal(t, tt.want, got)
			require.Equal(t, []string{TagImageProcessor}, in.Tags, "the input is not mutated")
		})
	}
}

// TestOCRSampleResult: the sample is a published ref that Transform
// accepts and that changes the file list, as TestSampleResults asks of
// registered phases.
func TestOCRSampleResult(t *testing.T) {
	t.Parallel()
	in := ref(3, "/a", "/a/photo.jpg.ref.json", true)
	out, err := ocr{}.Transform(in, &Task{FileID: 3, Status: TaskCompleted, Result: ocr{}.SampleResult(in)})
	require.NoError(t, err)
	require.Len(t, out, 1)
	require.NotEqual(t, in, out[0])
	require.Contains(t, out[0].Tags, TagOCR)
	require.Equal(t, "staging/b1/a/photo.jpg.ocr.ref.json", out[0].R2Key)
}
