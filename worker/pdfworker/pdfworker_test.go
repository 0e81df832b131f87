package pdfworker_test

import (
	"bytes"
	"context"
	"encoding/json"
	"image"
	"image/color"
	"image/jpeg"
	"io"
	"log/slog"
	"path"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/arke-institute/orchestrator/blob"
	"github.com/arke-institute/orchestrator/internal/harness/s3test"
	"github.com/arke-institute/orchestrator/internal/harness/workertest"
	"github.com/arke-institute/orchestrator/phases"
	"github.com/arke-institute/orchestrator/worker"
	"github.com/arke-institute/orchestrator/worker/pdfworker"
	"github.com/arke-institute/orchestrator/worker/samples"
)

func TestMain(m *testing.M) { workertest.Main(m, "pdfinfo", "pdftotext") }

// typedStore is the test's real S3 store, remembering the content type of
// each upload (blob.Store has no way to read it back).
type typedStore struct {
	blob.Store
	mu    sync.Mutex
	types map[string]string
}

func (s *typedStore) PutIfAbsent(ctx context.Context, bucket, key string, body io.ReadSeeker, size int64, contentType string) error {
	err := s.Store.PutIfAbsent(ctx, bucket, key, body, size, contentType)
	if err == nil {
		s.mu.Lock()
		s.types[key] = contentType
		s.mu.Unlock()
	}
	return err
}

func (s *typedStore) typeOf(key string) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.types[key]
}

// env is one test's bucket and a configuration pointing at it.
type env struct {
	store *typedStore
	cfg   worker.Config
}

func newEnv(t *testing.T) *env {
	t.Helper()
	srv := s3test.Start(t)
	store, err := blob.NewS3(srv.Config())
	require.NoError(t, err)
	return &env{
		store: &typedStore{Store: store, types: map[string]string{}},
		cfg:   worker.Config{Kind: worker.KindPDF, Bucket: srv.NewBucket(t), JPEGQuality: 90},
	}
}

func (e *env) put(t *testing.T, key string, data []byte) {
	t.Helper()
	require.NoError(t, e.store.Put(t.Context(), e.cfg.Bucket, key, bytes.NewReader(data), int64(len(data)), "application/pdf"))
}

func (e *env) get(t *testing.T, key string) []byte {
	t.Helper()
	data, err := e.store.Get(t.Context(), e.cfg.Bucket, key)
	require.NoError(t, err)
	return data
}

func (e *env) split(t *testing.T, key string, s pdfworker.Settings) (*pdfworker.Result, error) {
	t.Helper()
	cfg := e.cfg
	cfg.Input.Key = key
	return pdfworker.Split(t.Context(), cfg, s, e.store, slog.New(slog.DiscardHandler))
}

// jpgKey is where the page's JPEG of the PDF at key is, as the phase reads
// the result.
func jpgKey(key string, p phases.PDFPage) string {
	dir, name := path.Split(key)
	return dir + p.JPEGName(name)
}

// textKey is where the page's text file is, "" for a page without text.
func textKey(key string, p phases.PDFPage) string {
	dir, name := path.Split(key)
	if t := p.TextName(name); t != "" {
		return dir + t
	}
	return ""
}

// requireValid checks the body as the orchestrator will, through the PDF
// phase's transform, and decodes it as the phase's result.
func requireValid(t *testing.T, res *pdfworker.Result) {
	t.Helper()
	body, err := json.Marshal(res)
	require.NoError(t, err)
	require.NoError(t, phases.ValidateResult(phases.PDFPages, body))
	var decoded phases.PDFResult
	require.NoError(t, json.Unmarshal(body, &decoded))
	require.Equal(t, res.PageCount, decoded.PageCount)
	require.Equal(t, res.Pages, decoded.Pages)
	require.Contains(t, decoded.Performance, "total_time_ms")
}

// Pages are 3 x 2 inches: 600 x 400 pixels at the default 200 dpi.
const pageW, pageH = 216, 144

func textPage(lines ...string) samples.PDFPage {
	return samples.PDFPage{Width: pageW, Height: pageH, Lines: lines}
}

func scanPage() samples.PDFPage {
	return samples.PDFPage{Width: pageW, Height: pageH, Scan: samples.Pattern(120, 80, 1)}
}

func mustPDF(t *testing.T, pages []samples.PDFPage, opts samples.PDFOptions) []byte {
	t.Helper()
	data, err := samples.PDF(pages, opts)
	require.NoError(t, err)
	return data
}

func decode(t *testing.T, data []byte) image.Image {
	t.Helper()
	img, err := jpeg.Decode(bytes.NewReader(data))
	require.NoError(t, err)
	return img
}

