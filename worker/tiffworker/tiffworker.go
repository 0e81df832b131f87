// Package tiffworker is the TIFF conversion worker (`worker tiff`): it
// converts the TIFF at INPUT_R2_KEY to JPEG, one JPEG per page, and reports
// the spec 000 §4.4 callback body.
//
// It reads what archives hold: LZW, Deflate, PackBits, uncompressed,
// JPEG-compressed and CCITT fax TIFFs, stripped or tiled, classic or
// BigTIFF, 1-, 8- or 16-bit, greyscale, RGB, YCbCr, CMYK or Lab, with or
// without alpha. Output is 8-bit sRGB (greyscale stays greyscale), alpha
// flattened onto white; ICC profiles of RGB and grey inputs, EXIF
// orientation and resolution are kept. libvips decodes, reading the file
// sequentially; the few layouts libvips 8.14 rejects (subsampled
// uncompressed YCbCr, old-style JPEG) go through libtiff's RGBA reader.
//
// Output names, next to the source (photo.tif in staging/b/dir/):
//
//	single page:  staging/b/dir/photo.jpg
//	n pages:      staging/b/dir/photo-p1.jpg ... photo-pN.jpg
//
// Thumbnails and pyramid levels stored as extra directories (flagged
// reduced-resolution) are not pages and are skipped. No object is ever
// overwritten: if a name is taken by a different object, the JPEG gets the
// first free name with "-1", "-2", ... appended to its stem (photo-1.jpg,
// photo-p2-1.jpg); an object with identical bytes (a retried task's own
// earlier upload) is reused.
package tiffworker

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path"
	"strconv"
	"strings"

	"github.com/arke-institute/orchestrator/blob"
	"github.com/arke-institute/orchestrator/phases"
	"github.com/arke-institute/orchestrator/worker"
	"github.com/arke-institute/orchestrator/worker/vips"
)

// Output is one JPEG of a multi-page TIFF.
type Output struct {
	R2Key    string `json:"r2_key"`
	FileName string `json:"file_name"`
	FileSize int64  `json:"file_size"`
	Page     int    `json:"page"` // 1-based, in reading order
}

// Result is the success callback body (without the envelope fields Run
// adds). output_* describe the JPEG of page 1; Outputs lists every page
// when there is more than one.
type Result struct {
	OutputR2Key    string             `json:"output_r2_key"`
	OutputFileName string             `json:"output_file_name"`
	OutputFileSize int64              `json:"output_file_size"`
	Outputs        []Output           `json:"outputs,omitempty"`
	Performance    worker.Performance `json:"performance"`
}

// uploadConcurrency is how many page uploads run while the next pages are
// converted. It also bounds how many encoded pages wait in memory.
const uploadConcurrency = 3

// Run is the worker program of this kind (worker.Program): it converts the task's TIFF.
func Run(ctx context.Context, t worker.Task) (any, error) {
	return Convert(ctx, t.Config, t.Store, t.Log)
}

// Convert downloads cfg.Input.Key from cfg.Bucket, converts it and uploads
// the JPEGs next to it. Errors say what went wrong with which file, e.g.
// "decoding TIFF staging/b/x.tif: tiff2vips: ...".
func Convert(ctx context.Context, cfg worker.Config, store blob.Store, log *slog.Logger) (*Result, error) {
	timer := worker.StartTimer()
	key := cfg.Input.Key
	dir, file, size, err := worker.FetchInput(ctx, cfg, store, worker.KindTIFF, timer, log)
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)

	src, err := inspect(file, size, log)
	if err != nil {
		return nil, fmt.Errorf("decoding TIFF %s: %w", key, err)
	}

	n := len(src.pages)
	if n > 1 {
		// The one-page name was planned at launch; ask for the pages'.
		objs := make([]blob.Object, n)
		for page := range n {
			objs[page] = blob.Object{Method: blob.MethodPutIfAbsent, Bucket: cfg.Bucket, Key: phases.TIFFPageKey(key, page+1, n)}
		}
		if err := worker.Plan(ctx, store, objs); err != nil {
			return nil, err
		}
	}
	outputs := make([]Output, n)
	err = worker.Pages(ctx, n, uploadConcurrency, timer,
		func(_ context.Context, page int) ([]byte, error) {
			jpg, err := src.convert(src.pages[page-1], cfg.JPEGQuality, log)
			if err != nil && n > 1 {
				err = fmt.Errorf("page %d of %d: %w", page, n, err)
			}
			if err != nil {
				return nil, fmt.Errorf("decoding TIFF %s: %w", key, err)
			}
			return jpg, nil
		},
		func(ctx context.Context, page int, jpg []byte) error {
			written, err := worker.PutUnique(ctx, store, cfg.Bucket, phases.TIFFPageKey(key, page, n), jpg, "image/jpeg")
			if err != nil {
				return err
			}
			outputs[page-1] = Output{R2Key: written, FileName: path.Base(written), FileSize: int64(len(jpg)), Page: page}
			log.Debug("uploaded page", "page", page, "r2_key", written, "bytes", len(jpg))
			return nil
		})
	if err != nil {
		return nil, err
	}

	res := &Result{
		OutputR2Key:    outputs[0].R2Key,
		OutputFileName: outputs[0].FileName,
		OutputFileSize: outputs[0].FileSize,
	}
	if len(outputs) > 1 {
		res.Outputs = outputs
	}
	res.Performance = timer.Performance()
	log.Info("converted", "pages", len(outputs), "output_r2_key", res.OutputR2Key,
		"conversion_ms", timer.Conversion.Milliseconds(), "upload_ms", timer.Upload.Milliseconds())
	return res, nil
}

