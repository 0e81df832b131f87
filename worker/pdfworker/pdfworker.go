// Package pdfworker is the PDF worker (`worker pdf`): it renders every page
// of the PDF at INPUT_R2_KEY to a JPEG, extracts each page's text layer, and
// reports the PDF_PAGES callback body (phases.PDFResult).
//
// libvips renders the pages (pdfload, on poppler) at PDF_RENDER_DPI, one at
// a time, transparency flattened onto white. libvips exposes no text layer,
// so poppler's pdfinfo checks the file first (page count, password) and
// pdftotext extracts the text, in reading order (not -layout: the text is
// for search and description, where padding spaces only get in the way).
// A page whose text is only whitespace, such as a scan without OCR, gets no
// text file.
//
// Output names, next to the source (report.pdf in staging/b/dir/):
//
//	staging/b/dir/report-p1.jpg, report-p1.txt, report-p2.jpg, ...
//
// every page numbered, a one-page PDF too. No object is ever overwritten:
// if a name is taken by a different object, the file gets the first free
// name with "-1", "-2", ... appended to its stem (report-p1-1.jpg); an
// object with identical bytes (a retried task's own earlier upload) is
// reused.
//
// A PDF that needs a password, cannot be parsed, has no pages or has more
// than PDF_MAX_PAGES fails its task ("PDF is encrypted", "PDF is damaged:
// ...", "PDF has no pages", "PDF has too many pages: ..."), and so passes
// through the phase unchanged.
package pdfworker

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/arke-institute/orchestrator/blob"
	"github.com/arke-institute/orchestrator/phases"
	"github.com/arke-institute/orchestrator/worker"
	"github.com/arke-institute/orchestrator/worker/vips"
)

// Defaults and limits of Settings: the PDF_PAGES phase's own settings, as
// the orchestrator checks and passes them.
var (
	dpiSetting      = pdfSetting("PDF_RENDER_DPI")
	maxPagesSetting = pdfSetting("PDF_MAX_PAGES")

	DefaultDPI      = dpiSetting.Default
	MaxDPI          = dpiSetting.Max
	DefaultMaxPages = maxPagesSetting.Default
)

// pdfSetting is the PDF_PAGES phase's setting called name.
func pdfSetting(name string) phases.Setting {
	p, _ := phases.Get(phases.PDFPages)
	st, ok := p.Spec().Setting(name)
	if !ok {
		panic("phases: PDF_PAGES has no setting " + name)
	}
	return st
}

// maxPagePixels bounds one rendered page (100 megapixels, about 300 MB of
// pixels): a larger page is rendered at a lower resolution, so that a
// small PDF with a huge page cannot exhaust the machine's memory.
const maxPagePixels = 100_000_000

// Settings are the PDF worker's own variables.
type Settings struct {
	// DPI is the resolution pages are rendered at (PDF_RENDER_DPI), 1 to
	// MaxDPI; 0 means DefaultDPI.
	DPI int
	// MaxPages is the longest PDF split (PDF_MAX_PAGES), at least 1; 0
	// means DefaultMaxPages.
	MaxPages int
}

// ParseSettings reads PDF_RENDER_DPI and PDF_MAX_PAGES through getenv
// (os.Getenv in cmd/worker), in the ranges the phase declares. Problems
// are returned as a *worker.EnvError.
func ParseSettings(getenv func(string) string) (Settings, error) {
	e := &worker.EnvError{}
	read := func(st phases.Setting) int {
		v := strings.TrimSpace(getenv(st.Name))
		if v == "" {
			return st.Default
		}
		n, err := strconv.Atoi(v)
		if err != nil || n < st.Min || n > st.Max {
			e.Invalid = append(e.Invalid, fmt.Sprintf("%s: %q is not a whole number from %d to %d", st.Name, v, st.Min, st.Max))
			return st.Default
		}
		return n
	}
	s := Settings{DPI: read(dpiSetting), MaxPages: read(maxPagesSetting)}
	if len(e.Invalid) > 0 {
		return s, e
	}
	return s, nil
}

