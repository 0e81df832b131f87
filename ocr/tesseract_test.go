package ocr_test

import (
	"os"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/arke-institute/orchestrator/ocr"
)

// newTesseract fails, not skips, without tesseract: CI installs it through
// scripts/setup.sh, and a skipped test would hide a broken make run.
func newTesseract(t *testing.T) *ocr.Tesseract {
	t.Helper()
	e, err := ocr.NewTesseract(ocr.TesseractConfig{})
	if err != nil {
		t.Fatalf("tesseract is missing; install it with scripts/setup.sh run (Debian: apt-get install tesseract-ocr): %v", err)
	}
	return e
}

func TestTesseractReadsPrintedText(t *testing.T) {
	t.Parallel()
	e := newTesseract(t)
	// testdata/page.png: two lines of 12 pt sans at 200 dpi, rendered with
	// `vips text`, black on white.
	res, err := e.Transcribe(t.Context(), page(t))
	require.NoError(t, err)
	text := strings.ToLower(res.Text)
	require.Contains(t, text, "archival batches of scanned pages")
	require.Contains(t, text, "the quick brown fox jumps over the lazy dog")
	require.Equal(t, "tesseract", res.Provider)
	require.True(t, strings.HasPrefix(res.Model, "tesseract "), res.Model)
}

func TestTesseractRefusesWhatItCannotRead(t *testing.T) {
	t.Parallel()
	e := newTesseract(t)
	png := page(t).Data
	for name, data := range map[string][]byte{
		"Empty": nil,
		// tesseract would read these lines as file names to OCR.
		"FileList":  []byte("/etc/hostname\ntestdata/page.png\n"),
		"Truncated": png[:len(png)/3],
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			_, err := e.Transcribe(t.Context(), ocr.Image{Data: data})
			require.Equal(t, ocr.Permanent, ocr.ClassOf(err), "%v", err)
		})
	}
}

func TestNewTesseractWithoutTheCommand(t *testing.T) {
	t.Parallel()
	_, err := ocr.NewTesseract(ocr.TesseractConfig{Command: "/nonexistent/tesseract"})
	require.ErrorContains(t, err, "tesseract-ocr")
	_, err = os.Stat("/nonexistent/tesseract")
	require.Error(t, err)
}