// maxPages bounds the pages of one TIFF, as PDF_MAX_PAGES' bound does a
// PDF's: a result lists every page, and MAX_OUTPUTS_PER_TASK caps that.
const maxPages = 10000

// tooManyPages refuses a TIFF of n pages, more than maxPages.
func tooManyPages(n int) error {
	return fmt.Errorf("the TIFF has %d pages, more than the %d a worker converts", n, maxPages)
}

// source is an input file and the pages to convert.
type source struct {
	file   string
	loader string // libvips loader: "tiffload", or another for a mislabelled image
	pages  []int  // 0-based directory indices
}

// otherImageLoaders are formats converted even though the file was named
// as a TIFF: a JPEG or PNG saved as ".tif" by mistake is still worth a JPEG.
var otherImageLoaders = map[string]bool{"jpegload": true, "pngload": true, "webpload": true}

// inspect decides how to read the file and which pages to convert.
func inspect(file string, size int64, log *slog.Logger) (*source, error) {
	if size == 0 {
		return nil, errors.New("the file is empty")
	}
	f, err := os.Open(file)
	if err != nil {
		return nil, err
	}
	dirs, dirErr := readDirectories(f, size)
	f.Close()
	if errors.Is(dirErr, errHostile) {
		return nil, dirErr
	}
	if n := len(documentPages(dirs)); n > maxPages {
		return nil, tooManyPages(n)
	}

	loader := vips.Loader(file)
	switch {
	case loader == "tiffload":
	case dirErr == nil || !errors.Is(dirErr, errNotTIFF):
		// A TIFF header, but libvips does not take the file for a TIFF.
		if dirErr != nil {
			return nil, fmt.Errorf("damaged TIFF (truncated?): %w", dirErr)
		}
		return nil, errors.New("libvips does not recognise this TIFF")
	case otherImageLoaders[loader]:
		log.Warn("input is not a TIFF; converting it anyway", "loader", loader)
		return &source{file: file, loader: loader, pages: []int{0}}, nil
	case loader == "" || loader == "magickload":
		return nil, fmt.Errorf("not a TIFF file, nor any image format libvips reads (it starts with %s)", leadingBytes(file))
	default:
		return nil, fmt.Errorf("not a TIFF file: libvips reads it as %s", strings.TrimSuffix(loader, "load"))
	}

	// libvips's page count is the authority on what it can read; the
	// directory walk only tells pages from thumbnails when both agree.
	n := 0
	if im, err := vips.Open(file, ""); err == nil {
		n = im.Pages()
		im.Close()
	} else if dirErr != nil {
		return nil, err
	} else {
		// libvips cannot read even page 1's header (e.g. subsampled
		// YCbCr): the libtiff fallback will try each directory.
		n = len(dirs)
		if n == 0 {
			return nil, fmt.Errorf("the TIFF has no image directory (%w)", err)
		}
	}
	if n > maxPages {
		return nil, tooManyPages(n)
	}
	pages := make([]int, n)
	for i := range pages {
		pages[i] = i
	}
	if dirErr == nil && len(dirs) == n {
		pages = documentPages(dirs)
		if skipped := n - len(pages); skipped > 0 {
			log.Info("skipping reduced-resolution images", "directories", n, "skipped", skipped)
		}
	} else if dirErr != nil {
		log.Warn("could not walk the TIFF directories; converting every page libvips counts", "error", dirErr.Error())
	}
	return &source{file: file, loader: loader, pages: pages}, nil
}

// convert encodes one page as JPEG. A TIFF page libvips cannot read is
// retried with libtiff's RGBA reader; if that fails too, libvips's reason
// is reported, with libtiff's after it.
func (s *source) convert(page, quality int, log *slog.Logger) ([]byte, error) {
	opts := "access=sequential"
	if s.loader == "tiffload" {
		opts = "page=" + strconv.Itoa(page) + ",access=sequential,fail-on=error"
	}
	im, err := vips.Open(s.file, opts)
	if err == nil {
		w, h := im.Width(), im.Height()
		if w > vips.JPEGMaxSide || h > vips.JPEGMaxSide {
			im.Close()
			return nil, fmt.Errorf("the image is %dx%d pixels; JPEG allows at most %d per side", w, h, vips.JPEGMaxSide)
		}
		if err := worker.CheckPixels(w, h); err != nil {
			im.Close()
			return nil, err
		}
		var jpg []byte
		jpg, err = encode(im, quality)
		if err == nil {
			return jpg, nil
		}
	}
	if s.loader != "tiffload" {
		return nil, err
	}
	fb, ferr := vips.ReadTIFFRGBA(s.file, page)
	if ferr != nil {
		return nil, fmt.Errorf("%w (libtiff fallback: %v)", err, ferr)
	}
	jpg, ferr := encode(fb, quality)
	if ferr != nil {
		return nil, fmt.Errorf("%w (libtiff fallback: %v)", err, ferr)
	}
	log.Info("page read with libtiff's RGBA reader", "page", page+1, "libvips_error", err.Error())
	return jpg, nil
}

// encode converts an opened page to 8-bit sRGB (or grey) and encodes it;
// this is where a lazily opened page is actually decoded. It closes im.
func encode(im *vips.Image, quality int) ([]byte, error) {
	defer im.Close()
	out, err := im.ForJPEG()
	if err != nil {
		return nil, err
	}
	defer out.Close()
	return out.JPEG(quality)
}

// leadingBytes quotes the first bytes of a file, which usually say what
// it really is ("%PDF-1.7", "PK\x03\x04", "<html>").
func leadingBytes(file string) string {
	f, err := os.Open(file)
	if err != nil {
		return "unreadable bytes"
	}
	defer f.Close()
	buf := make([]byte, 8)
	n, _ := f.Read(buf)
	return strconv.Quote(string(buf[:n]))
}