// withDefaults fills zero fields and checks the others.
func (s Settings) withDefaults() (Settings, error) {
	if s.DPI == 0 {
		s.DPI = DefaultDPI
	}
	if s.MaxPages == 0 {
		s.MaxPages = DefaultMaxPages
	}
	if s.DPI < dpiSetting.Min || s.DPI > MaxDPI {
		return s, fmt.Errorf("render DPI %d is not from %d to %d", s.DPI, dpiSetting.Min, MaxDPI)
	}
	if s.MaxPages < maxPagesSetting.Min || s.MaxPages > maxPagesSetting.Max {
		return s, fmt.Errorf("page limit %d is not from %d to %d", s.MaxPages, maxPagesSetting.Min, maxPagesSetting.Max)
	}
	return s, nil
}

// Errors a PDF fails its task with, wrapped with detail; match them with
// errors.Is.
var (
	ErrEncrypted    = errors.New("PDF is encrypted (a password is needed to open it)")
	ErrDamaged      = errors.New("PDF is damaged")
	ErrNoPages      = errors.New("PDF has no pages")
	ErrTooManyPages = errors.New("PDF has too many pages")
	ErrNotPDF       = errors.New("not a PDF file")
)

// Result is the success callback body (without the envelope fields Run
// adds): phases.PDFResult with the common performance block.
type Result struct {
	PageCount   int                `json:"page_count"`
	Pages       []phases.PDFPage   `json:"pages"`
	Performance worker.Performance `json:"performance"`
}

// Content types of the outputs.
const (
	jpegType = "image/jpeg"
	textType = "text/plain; charset=utf-8"
)

// uploadConcurrency is how many pages upload while the next ones render. It
// also bounds how many rendered pages wait in memory.
const uploadConcurrency = 3

// Run is the worker program of this kind (worker.Program): it reads the
// PDF settings and splits the task's PDF.
func Run(ctx context.Context, t worker.Task) (any, error) {
	settings, err := ParseSettings(t.Getenv)
	if err != nil {
		return nil, err
	}
	return Split(ctx, t.Config, settings, t.Store, t.Log)
}

// Split downloads cfg.Input.Key from cfg.Bucket, renders and extracts each
// page and uploads the JPEGs and text files next to it. Errors say what
// went wrong with which file, e.g. "splitting PDF staging/b/x.pdf: PDF is
// encrypted (...)". It needs vips.Startup, and poppler's pdfinfo and
// pdftotext on the PATH.
func Split(ctx context.Context, cfg worker.Config, settings Settings, store blob.Store, log *slog.Logger) (*Result, error) {
	settings, err := settings.withDefaults()
	if err != nil {
		return nil, err
	}
	if err := vips.AllowPDF(); err != nil {
		return nil, err
	}
	timer := worker.StartTimer()
	key := cfg.Input.Key
	dir, file, size, err := worker.FetchInput(ctx, cfg, store, worker.KindPDF, timer, log)
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	fail := func(err error) (*Result, error) {
		return nil, fmt.Errorf("splitting PDF %s: %w", key, err)
	}

	t := time.Now()
	n, err := inspect(ctx, file, size)
	if err == nil && n > settings.MaxPages {
		err = fmt.Errorf("%w: %d, more than PDF_MAX_PAGES (%d)", ErrTooManyPages, n, settings.MaxPages)
	}
	if err != nil {
		return fail(err)
	}
	text, err := extractText(ctx, file, dir, n)
	timer.Conversion += time.Since(t)
	if err != nil {
		return fail(err)
	}
	defer text.Close()
	log.Info("inspected PDF", "pages", n, "dpi", settings.DPI, "text_per_page", text.perPage)
	if err := worker.Plan(ctx, store, pageObjects(cfg.Bucket, key, n)); err != nil {
		return nil, err
	}

	type rendered struct {
		jpg  []byte
		text string
	}
	pages := make([]phases.PDFPage, n)
	err = worker.Pages(ctx, n, uploadConcurrency, timer,
		func(ctx context.Context, page int) (rendered, error) {
			jpg, err := render(file, page, n, settings.DPI, cfg.JPEGQuality)
			var txt string
			if err == nil {
				txt, err = text.page(ctx, page)
			}
			if err != nil {
				return rendered{}, fmt.Errorf("splitting PDF %s: %w", key, err)
			}
			return rendered{jpg, txt}, nil
		},
		func(ctx context.Context, page int, r rendered) error {
			p, err := upload(ctx, store, cfg.Bucket, key, page, r.jpg, r.text)
			if err != nil {
				return err
			}
			pages[page-1] = p
			log.Debug("uploaded page", "page", page, "file_name", p.JPEGName(path.Base(key)), "bytes", len(r.jpg), "text_bytes", p.TextFileSize)
			return nil
		})
	if err != nil {
		return nil, err
	}

	res := &Result{PageCount: n, Pages: pages, Performance: timer.Performance()}
	log.Info("split", "pages", n, "conversion_ms", timer.Conversion.Milliseconds(), "upload_ms", timer.Upload.Milliseconds())
	return res, nil
}

