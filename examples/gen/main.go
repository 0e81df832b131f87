// Command gen writes examples/sample-batch: a small batch that exercises
// every worker path (TIFFs of several kinds, a JPEG, a PNG, two PDFs, JSON
// and CSV). The images are synthetic test patterns (package worker/samples),
// so the batch is free to use and its output can be checked by eye: each
// TIFF shows four coloured quadrants, and the pages of the multi-page TIFF
// show them rotated, one step per page.
//
// Usage (needs libvips, Debian: libvips-dev):
//
//	go run ./examples/gen                 # rewrites examples/sample-batch
//	go run ./examples/gen -out /tmp/batch # somewhere else
//
// The output is deterministic for a given libvips version.
package main

import (
	"bytes"
	"encoding/csv"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"path/filepath"

	"github.com/arke-institute/orchestrator/worker/samples"
	"github.com/arke-institute/orchestrator/worker/vips"
)

func main() {
	out := flag.String("out", filepath.Join("examples", "sample-batch"), "directory to write the batch into")
	flag.Parse()
	if err := vips.Startup(vips.Config{}); err != nil {
		fail(err)
	}
	files, err := Batch()
	if err != nil {
		fail(err)
	}
	for _, f := range files {
		path := filepath.Join(*out, filepath.FromSlash(f.Path))
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			fail(err)
		}
		if err := os.WriteFile(path, f.Data, 0o644); err != nil {
			fail(err)
		}
		fmt.Printf("%8d  %s\n", len(f.Data), path)
	}
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "gen:", err)
	os.Exit(1)
}

// File is one file of the batch, at a slash-separated path relative to the
// batch folder.
type File struct {
	Path        string
	Description string
	Data        []byte
}

// TIFF scans: 320x240 test patterns.
const scanW, scanH = 320, 240

// tiffs are the TIFFs of the batch, one per kind the issue lists.
var tiffs = []struct {
	path        string
	variant     samples.Variant
	description string
}{
	{"scans/lzw.tif", samples.LZW, "RGB TIFF, LZW compression"},
	{"scans/jpeg-ycbcr.tif", samples.JPEG, "RGB TIFF, JPEG compression (stored as YCbCr)"},
	{"scans/cmyk.tif", samples.CMYK, "CMYK TIFF without an embedded profile, LZW"},
	{"scans/16bit.tif", samples.RGB16, "16-bit RGB TIFF, Deflate"},
	{"scans/multipage.tif", samples.Multipage, "three-page TIFF, LZW (becomes multipage-p1.jpg ... -p3.jpg)"},
}

// Batch makes every file of the sample batch.
func Batch() ([]File, error) {
	var files []File
	for _, t := range tiffs {
		data, err := samples.TIFF(t.variant, scanW, scanH)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", t.path, err)
		}
		files = append(files, File{t.path, t.description, data})
	}

	photo, err := encode(2000, 1332, ".jpg[Q=85]", false)
	if err != nil {
		return nil, fmt.Errorf("photo: %w", err)
	}
	files = append(files, File{"photos/photo.jpg", "2000x1332 JPEG: thumbnail, medium and large variants are all smaller", photo})
	graphic, err := encode(480, 320, ".png", true)
	if err != nil {
		return nil, fmt.Errorf("graphic: %w", err)
	}
	files = append(files, File{"photos/graphic.png", "480x320 PNG with transparency: flattened onto white, never enlarged", graphic})
	letter, err := samples.PDF([]samples.PDFPage{{Lines: []string{
		"Sample batch: a letter",
		"",
		"This one-page PDF has a text layer. The PDF phase renders the page to",
		"letter-p1.jpg and writes its text to letter-p1.txt; the PDF stays as it is.",
	}}}, samples.PDFOptions{})
	if err != nil {
		return nil, fmt.Errorf("letter: %w", err)
	}
	files = append(files, File{"documents/letter.pdf", "one-page PDF with a text layer (becomes letter-p1.jpg and letter-p1.txt)", letter})
	minutes, err := minutesPDF()
	if err != nil {
		return nil, fmt.Errorf("minutes: %w", err)
	}
	files = append(files, File{"documents/minutes.pdf", "three-page PDF: text, a scanned page without text, text (becomes minutes-p1.jpg ... -p3.jpg, minutes-p1.txt and minutes-p3.txt)", minutes})

	typed, err := typedPage()
	if err != nil {
		return nil, fmt.Errorf("typed page: %w", err)
	}
	files = append(files, File{"scans/typed-page.tif", "a scanned page of printed text, grey, LZW (becomes typed-page.jpg and its .ref.json; with submit -ocr the ref carries the page's text)", typed})

	record, err := recordJSON(files)
	if err != nil {
		return nil, err
	}
	files = append(files, File{"metadata/record.json", "descriptive metadata (passes through unchanged)", record})
	inventory, err := inventoryCSV(files)
	if err != nil {
		return nil, err
	}
	files = append(files, File{"metadata/inventory.csv", "file inventory (passes through unchanged)", inventory})
	return files, nil
}

