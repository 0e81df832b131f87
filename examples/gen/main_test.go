package main

import (
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/arke-institute/orchestrator/worker/vips"
)

func TestBatch(t *testing.T) {
	require.NoError(t, vips.Startup(vips.Config{}))
	files, err := Batch()
	require.NoError(t, err)

	dir := t.TempDir()
	byPath := map[string]string{}
	total := 0
	for _, f := range files {
		path := filepath.Join(dir, filepath.FromSlash(f.Path))
		require.NoError(t, os.MkdirAll(filepath.Dir(path), 0o755))
		require.NoError(t, os.WriteFile(path, f.Data, 0o644))
		byPath[f.Path] = path
		total += len(f.Data)
	}
	require.Less(t, total, 2<<20, "the committed batch stays small")

	// Each TIFF is the kind the issue asks for.
	for path, want := range map[string]struct {
		interp vips.Interpretation
		format vips.BandFormat
		pages  int
	}{
		"scans/lzw.tif":        {vips.InterpretationSRGB, vips.FormatUchar, 1},
		"scans/jpeg-ycbcr.tif": {vips.InterpretationSRGB, vips.FormatUchar, 1},
		"scans/cmyk.tif":       {vips.InterpretationCMYK, vips.FormatUchar, 1},
		"scans/16bit.tif":      {vips.InterpretationRGB16, vips.FormatUshort, 1},
		"scans/multipage.tif":  {vips.InterpretationSRGB, vips.FormatUchar, 3},
		"scans/typed-page.tif": {vips.InterpretationBW, vips.FormatUchar, 1},
	} {
		im, err := vips.Open(byPath[path], "")
		require.NoError(t, err, path)
		require.Equal(t, want.interp, im.Interpretation(), path)
		require.Equal(t, want.format, im.Format(), path)
		require.Equal(t, want.pages, im.Pages(), path)
		im.Close()
	}
	for path, loader := range map[string]string{"photos/photo.jpg": "jpegload", "photos/graphic.png": "pngload"} {
		require.Equal(t, loader, vips.Loader(byPath[path]), path)
	}

	// The PDFs: one page of text, and three pages of which the second is
	// a scan with no text layer.
	require.NoError(t, vips.AllowPDF())
	for path, pages := range map[string]int{"documents/letter.pdf": 1, "documents/minutes.pdf": 3} {
		im, err := vips.Open(byPath[path], "")
		require.NoError(t, err, path)
		require.Equal(t, pages, im.Pages(), path)
		im.Close()
	}
	for page, want := range map[string]bool{"1": true, "2": false, "3": true} {
		out, err := exec.Command("pdftotext", "-f", page, "-l", page, byPath["documents/minutes.pdf"], "-").Output()
		require.NoError(t, err)
		require.Equal(t, want, strings.TrimSpace(string(out)) != "", "text layer of minutes.pdf page %s", page)
	}

	// The committed batch is what the generator makes (by name).
	var committed []string
	require.NoError(t, filepath.WalkDir(filepath.Join("..", "sample-batch"), func(p string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			rel, _ := filepath.Rel(filepath.Join("..", "sample-batch"), p)
			committed = append(committed, filepath.ToSlash(rel))
		}
		return err
	}))
	var generated []string
	for _, f := range files {
		generated = append(generated, f.Path)
	}
	require.ElementsMatch(t, generated, committed, "run go run ./examples/gen")
}
