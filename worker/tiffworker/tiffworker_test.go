package tiffworker_test

import (
	"bytes"
	"encoding/json"
	"image"
	"image/color"
	"image/jpeg"
	"log/slog"
	"os"
	"path"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/arke-institute/orchestrator/blob"
	"github.com/arke-institute/orchestrator/internal/harness/s3test"
	"github.com/arke-institute/orchestrator/internal/harness/workertest"
	"github.com/arke-institute/orchestrator/phases"
	"github.com/arke-institute/orchestrator/worker"
	"github.com/arke-institute/orchestrator/worker/samples"
	"github.com/arke-institute/orchestrator/worker/tiffworker"
	"github.com/arke-institute/orchestrator/worker/vips"
)

func TestMain(m *testing.M) { workertest.Main(m) }

// env is one test's bucket and a configuration pointing at it.
type env struct {
	store blob.Store
	cfg   worker.Config
}

func newEnv(t *testing.T) *env {
	t.Helper()
	srv := s3test.Start(t)
	store, err := blob.NewS3(srv.Config())
	require.NoError(t, err)
	return &env{store: store, cfg: worker.Config{Kind: worker.KindTIFF, Bucket: srv.NewBucket(t), JPEGQuality: 90}}
}

func (e *env) put(t *testing.T, key string, data []byte) {
	t.Helper()
	require.NoError(t, e.store.Put(t.Context(), e.cfg.Bucket, key, bytes.NewReader(data), int64(len(data)), "image/tiff"))
}

func (e *env) get(t *testing.T, key string) []byte {
	t.Helper()
	data, err := e.store.Get(t.Context(), e.cfg.Bucket, key)
	require.NoError(t, err)
	return data
}

func (e *env) convert(t *testing.T, key string) (*tiffworker.Result, error) {
	t.Helper()
	cfg := e.cfg
	cfg.Input.Key = key
	return tiffworker.Convert(t.Context(), cfg, e.store, slog.New(slog.DiscardHandler))
}

// requireValid checks the body as the orchestrator will: through the TIFF
// phase's transform.
func requireValid(t *testing.T, res *tiffworker.Result) {
	t.Helper()
	body, err := json.Marshal(res)
	require.NoError(t, err)
	require.NoError(t, phases.ValidateResult(phases.TIFFConversion, body))
}

const w, h = 128, 96

// tolerance is how far a decoded colour may be from the pattern's, per
// channel: JPEG at quality 90 on flat quadrants, plus the input's own
// loss (a JPEG-compressed TIFF, a CMYK round trip through ICC profiles).
func tolerance(v samples.Variant) int {
	switch v {
	case samples.CMYK, samples.CMYKICC:
		return 30
	case samples.JPEG, samples.YCbCr:
		return 10
	}
	return 6
}

func TestConvertEveryVariant(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	for _, v := range samples.Variants {
		t.Run(string(v), func(t *testing.T) {
			t.Parallel()
			data, err := samples.TIFF(v, w, h)
			require.NoError(t, err)
			key := "staging/01BATCH/scans/" + string(v) + ".tif"
			e.put(t, key, data)

			res, err := e.convert(t, key)
			require.NoError(t, err)
			requireValid(t, res)

			pages := v.Pages()
			var keys []string
			if pages == 1 {
				require.Empty(t, res.Outputs, "one page: no outputs array")
				keys = []string{"staging/01BATCH/scans/" + string(v) + ".jpg"}
			} else {
				require.Len(t, res.Outputs, pages)
				for i, o := range res.Outputs {
					k := "staging/01BATCH/scans/" + string(v) + "-p" + string(rune('1'+i)) + ".jpg"
					require.Equal(t, tiffworker.Output{R2Key: k, FileName: path.Base(k), FileSize: int64(len(e.get(t, k))), Page: i + 1}, o)
					keys = append(keys, k)
				}
			}
			require.Equal(t, keys[0], res.OutputR2Key)
			require.Equal(t, path.Base(keys[0]), res.OutputFileName)
			require.Equal(t, int64(len(e.get(t, keys[0]))), res.OutputFileSize)

			for i, k := range keys {
				img, err := jpeg.Decode(bytes.NewReader(e.get(t, k)))
				require.NoError(t, err, k)
				require.Equal(t, image.Rect(0, 0, w, h), img.Bounds(), k)
				checkPattern(t, v, i+1, img)
			}
		})
	}
}