func rgb(img image.Image, x, y int) [3]int {
	c := color.RGBAModel.Convert(img.At(x, y)).(color.RGBA)
	return [3]int{int(c.R), int(c.G), int(c.B)}
}

func requireColour(t *testing.T, want [3]int, got [3]int, tolerance int, msg string) {
	t.Helper()
	for i := range want {
		require.InDelta(t, want[i], got[i], float64(tolerance), "%s: got %v, want %v", msg, got, want)
	}
}

// hasInk reports whether any pixel of img is dark: rendered text.
func hasInk(img image.Image) bool {
	b := img.Bounds()
	for y := b.Min.Y; y < b.Max.Y; y++ {
		for x := b.Min.X; x < b.Max.X; x++ {
			if c := rgb(img, x, y); c[0]+c[1]+c[2] < 3*100 {
				return true
			}
		}
	}
	return false
}

func TestSplitTextAndScannedPages(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	key := "staging/01BATCH/docs/minutes.pdf"
	e.put(t, key, mustPDF(t, []samples.PDFPage{
		textPage("Minutes of the meeting (draft)", "Present: the café committee"),
		scanPage(),
		textPage("Page three \\ last"),
	}, samples.PDFOptions{}))

	res, err := e.split(t, key, pdfworker.Settings{})
	require.NoError(t, err)
	requireValid(t, res)

	dir := "staging/01BATCH/docs/"
	require.Equal(t, 3, res.PageCount)
	require.Len(t, res.Pages, 3)
	for i, p := range res.Pages {
		n := string(rune('1' + i))
		require.Equal(t, i+1, p.Page)
		require.Equal(t, dir+"minutes-p"+n+".jpg", jpgKey(key, p))
		require.Empty(t, p.FileName, "the usual name goes without saying")
		require.Equal(t, int64(len(e.get(t, jpgKey(key, p)))), p.FileSize)
		require.Equal(t, "image/jpeg", e.store.typeOf(jpgKey(key, p)))
		img := decode(t, e.get(t, jpgKey(key, p)))
		require.Equal(t, image.Rect(0, 0, 600, 400), img.Bounds(), "3 x 2 in at 200 dpi")
	}

	// Text pages: black text on white, and their text layer.
	wantText := map[int]string{
		1: "Minutes of the meeting (draft)\nPresent: the café committee\n",
		3: "Page three \\ last\n",
	}
	for _, i := range []int{0, 2} {
		p := res.Pages[i]
		img := decode(t, e.get(t, jpgKey(key, p)))
		requireColour(t, [3]int{255, 255, 255}, rgb(img, 590, 390), 2, "margin of a text page is white")
		require.True(t, hasInk(img), "page %d shows its text", p.Page)

		require.Equal(t, dir+"minutes-p"+string(rune('1'+i))+".txt", textKey(key, p))
		require.Empty(t, p.TextFileName)
		text := e.get(t, textKey(key, p))
		require.Equal(t, wantText[p.Page], string(text))
		require.Equal(t, int64(len(text)), p.TextFileSize)
		require.Equal(t, "text/plain; charset=utf-8", e.store.typeOf(textKey(key, p)))
	}

	// The scanned page: the pattern, no text file.
	scan := res.Pages[1]
	require.Empty(t, textKey(key, scan))
	require.Zero(t, scan.TextFileSize)
	ok, err := e.store.Exists(t.Context(), e.cfg.Bucket, dir+"minutes-p2.txt")
	require.NoError(t, err)
	require.False(t, ok, "no text file for a page without text")
	img := decode(t, e.get(t, jpgKey(key, scan)))
	for _, pt := range [][2]int{{150, 100}, {450, 100}, {150, 300}, {450, 300}} {
		c := samples.Expected(1, pt[0], pt[1], 600, 400)
		requireColour(t, [3]int{int(c[0]), int(c[1]), int(c[2])}, rgb(img, pt[0], pt[1]), 12, "scanned page quadrant")
	}
}

func TestSplitOnePage(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	for _, tc := range []struct {
		name, key, want string
	}{
		{"Lower", "staging/01BATCH/x.pdf", "staging/01BATCH/x-p1"},
		{"UpperDotted", "staging/01BATCH/a.b.PDF", "staging/01BATCH/a.b-p1"},
		{"NoExtension", "staging/01BATCH/scan", "staging/01BATCH/scan-p1"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			e.put(t, tc.key, mustPDF(t, []samples.PDFPage{textPage("only page")}, samples.PDFOptions{}))
			res, err := e.split(t, tc.key, pdfworker.Settings{DPI: 72})
			require.NoError(t, err)
			requireValid(t, res)
			require.Equal(t, []phases.PDFPage{{
				Page: 1, FileSize: int64(len(e.get(t, tc.want+".jpg"))), TextFileSize: int64(len("only page\n")),
			}}, res.Pages)
			require.Equal(t, tc.want+".jpg", jpgKey(tc.key, res.Pages[0]))
			require.Equal(t, tc.want+".txt", textKey(tc.key, res.Pages[0]))
			require.Equal(t, image.Rect(0, 0, pageW, pageH), decode(t, e.get(t, tc.want+".jpg")).Bounds(), "72 dpi: a pixel per point")
		})
	}
}

