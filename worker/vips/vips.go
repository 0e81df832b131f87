// Package vips is the workers' binding to libvips: the few operations the
// TIFF and image workers need, called through a small C shim (shim.c).
//
// It does not use github.com/davidbyttow/govips: govips v2.17.0 sniffs image
// formats itself before calling libvips and rejects BigTIFF ("unsupported
// image format"), and its images cannot be materialised in memory once to
// derive several variants from one decode. Calling libvips directly keeps
// libvips's own format detection (every TIFF flavour libtiff reads) and lets
// each worker decode its input exactly once.
//
// Images are opened from files rather than from Go memory, because libvips
// decodes lazily and would keep pointers into a Go buffer after the call
// returns, which cgo forbids. A file also lets libtiff read a large TIFF
// strip by strip instead of holding it in memory twice.
//
// Debian/Ubuntu: apt-get install libvips-dev (build) or libvips42 (run).
package vips

// #cgo pkg-config: vips libtiff-4
// #include "shim.h"
import "C"

import (
	"errors"
	"fmt"
	"runtime"
	"strings"
	"sync"
	"unsafe"
)

// Config tunes libvips for a worker process.
type Config struct {
	// Concurrency is the number of threads libvips uses per pipeline. Zero
	// keeps libvips's default: VIPS_CONCURRENCY, else the number of CPUs.
	Concurrency int
	// Verbose lets libvips's info and warning messages through to stderr.
	// They are dropped by default: libtiff warns about every unknown tag of
	// a scanner's TIFF, which would drown the worker's JSON log.
	Verbose bool
}

var (
	startOnce sync.Once
	startErr  error
)

// Startup initialises libvips once per process. Later calls do nothing and
// return the first call's result, so tests and commands may all call it.
func Startup(cfg Config) error {
	startOnce.Do(func() {
		verbose := 0
		if cfg.Verbose {
			verbose = 1
		}
		if C.shim_init(C.int(cfg.Concurrency), C.int(verbose)) != 0 {
			startErr = fmt.Errorf("starting libvips: %w", lastError())
		}
	})
	return startErr
}

// Version is the libvips version the process runs, e.g. "8.14.1".
func Version() string {
	return C.GoString(C.vips_version_string())
}

// Error is a failed libvips operation. Msg is libvips's own explanation
// (e.g. "tiff2vips: out of order read at line 48"), its lines joined by
// "; ".
type Error struct {
	Op  string
	Msg string
}

func (e *Error) Error() string {
	if e.Msg == "" {
		return e.Op + " failed"
	}
	return e.Op + ": " + e.Msg
}

// lastError takes libvips's error buffer (and clears it). libvips keeps one
// buffer per process, so messages of two operations failing at the same
// moment on different goroutines may mix; workers run one file at a time.
func lastError() error {
	msg := C.GoString(C.vips_error_buffer())
	C.vips_error_clear()
	var lines []string
	for _, l := range strings.Split(msg, "\n") {
		l = strings.TrimSpace(l)
		if l != "" && (len(lines) == 0 || lines[len(lines)-1] != l) {
			lines = append(lines, l)
		}
	}
	return errors.New(strings.Join(lines, "; "))
}

func opError(op string) error {
	return &Error{Op: op, Msg: lastError().Error()}
}

// Interpretation is how libvips reads an image's bands (VipsInterpretation).
type Interpretation int

// The interpretations the workers tell apart.
const (
	InterpretationMultiband Interpretation = C.VIPS_INTERPRETATION_MULTIBAND
	InterpretationBW        Interpretation = C.VIPS_INTERPRETATION_B_W
	InterpretationCMYK      Interpretation = C.VIPS_INTERPRETATION_CMYK
	InterpretationLab       Interpretation = C.VIPS_INTERPRETATION_LAB
	InterpretationLabS      Interpretation = C.VIPS_INTERPRETATION_LABS
	InterpretationXYZ       Interpretation = C.VIPS_INTERPRETATION_XYZ
	InterpretationSRGB      Interpretation = C.VIPS_INTERPRETATION_sRGB
	InterpretationScRGB     Interpretation = C.VIPS_INTERPRETATION_scRGB
	InterpretationRGB16     Interpretation = C.VIPS_INTERPRETATION_RGB16
	InterpretationGrey16    Interpretation = C.VIPS_INTERPRETATION_GREY16
)