// pageObjects are the usual keys of every page's JPEG and text file of the
// PDF at key, for one request for their URLs: pages without text leave
// their text file's URL unused.
func pageObjects(bucket, key string, n int) []blob.Object {
	dir, pdfName := path.Split(key)
	objs := make([]blob.Object, 0, 2*n)
	for page := 1; page <= n; page++ {
		for _, ext := range []string{".jpg", ".txt"} {
			objs = append(objs, blob.Object{Method: blob.MethodPutIfAbsent, Bucket: bucket, Key: dir + phases.PDFPageName(pdfName, page, ext)})
		}
	}
	return objs
}

// upload writes one page's JPEG and, when it has any, its text, next to
// the PDF at key; a name it had to change is recorded in the page.
func upload(ctx context.Context, store blob.Store, bucket, key string, page int, jpg []byte, text string) (phases.PDFPage, error) {
	dir, pdfName := path.Split(key)
	put := func(ext string, data []byte, contentType string) (name string, err error) {
		usual := phases.PDFPageName(pdfName, page, ext)
		written, err := worker.PutUnique(ctx, store, bucket, dir+usual, data, contentType)
		if err != nil || path.Base(written) == usual {
			return "", err
		}
		return path.Base(written), nil
	}
	p := phases.PDFPage{Page: page, FileSize: int64(len(jpg))}
	var err error
	if p.FileName, err = put(".jpg", jpg, jpegType); err != nil {
		return phases.PDFPage{}, err
	}
	if text == "" {
		return p, nil
	}
	p.TextFileSize = int64(len(text))
	if p.TextFileName, err = put(".txt", []byte(text), textType); err != nil {
		return phases.PDFPage{}, err
	}
	return p, nil
}

// render draws page (1-based) of n at dpi and encodes it as JPEG.
func render(file string, page, n, dpi, quality int) ([]byte, error) {
	fail := func(err error) ([]byte, error) {
		return nil, fmt.Errorf("rendering page %d of %d: %w", page, n, err)
	}
	im, err := vips.Open(file, fmt.Sprintf("page=%d,dpi=%d,access=sequential", page-1, dpi))
	if err != nil {
		return fail(err)
	}
	defer im.Close()
	// Opening reads only the page's size: a page too large at dpi is opened
	// again at the resolution that fits maxPagePixels.
	if px := float64(im.Width()) * float64(im.Height()); px > maxPagePixels {
		lower := max(1, int(float64(dpi)*math.Sqrt(maxPagePixels/px)))
		im.Close()
		if im, err = vips.Open(file, fmt.Sprintf("page=%d,dpi=%d,access=sequential", page-1, lower)); err != nil {
			return fail(err)
		}
		defer im.Close()
	}
	if w, h := im.Width(), im.Height(); w > vips.JPEGMaxSide || h > vips.JPEGMaxSide {
		return fail(fmt.Errorf("the page is %dx%d pixels at %d dpi; JPEG allows at most %d per side", w, h, dpi, vips.JPEGMaxSide))
	}
	out, err := im.ForJPEG()
	if err != nil {
		return fail(err)
	}
	defer out.Close()
	jpg, err := out.JPEG(quality)
	if err != nil {
		return fail(err)
	}
	return jpg, nil
}