// TestSplitHugePageIsRenderedSmaller: a page of PDF's largest size
// (200 x 200 in) would be 40,000 pixels square at 200 dpi; it is rendered
// at the resolution that fits 100 megapixels instead.
func TestSplitHugePageIsRenderedSmaller(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	key := "staging/01BATCH/poster.pdf"
	e.put(t, key, mustPDF(t, []samples.PDFPage{{Width: 14400, Height: 14400, Lines: []string{"a poster"}}}, samples.PDFOptions{}))
	res, err := e.split(t, key, pdfworker.Settings{})
	require.NoError(t, err)
	requireValid(t, res)
	img, err := jpeg.DecodeConfig(bytes.NewReader(e.get(t, jpgKey(key, res.Pages[0]))))
	require.NoError(t, err)
	require.Equal(t, 10000, img.Width, "50 dpi: 100 megapixels")
	require.Equal(t, 10000, img.Height)
}

func TestSplitOwnerPasswordOnly(t *testing.T) {
	t.Parallel()
	// Encrypted for its permissions only: anyone may open it, as every
	// reader does without asking for a password.
	e := newEnv(t)
	e.put(t, "staging/01BATCH/locked.pdf", mustPDF(t, []samples.PDFPage{textPage("readable"), scanPage()}, samples.PDFOptions{OwnerPassword: "owner"}))
	res, err := e.split(t, "staging/01BATCH/locked.pdf", pdfworker.Settings{DPI: 72})
	require.NoError(t, err)
	requireValid(t, res)
	require.Equal(t, 2, res.PageCount)
	require.Equal(t, "readable\n", string(e.get(t, textKey("staging/01BATCH/locked.pdf", res.Pages[0]))))
	require.Empty(t, textKey("staging/01BATCH/locked.pdf", res.Pages[1]))
}

func TestSplitNeverOverwrites(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	key := "staging/01BATCH/book.pdf"
	e.put(t, key, mustPDF(t, []samples.PDFPage{textPage("one"), textPage("two")}, samples.PDFOptions{}))
	e.put(t, "staging/01BATCH/book-p2.jpg", []byte("an uploaded page image, not ours"))
	e.put(t, "staging/01BATCH/book-p1.txt", []byte("an uploaded transcript, not ours"))

	res, err := e.split(t, key, pdfworker.Settings{DPI: 36})
	require.NoError(t, err)
	requireValid(t, res)
	var keys []string
	for _, p := range res.Pages {
		keys = append(keys, jpgKey(key, p), textKey(key, p))
	}
	require.Equal(t, []string{
		"staging/01BATCH/book-p1.jpg", "staging/01BATCH/book-p1-1.txt",
		"staging/01BATCH/book-p2-1.jpg", "staging/01BATCH/book-p2.txt",
	}, keys)
	require.Equal(t, "an uploaded page image, not ours", string(e.get(t, "staging/01BATCH/book-p2.jpg")))
	require.Equal(t, "an uploaded transcript, not ours", string(e.get(t, "staging/01BATCH/book-p1.txt")))

	// A retried task splits again and finds its own first uploads.
	again, err := e.split(t, key, pdfworker.Settings{DPI: 36})
	require.NoError(t, err)
	require.Equal(t, res.Pages, again.Pages)
}