// String is libvips's nickname for the interpretation ("srgb", "cmyk", ...).
func (i Interpretation) String() string {
	return C.GoString(C.vips_enum_nick(C.vips_interpretation_get_type(), C.int(i)))
}

// BandFormat is the numeric type of one band of one pixel (VipsBandFormat).
type BandFormat int

// The band formats the workers meet.
const (
	FormatUchar  BandFormat = C.VIPS_FORMAT_UCHAR
	FormatUshort BandFormat = C.VIPS_FORMAT_USHORT
	FormatFloat  BandFormat = C.VIPS_FORMAT_FLOAT
)

// String is libvips's nickname for the format ("uchar", "ushort", ...).
func (f BandFormat) String() string {
	return C.GoString(C.vips_enum_nick(C.vips_band_format_get_type(), C.int(f)))
}

// Image is a libvips image: a lazy pipeline that computes pixels when saved.
// Close it when done; a forgotten image is released by the garbage
// collector eventually.
type Image struct {
	p       *C.VipsImage
	cleanup runtime.Cleanup
}

func newImage(p *C.VipsImage) *Image {
	im := &Image{p: p}
	im.cleanup = runtime.AddCleanup(im, unref, p)
	return im
}

func unref(p *C.VipsImage) {
	C.g_object_unref(C.gpointer(unsafe.Pointer(p)))
}

// Close releases the image. Images derived from it keep what they need.
func (im *Image) Close() {
	if im == nil || im.p == nil {
		return
	}
	im.cleanup.Stop()
	unref(im.p)
	im.p = nil
}

// Loader names the libvips loader that would read the file, judged by its
// content ("tiffload", "jpegload", "pngload", "webpload", ...), or "" if
// libvips recognises no format it is allowed to load.
func Loader(filename string) string {
	cname := C.CString(filename)
	defer C.free(unsafe.Pointer(cname))
	l := C.shim_loader(cname)
	C.vips_error_clear()
	if l == nil {
		return ""
	}
	return strings.TrimSuffix(C.GoString(l), "_source")
}

// AllowPDF lets libvips open PDFs (pdfload, which renders with poppler),
// which Startup blocks with every loader libvips marks as unsafe for
// untrusted input. The PDF worker accepts that risk for the one file its
// short-lived machine processes: poppler is also what extracts the text
// layer. It must follow Startup, and fails when libvips was built without
// poppler.
func AllowPDF() error {
	if C.shim_allow_pdf() != 0 {
		return errors.New("libvips has no PDF loader (pdfload): it was built without poppler")
	}
	return nil
}

// Open opens a file lazily: only the header is read until pixels are
// needed. options is a libvips option string for the loader, e.g.
// "page=2,access=sequential,fail-on=error" ("" for none).
func Open(filename, options string) (*Image, error) {
	name := filename
	if options != "" {
		name += "[" + options + "]"
	}
	cname := C.CString(name)
	defer C.free(unsafe.Pointer(cname))
	p := C.shim_open(cname)
	if p == nil {
		return nil, opError("opening image")
	}
	return newImage(p), nil
}

// ReadTIFFRGBA reads one page (0-based) of a TIFF with libtiff's generic
// RGBA reader, as 8-bit sRGB with alpha only when the file has one. It is
// the fallback for TIFF layouts libvips 8.14 does not read itself (YCbCr
// with chroma subsampling outside JPEG compression, old-style JPEG, 2- or
// 4-bit samples). It holds the whole page in memory, 4 bytes a pixel, and
// refuses pages over 256 megapixels.
func ReadTIFFRGBA(filename string, page int) (*Image, error) {
	cname := C.CString(filename)
	defer C.free(unsafe.Pointer(cname))
	emsg := (*C.char)(C.malloc(1024))
	defer C.free(unsafe.Pointer(emsg))
	var out *C.VipsImage
	if C.shim_tiff_rgba(cname, C.int(page), &out, emsg) != 0 {
		msg := C.GoString(emsg)
		if vipsMsg := lastError().Error(); vipsMsg != "" {
			if msg != "" {
				msg += "; "
			}
			msg += vipsMsg
		}
		if msg == "" {
			msg = "the pixels cannot be read"
		}
		return nil, &Error{Op: "reading TIFF with libtiff", Msg: msg}
	}
	return newImage(out), nil
}