// pdfHeader starts every PDF, within its first kilobyte (poppler's own
// tolerance for leading junk).
var pdfHeader = []byte("%PDF-")

// inspect checks that poppler can open the file without a password and
// returns its page count.
func inspect(ctx context.Context, file string, size int64) (int, error) {
	if size == 0 {
		return 0, fmt.Errorf("%w: the file is empty", ErrDamaged)
	}
	head, err := readHead(file, 1024)
	if err != nil {
		return 0, err
	}
	if !bytes.Contains(head, pdfHeader) {
		return 0, fmt.Errorf("%w (it starts with %s)", ErrNotPDF, strconv.Quote(string(head[:min(len(head), 8)])))
	}

	var stdout, stderr bytes.Buffer
	cmd := exec.CommandContext(ctx, "pdfinfo", file)
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	runErr := cmd.Run()
	errText := stderr.String()
	var exit *exec.ExitError
	switch {
	case runErr != nil && !errors.As(runErr, &exit):
		return 0, fmt.Errorf("running pdfinfo: %w", runErr)
	case runErr != nil && ctx.Err() != nil:
		return 0, fmt.Errorf("pdfinfo: %w", ctx.Err())
	case strings.Contains(errText, "Incorrect password"):
		return 0, ErrEncrypted
	case strings.Contains(errText, "Invalid page count 0"), strings.Contains(errText, "last page (0)"):
		return 0, ErrNoPages
	case runErr != nil:
		msgs := popplerMessages(errText)
		if len(msgs) == 0 {
			msgs = []string{"pdfinfo " + runErr.Error()}
		}
		return 0, fmt.Errorf("%w: %s", ErrDamaged, strings.Join(msgs, "; "))
	}

	pages := -1
	sc := bufio.NewScanner(&stdout)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "Pages:"); ok {
			if pages, err = strconv.Atoi(strings.TrimSpace(v)); err != nil {
				pages = -1
			}
		}
	}
	switch {
	case pages == 0:
		return 0, ErrNoPages
	case pages < 0:
		return 0, fmt.Errorf("%w: pdfinfo reports no page count", ErrDamaged)
	}
	return pages, nil
}

// maxMessages bounds how many of poppler's messages describe damage: a
// badly broken file makes hundreds, the first few say what is wrong.
const maxMessages = 3

// popplerMessages are the distinct lines poppler wrote to stderr, without
// their "Syntax Error: " style prefixes.
func popplerMessages(stderr string) []string {
	var out []string
	for _, l := range strings.Split(stderr, "\n") {
		l = strings.TrimSpace(l)
		for _, p := range []string{"Syntax Error: ", "Syntax Warning: ", "Internal Error: ", "Command Line Error: ", "I/O Error: "} {
			l = strings.TrimPrefix(l, p)
		}
		if l != "" && !slices.Contains(out, l) && len(out) < maxMessages {
			out = append(out, l)
		}
	}
	return out
}

func readHead(file string, n int) ([]byte, error) {
	f, err := os.Open(file)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	buf := make([]byte, n)
	got, err := io.ReadFull(f, buf)
	if err != nil && !errors.Is(err, io.ErrUnexpectedEOF) && !errors.Is(err, io.EOF) {
		return nil, err
	}
	return buf[:got], nil
}

// pageText hands out the text of each page in turn. pdftotext runs once
// over the whole document and ends each page with a form feed; if the
// count of form feeds is not the page count (a form feed inside a page's
// text), pages are extracted one pdftotext run at a time instead.
type pageText struct {
	file    string
	perPage bool
	f       *os.File
	r       *bufio.Reader
}