// checkPattern compares the centre of each quadrant with the pattern.
func checkPattern(t *testing.T, v samples.Variant, page int, img image.Image) {
	t.Helper()
	for _, p := range [][2]int{{w / 4, h / 4}, {3 * w / 4, h / 4}, {w / 4, 3 * h / 4}, {3 * w / 4, 3 * h / 4}} {
		want := samples.Expected(page, p[0], p[1], w, h)
		switch v {
		case samples.Alpha:
			if p[0] >= w/2 && p[1] >= h/2 {
				want = samples.Colour{255, 255, 255} // transparent: flattened on white
			}
		case samples.Grey8, samples.Grey16:
			g := samples.Grey(want)
			want = samples.Colour{g, g, g}
		case samples.Bilevel:
			want = samples.Colour{255, 255, 255}
			if p[1] >= h/2 {
				want = samples.Colour{}
			}
		}
		got := color.RGBAModel.Convert(img.At(p[0], p[1])).(color.RGBA)
		for c, g := range []uint8{got.R, got.G, got.B} {
			require.InDelta(t, int(want[c]), int(g), float64(tolerance(v)),
				"page %d pixel %v: got %v, want %v", page, p, got, want)
		}
	}
	if v == samples.Grey8 || v == samples.Grey16 || v == samples.Bilevel {
		require.IsType(t, &image.Gray{}, img, "greyscale stays greyscale")
	}
}

func TestNeverOverwrites(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	data, err := samples.TIFF(samples.LZW, w, h)
	require.NoError(t, err)
	e.put(t, "staging/01BATCH/photo.tif", data)
	e.put(t, "staging/01BATCH/photo.jpg", []byte("an uploaded photo.jpg, not ours"))

	res, err := e.convert(t, "staging/01BATCH/photo.tif")
	require.NoError(t, err)
	require.Equal(t, "staging/01BATCH/photo-1.jpg", res.OutputR2Key)
	require.Equal(t, "photo-1.jpg", res.OutputFileName)
	require.Equal(t, "an uploaded photo.jpg, not ours", string(e.get(t, "staging/01BATCH/photo.jpg")))

	// A retried task converts again and finds its own first upload.
	again, err := e.convert(t, "staging/01BATCH/photo.tif")
	require.NoError(t, err)
	require.Equal(t, res.OutputR2Key, again.OutputR2Key)

	// photo.tiff next to photo.tif: both want photo.jpg and photo-1.jpg.
	other, err := samples.TIFF(samples.Deflate, w/2, h/2)
	require.NoError(t, err)
	e.put(t, "staging/01BATCH/photo.tiff", other)
	res, err = e.convert(t, "staging/01BATCH/photo.tiff")
	require.NoError(t, err)
	require.Equal(t, "staging/01BATCH/photo-2.jpg", res.OutputR2Key)
}

func TestMultipageNeverOverwrites(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	data, err := samples.TIFF(samples.Multipage, w, h)
	require.NoError(t, err)
	e.put(t, "staging/01BATCH/book.tif", data)
	e.put(t, "staging/01BATCH/book-p2.jpg", []byte("taken"))

	res, err := e.convert(t, "staging/01BATCH/book.tif")
	require.NoError(t, err)
	var keys []string
	for _, o := range res.Outputs {
		keys = append(keys, o.R2Key)
	}
	require.Equal(t, []string{"staging/01BATCH/book-p1.jpg", "staging/01BATCH/book-p2-1.jpg", "staging/01BATCH/book-p3.jpg"}, keys)
	img, err := jpeg.Decode(bytes.NewReader(e.get(t, "staging/01BATCH/book-p2-1.jpg")))
	require.NoError(t, err)
	checkPattern(t, samples.Multipage, 2, img)
}