func TestSplitFailures(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	good := mustPDF(t, []samples.PDFPage{textPage("one"), scanPage(), textPage("three")}, samples.PDFOptions{})

	for _, tc := range []struct {
		name     string
		data     []byte
		settings pdfworker.Settings
		is       error
		want     string
	}{
		{
			name: "Encrypted",
			data: mustPDF(t, []samples.PDFPage{textPage("secret")}, samples.PDFOptions{UserPassword: "user", OwnerPassword: "owner"}),
			is:   pdfworker.ErrEncrypted,
			want: "PDF is encrypted (a password is needed to open it)",
		},
		{
			name: "Truncated",
			data: good[:len(good)/2],
			is:   pdfworker.ErrDamaged,
			want: "PDF is damaged: Couldn't find trailer dictionary; Couldn't read xref table",
		},
		{
			name: "NoPages",
			data: mustPDF(t, nil, samples.PDFOptions{}),
			is:   pdfworker.ErrNoPages,
			want: "PDF has no pages",
		},
		{
			name:     "OverPageCap",
			data:     good,
			settings: pdfworker.Settings{MaxPages: 2},
			is:       pdfworker.ErrTooManyPages,
			want:     "PDF has too many pages: 3, more than PDF_MAX_PAGES (2)",
		},
		{
			name: "Empty",
			data: nil,
			is:   pdfworker.ErrDamaged,
			want: "PDF is damaged: the file is empty",
		},
		{
			name: "NotPDF",
			data: []byte("this is not a PDF, just some text in a file"),
			is:   pdfworker.ErrNotPDF,
			want: `not a PDF file (it starts with "this is ")`,
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			key := "staging/01BATCH/" + tc.name + ".pdf"
			e.put(t, key, tc.data)
			res, err := e.split(t, key, tc.settings)
			require.ErrorIs(t, err, tc.is)
			require.EqualError(t, err, "splitting PDF "+key+": "+tc.want)
			require.Nil(t, res)
			for _, suffix := range []string{"-p1.jpg", "-p1.txt"} {
				ok, err := e.store.Exists(t.Context(), e.cfg.Bucket, "staging/01BATCH/"+tc.name+suffix)
				require.NoError(t, err)
				require.False(t, ok, "nothing uploaded for a failed PDF")
			}
		})
	}

	t.Run("AtPageCap", func(t *testing.T) {
		t.Parallel()
		e.put(t, "staging/01BATCH/at-cap.pdf", good)
		res, err := e.split(t, "staging/01BATCH/at-cap.pdf", pdfworker.Settings{DPI: 36, MaxPages: 3})
		require.NoError(t, err)
		require.Equal(t, 3, res.PageCount)
	})

	t.Run("Missing", func(t *testing.T) {
		t.Parallel()
		_, err := e.split(t, "staging/01BATCH/never-uploaded.pdf", pdfworker.Settings{})
		require.EqualError(t, err, "input s3://"+e.cfg.Bucket+"/staging/01BATCH/never-uploaded.pdf does not exist")
	})

	t.Run("BadSettings", func(t *testing.T) {
		t.Parallel()
		_, err := e.split(t, "staging/01BATCH/any.pdf", pdfworker.Settings{DPI: 5000})
		require.EqualError(t, err, "render DPI 5000 is not from 1 to 1200")
	})
}

func TestParseSettings(t *testing.T) {
	t.Parallel()
	get := func(vars map[string]string) func(string) string {
		return func(k string) string { return vars[k] }
	}

	s, err := pdfworker.ParseSettings(get(nil))
	require.NoError(t, err)
	require.Equal(t, pdfworker.Settings{DPI: 200, MaxPages: 2000}, s)

	s, err = pdfworker.ParseSettings(get(map[string]string{"PDF_RENDER_DPI": " 300 ", "PDF_MAX_PAGES": "1"}))
	require.NoError(t, err)
	require.Equal(t, pdfworker.Settings{DPI: 300, MaxPages: 1}, s)

	s, err = pdfworker.ParseSettings(get(map[string]string{"PDF_RENDER_DPI": "1200", "PDF_MAX_PAGES": "10000"}))
	require.NoError(t, err)
	require.Equal(t, pdfworker.Settings{DPI: 1200, MaxPages: 10000}, s)

	for _, tc := range []struct {
		vars map[string]string
		want string
	}{
		{map[string]string{"PDF_RENDER_DPI": "0"}, `PDF_RENDER_DPI: "0" is not a whole number from 1 to 1200`},
		{map[string]string{"PDF_RENDER_DPI": "1201"}, `PDF_RENDER_DPI: "1201" is not a whole number from 1 to 1200`},
		{map[string]string{"PDF_RENDER_DPI": "150.5"}, `PDF_RENDER_DPI: "150.5" is not a whole number from 1 to 1200`},
		{map[string]string{"PDF_MAX_PAGES": "0"}, `PDF_MAX_PAGES: "0" is not a whole number from 1 to 10000`},
		{map[string]string{"PDF_MAX_PAGES": "10001"}, `PDF_MAX_PAGES: "10001" is not a whole number from 1 to 10000`},
		{
			map[string]string{"PDF_RENDER_DPI": "x", "PDF_MAX_PAGES": "-3"},
			`PDF_RENDER_DPI: "x" is not a whole number from 1 to 1200; PDF_MAX_PAGES: "-3" is not a whole number from 1 to 10000`,
		},
	} {
		_, err := pdfworker.ParseSettings(get(tc.vars))
		var envErr *worker.EnvError
		require.ErrorAs(t, err, &envErr)
		require.EqualError(t, err, tc.want)
	}
}