// The most text taken from a PDF, and from one of its pages: a small PDF
// can make pdftotext write without end. Past either, the task fails.
const (
	maxTextBytes     = 64 << 20
	maxPageTextBytes = 4 << 20
)

// extractText runs pdftotext over the n pages of file, into dir.
func extractText(ctx context.Context, file, dir string, n int) (*pageText, error) {
	f, err := os.Create(filepath.Join(dir, "text.txt"))
	if err != nil {
		return nil, err
	}
	if err := pdftotext(ctx, file, 0, f, maxTextBytes); err != nil {
		f.Close()
		return nil, err
	}
	if _, err := f.Seek(0, io.SeekStart); err != nil {
		f.Close()
		return nil, err
	}
	feeds := 0
	r := bufio.NewReader(f)
	for {
		chunk, err := r.ReadSlice('\f')
		if len(chunk) > 0 && chunk[len(chunk)-1] == '\f' {
			feeds++
		}
		if errors.Is(err, bufio.ErrBufferFull) {
			continue
		}
		if err != nil {
			break
		}
	}
	if feeds != n {
		f.Close()
		return &pageText{file: file, perPage: true}, nil
	}
	if _, err := f.Seek(0, io.SeekStart); err != nil {
		f.Close()
		return nil, err
	}
	return &pageText{file: file, f: f, r: bufio.NewReader(f)}, nil
}

// page returns page's text, trailing whitespace trimmed and ending in one
// newline, or "" when the page has no text. Pages must be asked for in
// order, each once.
func (t *pageText) page(ctx context.Context, page int) (string, error) {
	var raw []byte
	if t.perPage {
		var out bytes.Buffer
		if err := pdftotext(ctx, t.file, page, &out, maxPageTextBytes); err != nil {
			return "", err
		}
		raw = out.Bytes()
	} else {
		var err error
		if raw, err = t.r.ReadBytes('\f'); err != nil {
			return "", fmt.Errorf("reading the text of page %d: %w", page, err)
		}
	}
	text := strings.TrimRight(strings.ToValidUTF8(string(raw), "\uFFFD"), " \t\r\n\f\v")
	if strings.TrimSpace(text) == "" {
		return "", nil
	}
	return text + "\n", nil
}

// Close releases the extracted text.
func (t *pageText) Close() {
	if t.f != nil {
		t.f.Close()
	}
}

// pdftotext extracts the text of page (1-based; 0 for every page) of file
// to out, at most limit bytes of it: past that, pdftotext is stopped and the
// error says so.
func pdftotext(ctx context.Context, file string, page int, out io.Writer, limit int64) error {
	args := []string{"-enc", "UTF-8", "-eol", "unix"}
	what := "extracting text"
	if page > 0 {
		args = append(args, "-f", strconv.Itoa(page), "-l", strconv.Itoa(page))
		what += " of page " + strconv.Itoa(page)
	}
	args = append(args, file, "-")
	var stderr bytes.Buffer
	capped := &cappedWriter{w: out, left: limit}
	cmd := exec.CommandContext(ctx, "pdftotext", args...)
	cmd.Stdout, cmd.Stderr = capped, &stderr
	err := cmd.Run()
	if capped.over {
		return fmt.Errorf("%s: the text is larger than %d bytes, more than a PDF's text may be", what, limit)
	}
	if err != nil {
		if msgs := popplerMessages(stderr.String()); len(msgs) > 0 {
			return fmt.Errorf("%s: pdftotext: %w (%s)", what, err, strings.Join(msgs, "; "))
		}
		return fmt.Errorf("%s: pdftotext: %w", what, err)
	}
	return nil
}

// cappedWriter writes to w until left bytes are spent, then refuses, and
// the pipe from pdftotext closes.
type cappedWriter struct {
	w    io.Writer
	left int64
	over bool
}

func (c *cappedWriter) Write(p []byte) (int, error) {
	if int64(len(p)) > c.left {
		c.over = true
		return 0, errors.New("text cap reached")
	}
	c.left -= int64(len(p))
	return c.w.Write(p)
}