// encode saves the test pattern; withAlpha makes its bottom-right quadrant
// transparent.
func encode(w, h int, suffix string, withAlpha bool) ([]byte, error) {
	im, err := samples.Image(w, h, 1)
	if err != nil {
		return nil, err
	}
	defer im.Close()
	if withAlpha {
		pix := make([]byte, 0, w*h*4)
		for y := range h {
			for x := range w {
				c := samples.Expected(1, x, y, w, h)
				a := byte(255)
				if x >= w/2 && y >= h/2 {
					a = 0
				}
				pix = append(pix, c[0], c[1], c[2], a)
			}
		}
		rgba, err := vips.FromMemory(pix, w, h, 4, vips.FormatUchar, vips.InterpretationSRGB)
		if err != nil {
			return nil, err
		}
		defer rgba.Close()
		im = rgba
	}
	return im.Save(suffix)
}

// minutesPDF is a three-page US Letter PDF: a page of text, a scanned page
// (the test pattern as an image, with no text layer) and a second page of
// text, so that page order and the missing text file are visible.
func minutesPDF() ([]byte, error) {
	return samples.PDF([]samples.PDFPage{
		{Lines: []string{
			"Sample batch: minutes of a meeting",
			"",
			"Page 1 has a text layer: it becomes minutes-p1.jpg and minutes-p1.txt.",
			"Page 2 is a scan with no text layer: it becomes minutes-p2.jpg only.",
		}},
		{Scan: samples.Pattern(306, 396, 1)},
		{Lines: []string{
			"Page 3 has a text layer again: minutes-p3.jpg and minutes-p3.txt.",
			"Then the image phase replaces each page JPEG by its .ref.json.",
		}},
	}, samples.PDFOptions{})
}

func recordJSON(files []File) ([]byte, error) {
	var parts []string
	for _, f := range files {
		parts = append(parts, f.Path)
	}
	record := map[string]any{
		"title":       "Sample batch",
		"description": "Synthetic test patterns and documents that exercise every preprocessing path: TIFF conversion (LZW, JPEG-compressed, CMYK, 16-bit, multi-page), PDF splitting (page images and text layers) and image variants (JPEG, PNG).",
		"creator":     "arke-institute/orchestrator examples/gen",
		"rights":      "Public domain (CC0): generated, no third-party content",
		"parts":       parts,
	}
	data, err := json.MarshalIndent(record, "", "  ")
	if err != nil {
		return nil, err
	}
	return append(data, '\n'), nil
}

func inventoryCSV(files []File) ([]byte, error) {
	var b bytes.Buffer
	w := csv.NewWriter(&b)
	_ = w.Write([]string{"path", "bytes", "description"})
	for _, f := range files {
		_ = w.Write([]string{f.Path, fmt.Sprint(len(f.Data)), f.Description})
	}
	w.Flush()
	return b.Bytes(), w.Error()
}

// typedLines are the printed text of scans/typed-page.tif, which OCR reads
// back (the local engine, tesseract, on the large variant).
var typedLines = []string{
	"ARCHIVAL INGEST SAMPLE",
	"",
	"This page was printed and scanned.",
	"Submit the batch with -ocr and the OCR phase",
	"writes this text into the page's ref.",
}

// typedPage is a scanned page of printed text: a PDF page of typed lines
// rendered at 200 dpi by libvips' PDF loader (poppler) as a grey LZW TIFF,
// as a scanner makes one, with no text layer.
func typedPage() ([]byte, error) {
	pdf, err := samples.PDF([]samples.PDFPage{{Width: 612, Height: 180, Lines: typedLines}}, samples.PDFOptions{})
	if err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp("", "typed-page")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	src := filepath.Join(dir, "page.pdf")
	if err := os.WriteFile(src, pdf, 0o600); err != nil {
		return nil, err
	}
	if err := vips.AllowPDF(); err != nil {
		return nil, err
	}
	im, err := vips.Open(src, "dpi=200")
	if err != nil {
		return nil, err
	}
	defer im.Close()
	grey, err := im.Colourspace(vips.InterpretationBW)
	if err != nil {
		return nil, err
	}
	defer grey.Close()
	flat, err := grey.ForJPEG() // the alpha of the render flattened onto white: one grey band
	if err != nil {
		return nil, err
	}
	defer flat.Close()
	return flat.Save(".tif[compression=lzw]")
}
