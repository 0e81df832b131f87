package ocr_test

import (
	"os"
	"path/filepath"
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

// TestTesseractGetsNoSecrets: tesseract runs with none of the
// orchestrator's environment (here a stand-in that prints its own): only
// its data, locale and thread settings.
func TestTesseractGetsNoSecrets(t *testing.T) {
	t.Setenv("DATABASE_URL", "postgres://user:secret-password@db/orchestrator")
	t.Setenv("ADMIN_TOKEN", "secret-admin-token")
	t.Setenv("LANG", "C.UTF-8")
	script := filepath.Join(t.TempDir(), "tesseract")
	require.NoError(t, os.WriteFile(script, []byte("#!/bin/sh\n[ \"$1\" = --version ] && { echo 'tesseract 5'; exit 0; }\n/usr/bin/env\n"), 0o755))
	e, err := ocr.NewTesseract(ocr.TesseractConfig{Command: script})
	require.NoError(t, err)
	res, err := e.Transcribe(t.Context(), page(t))
	require.NoError(t, err)
	require.NotContains(t, res.Text, "secret")
	require.NotContains(t, res.Text, "DATABASE_URL")
	require.Contains(t, res.Text, "OMP_THREAD_LIMIT=1")
	require.Contains(t, res.Text, "LANG=C.UTF-8")
}

func TestNewTesseractWithoutTheCommand(t *testing.T) {
	t.Parallel()
	_, err := ocr.NewTesseract(ocr.TesseractConfig{Command: "/nonexistent/tesseract"})
	require.ErrorContains(t, err, "tesseract-ocr")
	_, err = os.Stat("/nonexistent/tesseract")
	require.Error(t, err)
}