// Thumbnail opens a file shrunk so that its longest side is at most size
// pixels, never enlarged. It uses shrink-on-load (libjpeg and libwebp decode
// at a fraction of the size), reads the file sequentially, turns the image
// upright by its EXIF orientation and imports CMYK to sRGB.
func Thumbnail(filename string, size int) (*Image, error) {
	cname := C.CString(filename)
	defer C.free(unsafe.Pointer(cname))
	var out *C.VipsImage
	if C.shim_thumbnail_file(cname, &out, C.int(size)) != 0 {
		return nil, opError("making thumbnail")
	}
	return newImage(out), nil
}

// Thumbnail shrinks the image so that its longest side is at most size
// pixels, never enlarging it.
func (im *Image) Thumbnail(size int) (*Image, error) {
	defer runtime.KeepAlive(im)
	var out *C.VipsImage
	if C.shim_thumbnail_image(im.p, &out, C.int(size)) != 0 {
		return nil, opError("resizing")
	}
	return newImage(out), nil
}

// Width is the image's width in pixels (of one page, for a page opened
// from a multi-page file).
func (im *Image) Width() int {
	defer runtime.KeepAlive(im)
	return int(C.vips_image_get_width(im.p))
}

// Height is the image's height in pixels.
func (im *Image) Height() int {
	defer runtime.KeepAlive(im)
	return int(C.vips_image_get_height(im.p))
}

// Bands is the number of bands (channels), alpha included.
func (im *Image) Bands() int {
	defer runtime.KeepAlive(im)
	return int(C.vips_image_get_bands(im.p))
}

// Format is the numeric type of the bands.
func (im *Image) Format() BandFormat {
	defer runtime.KeepAlive(im)
	return BandFormat(C.vips_image_get_format(im.p))
}

// Interpretation is libvips's sanity-checked guess of how to read the
// bands: the file's own claim unless it contradicts the band count or format.
func (im *Image) Interpretation() Interpretation {
	defer runtime.KeepAlive(im)
	return Interpretation(C.vips_image_guess_interpretation(im.p))
}

// Pages is the number of pages of the file the image was opened from (1 for
// single-page formats).
func (im *Image) Pages() int {
	defer runtime.KeepAlive(im)
	return int(C.vips_image_get_n_pages(im.p))
}

// Orientation is the EXIF/TIFF orientation tag, 1 (upright) when absent.
// Orientations 5 to 8 swap width and height when displayed.
func (im *Image) Orientation() int {
	defer runtime.KeepAlive(im)
	return int(C.vips_image_get_orientation(im.p))
}

// HasField reports whether the image carries the metadata field, e.g.
// "icc-profile-data".
func (im *Image) HasField(name string) bool {
	defer runtime.KeepAlive(im)
	cname := C.CString(name)
	defer C.free(unsafe.Pointer(cname))
	return C.vips_image_get_typeof(im.p, cname) != 0
}

// Point reads the bands of one pixel, computing the pipeline as needed
// (for tests; far too slow for whole images).
func (im *Image) Point(x, y int) ([]float64, error) {
	defer runtime.KeepAlive(im)
	var buf [16]C.double
	n := C.shim_getpoint(im.p, C.int(x), C.int(y), &buf[0], C.int(len(buf)))
	if n < 0 {
		return nil, opError("reading pixel")
	}
	out := make([]float64, n)
	for i := range out {
		out[i] = float64(buf[i])
	}
	return out, nil
}

// ICCProfileField is the metadata field holding an embedded ICC profile.
const ICCProfileField = "icc-profile-data"

// JPEGMaxSide is the largest width or height a JPEG can have.
const JPEGMaxSide = 65535