func TestMislabelledJPEGConverted(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	im, err := vips.FromMemory(bytes.Repeat([]byte{10, 200, 30}, 40*30), 40, 30, 3, vips.FormatUchar, vips.InterpretationSRGB)
	require.NoError(t, err)
	defer im.Close()
	jpg, err := im.JPEG(95)
	require.NoError(t, err)
	e.put(t, "staging/01BATCH/really-a.jpg.tif", jpg)

	res, err := e.convert(t, "staging/01BATCH/really-a.jpg.tif")
	require.NoError(t, err)
	require.Equal(t, "staging/01BATCH/really-a.jpg.jpg", res.OutputR2Key)
}

// TestUnreadableInputs is not parallel: it checks libvips's messages, and
// libvips keeps one error buffer per process, which other tests' expected
// failures (the YCbCr fallback) would share.
func TestUnreadableInputs(t *testing.T) {
	e := newEnv(t)
	pdf := []byte("%PDF-1.4\n1 0 obj << /Type /Catalog /Pages 2 0 R >> endobj\n2 0 obj << /Type /Pages /Kids [3 0 R] /Count 1 >> endobj\n3 0 obj << /Type /Page /Parent 2 0 R /MediaBox [0 0 10 10] >> endobj\ntrailer << /Root 1 0 R >>\n%%EOF\n")
	lzw, err := samples.TIFF(samples.LZW, w, h)
	require.NoError(t, err)

	for _, tc := range []struct {
		name string
		data []byte
		want []string // substrings of the error
	}{
		{"Truncated", samples.TruncatedTIFF(w, h), []string{"decoding TIFF staging/01BATCH/Truncated.tif: ", "Read error", "(libtiff fallback: "}},
		{"DirectoryLost", lzw[:len(lzw)/2], []string{"decoding TIFF staging/01BATCH/DirectoryLost.tif: damaged TIFF (truncated?): IFD 0 at offset "}},
		{"Garbage", []byte("this is not an image, just some text in a file"), []string{`decoding TIFF staging/01BATCH/Garbage.tif: not a TIFF file, nor any image format libvips reads (it starts with "this is ")`}},
		{"Empty", nil, []string{"decoding TIFF staging/01BATCH/Empty.tif: the file is empty"}},
		{"PDF", pdf, []string{"decoding TIFF staging/01BATCH/PDF.tif: not a TIFF file: libvips reads it as pdf"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			key := "staging/01BATCH/" + tc.name + ".tif"
			e.put(t, key, tc.data)
			_, err := e.convert(t, key)
			require.Error(t, err)
			for _, want := range tc.want {
				require.Contains(t, err.Error(), want)
			}
			t.Log(err)
		})
	}

	t.Run("Missing", func(t *testing.T) {
		_, err := e.convert(t, "staging/01BATCH/never-uploaded.tif")
		require.EqualError(t, err, "input s3://"+e.cfg.Bucket+"/staging/01BATCH/never-uploaded.tif does not exist")
	})
}

func TestOrientationKept(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	im, err := samples.Image(w, h, 1)
	require.NoError(t, err)
	defer im.Close()
	rotated, err := im.WithInt("orientation", 6)
	require.NoError(t, err)
	defer rotated.Close()
	data, err := rotated.Save(".tif[compression=lzw]")
	require.NoError(t, err)
	e.put(t, "staging/01BATCH/sideways.tif", data)

	res, err := e.convert(t, "staging/01BATCH/sideways.tif")
	require.NoError(t, err)
	// The pixels are stored as scanned; the JPEG carries the orientation
	// tag, which the image phase's variants apply.
	path := filepath.Join(t.TempDir(), "out.jpg")
	require.NoError(t, os.WriteFile(path, e.get(t, res.OutputR2Key), 0o600))
	out, err := vips.Open(path, "")
	require.NoError(t, err)
	defer out.Close()
	require.Equal(t, 6, out.Orientation())
	require.Equal(t, [2]int{w, h}, [2]int{out.Width(), out.Height()})
}
