package vips_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/arke-institute/orchestrator/internal/harness/workertest"
	"github.com/arke-institute/orchestrator/worker/samples"
	"github.com/arke-institute/orchestrator/worker/vips"
)

func TestMain(m *testing.M) { workertest.Main(m) }

const w, h = 64, 48

// tolerance is how far a converted colour may be from the pattern's, per
// channel. CMYK goes through two ICC transforms with perceptual intent.
func tolerance(v samples.Variant) int {
	switch v {
	case samples.CMYK, samples.CMYKICC:
		return 25
	case samples.JPEG, samples.YCbCr:
		return 6
	}
	return 1
}

func writeTemp(t *testing.T, name string, data []byte) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), name)
	require.NoError(t, os.WriteFile(path, data, 0o600))
	return path
}

// openPage opens a page as the TIFF worker does, falling back to libtiff's
// reader for layouts libvips does not read.
func openPage(t *testing.T, path string, page int) *vips.Image {
	t.Helper()
	im, err := vips.Open(path, "access=sequential,fail-on=error,page="+string(rune('0'+page)))
	if err != nil {
		require.Contains(t, err.Error(), "not supported")
		im, err = vips.ReadTIFFRGBA(path, page)
		require.NoError(t, err)
	}
	return im
}

func TestForJPEG(t *testing.T) {
	for _, v := range samples.Variants {
		t.Run(string(v), func(t *testing.T) {
			data, err := samples.TIFF(v, w, h)
			require.NoError(t, err)
			path := writeTemp(t, "in.tif", data)
			require.Equal(t, "tiffload", vips.Loader(path))

			for page := 1; page <= v.Pages(); page++ {
				im := openPage(t, path, page-1)
				converted, err := im.ForJPEG()
				im.Close()
				require.NoError(t, err)
				// Sequential images compute once, top to bottom; Point
				// reads anywhere.
				out, err := converted.CopyMemory()
				converted.Close()
				require.NoError(t, err)
				require.Equal(t, vips.FormatUchar, out.Format())
				require.Equal(t, w, out.Width())
				require.Equal(t, h, out.Height())

				grey := v == samples.Grey8 || v == samples.Grey16 || v == samples.Bilevel
				if grey {
					require.Equal(t, 1, out.Bands())
					require.Equal(t, vips.InterpretationBW, out.Interpretation())
				} else {
					require.Equal(t, 3, out.Bands())
					require.Equal(t, vips.InterpretationSRGB, out.Interpretation())
				}
				if v == samples.CMYKICC {
					require.False(t, out.HasField(vips.ICCProfileField), "the CMYK profile must not describe sRGB pixels")
				}

				for _, p := range [][2]int{{w / 4, h / 4}, {3 * w / 4, h / 4}, {w / 4, 3 * h / 4}, {3 * w / 4, 3 * h / 4}} {
					got, err := out.Point(p[0], p[1])
					require.NoError(t, err)
					want := samples.Expected(page, p[0], p[1], w, h)
					var wantVals []float64
					switch {
					case v == samples.Bilevel:
						wantVals = []float64{255}
						if p[1] >= h/2 {
							wantVals = []float64{0}
						}
					case grey:
						wantVals = []float64{float64(samples.Grey(want))}
					case v == samples.Alpha && p[0] >= w/2 && p[1] >= h/2:
						wantVals = []float64{255, 255, 255} // transparent, flattened on white
					default:
						wantVals = []float64{float64(want[0]), float64(want[1]), float64(want[2])}
					}
					require.InDeltaSlice(t, wantVals, got, float64(tolerance(v)), "page %d pixel %v", page, p)
				}
				out.Close()
			}
		})
	}
}

func TestYCbCrNeedsFallback(t *testing.T) {
	// Documents why the TIFF worker has a libtiff fallback: if a libvips
	// upgrade reads subsampled YCbCr itself, this test says so.
	data, err := samples.TIFF(samples.YCbCr, w, h)
	require.NoError(t, err)
	_, err = vips.Open(writeTemp(t, "in.tif", data), "")
	require.ErrorContains(t, err, "subsampled images not supported")
}