// ForJPEG returns the image as JPEG can store it: 8-bit sRGB, or 8-bit
// greyscale for grey input, without alpha (flattened onto white).
//
//   - CMYK is converted to sRGB through its embedded ICC profile, or
//     libvips's built-in CMYK profile when it has none;
//   - 16-bit and float images are converted by colour space (RGB16 to sRGB,
//     GREY16 to B_W, Lab/XYZ/scRGB to sRGB), which scales to 8 bits;
//   - YCbCr TIFFs arrive as sRGB already: libtiff converts them on read.
//
// An ICC profile that described the source's colour space (CMYK, Lab, ...)
// is removed after conversion, since it would no longer match the pixels;
// an RGB or grey profile is kept, so colour-managed viewers still show a
// wide-gamut scan correctly. Other metadata (EXIF, XMP, resolution,
// orientation) is kept as it is.
func (im *Image) ForJPEG() (*Image, error) {
	cur := im
	replace := func(next *Image, err error) error {
		if err != nil {
			return err
		}
		if cur != im {
			cur.Close()
		}
		cur = next
		return nil
	}
	fail := func(err error) (*Image, error) {
		if cur != im {
			cur.Close()
		}
		return nil, err
	}

	interp := cur.Interpretation()
	target := InterpretationSRGB
	if interp == InterpretationBW || interp == InterpretationGrey16 ||
		(interp == InterpretationMultiband && cur.Bands() <= 2) {
		target = InterpretationBW
	}

	switch interp {
	case target:
	case InterpretationMultiband:
		// Bands of no declared meaning (e.g. a 16-bit TIFF with unusual
		// tags): read them as grey or RGB by count.
		as := target
		if cur.Format() == FormatUshort {
			as = InterpretationRGB16
			if target == InterpretationBW {
				as = InterpretationGrey16
			}
		}
		if err := replace(cur.withInterpretation(as)); err != nil {
			return fail(err)
		}
		if as != target {
			if err := replace(cur.Colourspace(target)); err != nil {
				return fail(err)
			}
		}
	default:
		if err := replace(cur.Colourspace(target)); err != nil {
			return fail(err)
		}
		if interp != InterpretationRGB16 && interp != InterpretationGrey16 && interp != InterpretationScRGB && cur.HasField(ICCProfileField) {
			if err := replace(cur.WithoutField(ICCProfileField)); err != nil {
				return fail(err)
			}
		}
	}

	switch cur.Format() {
	case FormatUchar:
	case FormatUshort:
		if err := replace(cur.rshift(8)); err != nil {
			return fail(err)
		}
		if err := replace(cur.Cast(FormatUchar)); err != nil {
			return fail(err)
		}
	default:
		if err := replace(cur.Cast(FormatUchar)); err != nil {
			return fail(err)
		}
	}

	colour := 3
	if target == InterpretationBW {
		colour = 1
	}
	if cur.Bands() > colour+1 {
		if err := replace(cur.extractBands(0, colour+1)); err != nil {
			return fail(err)
		}
	}
	if cur.Bands() == colour+1 {
		if err := replace(cur.flattenWhite()); err != nil {
			return fail(err)
		}
	}
	if cur == im {
		// Callers close what ForJPEG returns; hand back a new reference.
		return cur.copy()
	}
	return cur, nil
}

// CopyMemory computes the whole image into memory, so that several images
// can be derived from it without decoding the source again.
func (im *Image) CopyMemory() (*Image, error) {
	defer runtime.KeepAlive(im)
	p := C.vips_image_copy_memory(im.p)
	if p == nil {
		return nil, opError("computing image")
	}
	return newImage(p), nil
}

// JPEG encodes the image as a baseline JPEG at the given quality (1-100).
// Decoding errors of a lazily opened source surface here.
func (im *Image) JPEG(quality int) ([]byte, error) {
	defer runtime.KeepAlive(im)
	if w, h := im.Width(), im.Height(); w > JPEGMaxSide || h > JPEGMaxSide {
		return nil, &Error{Op: "converting to JPEG", Msg: fmt.Sprintf("image is %dx%d pixels; JPEG allows at most %d per side", w, h, JPEGMaxSide)}
	}
	var buf unsafe.Pointer
	var n C.size_t
	if C.shim_jpegsave(im.p, &buf, &n, C.int(quality)) != 0 {
		return nil, opError("converting to JPEG")
	}
	return takeBuffer(buf, n), nil
}

// Save encodes the image in the format named by a file suffix, with libvips
// save options in brackets, e.g. ".tif[compression=lzw,tile,bigtiff]".
func (im *Image) Save(suffix string) ([]byte, error) {
	defer runtime.KeepAlive(im)
	cs := C.CString(suffix)
	defer C.free(unsafe.Pointer(cs))
	var buf unsafe.Pointer
	var n C.size_t
	if C.shim_save_buffer(im.p, cs, &buf, &n) != 0 {
		return nil, opError("saving " + suffix)
	}
	return takeBuffer(buf, n), nil
}

func takeBuffer(buf unsafe.Pointer, n C.size_t) []byte {
	defer C.g_free(C.gpointer(buf))
	return C.GoBytes(buf, C.int(n))
}

// FromMemory makes an image from interleaved pixels: width*height*bands
// values of the given format, in the machine's byte order for ushort and
// float. The pixels are copied.
func FromMemory(pix []byte, width, height, bands int, format BandFormat, interp Interpretation) (*Image, error) {
	size := map[BandFormat]int{FormatUchar: 1, FormatUshort: 2, FormatFloat: 4}[format]
	if size == 0 || width <= 0 || height <= 0 || bands <= 0 || len(pix) != width*height*bands*size {
		return nil, fmt.Errorf("FromMemory: %d bytes do not make %dx%d pixels of %d %s bands", len(pix), width, height, bands, format)
	}
	p := C.shim_from_memory(unsafe.Pointer(&pix[0]), C.size_t(len(pix)), C.int(width), C.int(height), C.int(bands), C.VipsBandFormat(format))
	if p == nil {
		return nil, opError("making image from memory")
	}
	im := newImage(p)
	defer im.Close()
	return im.withInterpretation(interp)
}

// Colourspace converts the image to another colour space (with ICC
// profiles for CMYK).
func (im *Image) Colourspace(space Interpretation) (*Image, error) {
	defer runtime.KeepAlive(im)
	var out *C.VipsImage
	if C.shim_colourspace(im.p, &out, C.VipsInterpretation(space)) != 0 {
		return nil, opError("converting to " + space.String())
	}
	return newImage(out), nil
}

// Cast converts the bands to another numeric format, clipping values.
func (im *Image) Cast(format BandFormat) (*Image, error) {
	defer runtime.KeepAlive(im)
	var out *C.VipsImage
	if C.shim_cast(im.p, &out, C.VipsBandFormat(format)) != 0 {
		return nil, opError("casting to " + format.String())
	}
	return newImage(out), nil
}

// WithPageHeight returns the image marked as pages of height h stacked
// vertically, which TIFF saves as a multi-page file.
func (im *Image) WithPageHeight(h int) (*Image, error) {
	return im.WithInt("page-height", h)
}

// WithoutField returns the image without a metadata field.
func (im *Image) WithoutField(name string) (*Image, error) {
	defer runtime.KeepAlive(im)
	cname := C.CString(name)
	defer C.free(unsafe.Pointer(cname))
	var out *C.VipsImage
	if C.shim_copy_remove(im.p, &out, cname) != 0 {
		return nil, opError("removing " + name)
	}
	return newImage(out), nil
}

// WithInt returns the image with an integer metadata field set, e.g.
// "orientation", which JPEG saves as the EXIF orientation tag.
func (im *Image) WithInt(name string, v int) (*Image, error) {
	defer runtime.KeepAlive(im)
	cname := C.CString(name)
	defer C.free(unsafe.Pointer(cname))
	var out *C.VipsImage
	if C.shim_copy_set_int(im.p, &out, cname, C.int(v)) != 0 {
		return nil, opError("setting " + name)
	}
	return newImage(out), nil
}

func (im *Image) copy() (*Image, error) {
	defer runtime.KeepAlive(im)
	return im.withInterpretation(Interpretation(C.vips_image_get_interpretation(im.p)))
}

func (im *Image) withInterpretation(space Interpretation) (*Image, error) {
	defer runtime.KeepAlive(im)
	var out *C.VipsImage
	if C.shim_copy_interpretation(im.p, &out, C.VipsInterpretation(space)) != 0 {
		return nil, opError("copying image")
	}
	return newImage(out), nil
}

func (im *Image) rshift(bits int) (*Image, error) {
	defer runtime.KeepAlive(im)
	var out *C.VipsImage
	if C.shim_rshift(im.p, &out, C.int(bits)) != 0 {
		return nil, opError("scaling to 8 bits")
	}
	return newImage(out), nil
}

func (im *Image) extractBands(first, n int) (*Image, error) {
	defer runtime.KeepAlive(im)
	var out *C.VipsImage
	if C.shim_extract_bands(im.p, &out, C.int(first), C.int(n)) != 0 {
		return nil, opError("extracting bands")
	}
	return newImage(out), nil
}

func (im *Image) flattenWhite() (*Image, error) {
	defer runtime.KeepAlive(im)
	var out *C.VipsImage
	if C.shim_flatten_white(im.p, &out) != 0 {
		return nil, opError("flattening alpha")
	}
	return newImage(out), nil
}