func TestLoader(t *testing.T) {
	data, err := samples.TIFF(samples.BigTIFF, w, h)
	require.NoError(t, err)
	require.Equal(t, "tiffload", vips.Loader(writeTemp(t, "a", data)))
	require.Equal(t, "", vips.Loader(writeTemp(t, "b", []byte("neither an image nor a document, just words"))))
	require.Equal(t, "", vips.Loader(writeTemp(t, "c", nil)))
}

func TestTruncatedTIFFFails(t *testing.T) {
	path := writeTemp(t, "in.tif", samples.TruncatedTIFF(256, 256))
	im, err := vips.Open(path, "access=sequential,fail-on=error")
	require.NoError(t, err, "the header is intact")
	defer im.Close()
	out, err := im.ForJPEG()
	require.NoError(t, err)
	defer out.Close()
	_, err = out.JPEG(90)
	require.Error(t, err)
	var verr *vips.Error
	require.ErrorAs(t, err, &verr)
	require.NotEmpty(t, verr.Msg)
	require.NotContains(t, verr.Msg, "\n")
}

func TestJPEGTooLarge(t *testing.T) {
	im, err := vips.FromMemory(make([]byte, vips.JPEGMaxSide+1), vips.JPEGMaxSide+1, 1, 1, vips.FormatUchar, vips.InterpretationBW)
	require.NoError(t, err)
	defer im.Close()
	_, err = im.JPEG(90)
	require.ErrorContains(t, err, "JPEG allows at most 65535 per side")
}

func TestThumbnailNeverEnlarges(t *testing.T) {
	im, err := vips.FromMemory(make([]byte, 300*100*3), 300, 100, 3, vips.FormatUchar, vips.InterpretationSRGB)
	require.NoError(t, err)
	defer im.Close()
	jpg, err := im.JPEG(80)
	require.NoError(t, err)
	path := writeTemp(t, "in.jpg", jpg)

	big, err := vips.Thumbnail(path, 1000)
	require.NoError(t, err)
	defer big.Close()
	require.Equal(t, [2]int{300, 100}, [2]int{big.Width(), big.Height()})

	small, err := big.Thumbnail(150)
	require.NoError(t, err)
	defer small.Close()
	require.Equal(t, [2]int{150, 50}, [2]int{small.Width(), small.Height()})
}

func TestErrorIsOneLine(t *testing.T) {
	_, err := vips.Open(filepath.Join(t.TempDir(), "missing.tif"), "")
	require.Error(t, err)
	require.False(t, strings.Contains(err.Error(), "\n"), err.Error())
}

// TestAllowPDF is not parallel: it changes which loaders the process may
// use, and checks that PDFs are refused before.
func TestAllowPDF(t *testing.T) {
	data, err := samples.PDF([]samples.PDFPage{{Width: 72, Height: 36, Lines: []string{"x"}}}, samples.PDFOptions{})
	require.NoError(t, err)
	path := writeTemp(t, "one.pdf", data)
	require.Equal(t, "pdfload", vips.Loader(path))

	_, err = vips.Open(path, "")
	require.Error(t, err, "Startup blocks untrusted loaders, poppler's among them")
	t.Log(err)

	require.NoError(t, vips.AllowPDF())
	require.NoError(t, vips.AllowPDF(), "allowing twice is harmless")
	im, err := vips.Open(path, "dpi=144")
	require.NoError(t, err)
	defer im.Close()
	require.Equal(t, [2]int{144, 72}, [2]int{im.Width(), im.Height()}, "72 x 36 pt at 144 dpi")
	require.Equal(t, 1, im.Pages())
	out, err := im.ForJPEG()
	require.NoError(t, err)
	defer out.Close()
	require.Equal(t, 3, out.Bands(), "alpha flattened")
	px, err := out.Point(140, 68)
	require.NoError(t, err)
	require.Equal(t, []float64{255, 255, 255}, px, "the page is white where nothing is drawn")
}
