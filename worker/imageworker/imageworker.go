// Package imageworker is the image processing worker (`worker image`): it
// makes CDN variants of the image at INPUT_R2_KEY, archives the original
// and writes the .ref.json that replaces the image in the batch (spec 000
// §3.3, phase 2).
//
// Objects written, for INPUT_R2_KEY = staging/B/photos/a.jpg:
//
//	CDN_BUCKET      variants/B/photos/a.jpg/thumbnail.jpg   (longest side 200 px)
//	                variants/B/photos/a.jpg/medium.jpg      (800 px)
//	                variants/B/photos/a.jpg/large.jpg       (1600 px)
//	ARCHIVE_BUCKET  staging/B/photos/a.jpg                  (the original, uploaded again)
//	R2_BUCKET       staging/B/photos/a.jpg.ref.json         (written last)
//
// The variant prefix is the input key without its "staging/" prefix, so
// every input has its own folder of variants and re-running a task
// rewrites the same objects. Variants are JPEG (alpha flattened onto
// white), upright by the EXIF orientation, and never larger than the
// original: a 500 px image has 200, 500 and 500 px variants.
//
// The ref.json (RefData) points at the large variant:
//
//	{"url": CDN_PUBLIC_URL + "/variants/B/photos/a.jpg/large.jpg",
//	 "ipfs_cid": INPUT_CID (omitted if unset), "type": "image/jpeg",
//	 "size": <bytes of the original>, "filename": "a.jpg",
//	 "width": <original width>, "height": <original height> (as displayed),
//	 "variants": {"thumbnail": URL, "medium": URL, "large": URL}}
package imageworker

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/url"
	"os"
	"path"
	"strings"
	"time"

	"golang.org/x/sync/errgroup"

	"github.com/arke-institute/orchestrator/blob"
	"github.com/arke-institute/orchestrator/phases"
	"github.com/arke-institute/orchestrator/worker"
	"github.com/arke-institute/orchestrator/worker/vips"
)

// RefData is the content of the .ref.json and the callback's ref_data:
// spec 000's RefData (url, ipfs_cid, type, size, filename) plus the
// original's displayed dimensions and every variant's URL.
type RefData struct {
	URL      string            `json:"url"`
	IPFSCID  string            `json:"ipfs_cid,omitempty"`
	Type     string            `json:"type,omitempty"`
	Size     int64             `json:"size"`
	Filename string            `json:"filename,omitempty"`
	Width    int               `json:"width"`
	Height   int               `json:"height"`
	Variants map[string]string `json:"variants"`
}

// Result is the success callback body (without the envelope fields Run
// adds).
type Result struct {
	RefJSONR2Key string             `json:"ref_json_r2_key"`
	RefData      RefData            `json:"ref_data"`
	ArchiveR2Key string             `json:"archive_r2_key"`
	RefJSONSize  int64              `json:"ref_json_size"`
	Performance  worker.Performance `json:"performance"`
}

// mediaTypes are the formats processed, by libvips loader. The phase sends
// JPEG, PNG and WebP; GIF and TIFF are accepted in case a file's content
// type was wrong.
var mediaTypes = map[string]string{
	"jpegload": "image/jpeg",
	"pngload":  "image/png",
	"webpload": "image/webp",
	"gifload":  "image/gif",
	"tiffload": "image/tiff",
}

// Run is the worker program of this kind (worker.Program): it processes the task's image.
func Run(ctx context.Context, t worker.Task) (any, error) {
	return Process(ctx, t.Config, t.Store, t.Log)
}

// Process makes the variants, archives the original and writes the
// ref.json, in that order, so a ref.json never points at missing objects.
func Process(ctx context.Context, cfg worker.Config, store blob.Store, log *slog.Logger) (*Result, error) {
	timer := worker.StartTimer()
	key := cfg.Input.Key
	if len(cfg.Variants) == 0 {
		return nil, fmt.Errorf("no variant sizes configured")
	}
	dir, file, size, err := worker.FetchInput(ctx, cfg, store, worker.KindImage, timer, log)
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)

	t := time.Now()
	img, err := makeVariants(file, size, cfg.Variants, cfg.JPEGQuality)
	timer.Conversion = time.Since(t)
	if err != nil {
		return nil, fmt.Errorf("processing image %s: %w", key, err)
	}

	prefix := phases.VariantPrefix(key)
	ref := RefData{
		IPFSCID:  cfg.Input.CID,
		Type:     cfg.Input.ContentType,
		Size:     size,
		Filename: cfg.Input.FileName,
		Width:    img.width,
		Height:   img.height,
		Variants: map[string]string{},
	}
	if ref.Type == "" {
		ref.Type = img.mediaType
	}
	if ref.Filename == "" {
		ref.Filename = path.Base(key)
	}

	t = time.Now()
	g, gctx := errgroup.WithContext(ctx)
	for i, v := range cfg.Variants {
		vkey := prefix + "/" + v.Name + ".jpg"
		ref.Variants[v.Name] = cdnURL(cfg.CDNPublicURL, vkey)
		data := img.variants[i]
		g.Go(func() error {
			if err := store.Put(gctx, cfg.CDNBucket, vkey, bytes.NewReader(data), int64(len(data)), "image/jpeg"); err != nil {
				return fmt.Errorf("uploading %s variant: %w", v.Name, err)
			}
			log.Debug("uploaded variant", "variant", v.Name, "cdn_key", vkey, "bytes", len(data))
			return nil
		})
	}
	g.Go(func() error {
		// A worker has no credentials for a server-side copy: it uploads
		// the file it downloaded.
		f, err := os.Open(file)
		if err != nil {
			return fmt.Errorf("archiving original: %w", err)
		}
		defer f.Close()
		if err := store.Put(gctx, cfg.ArchiveBucket, key, f, size, ref.Type); err != nil {
			return fmt.Errorf("archiving original: %w", err)
		}
		return nil
	})
	if err := g.Wait(); err != nil {
		return nil, err
	}
	ref.URL = ref.Variants[cfg.Variants[len(cfg.Variants)-1].Name]

	refJSON, err := json.MarshalIndent(ref, "", "  ")
	if err != nil {
		return nil, fmt.Errorf("encoding ref.json: %w", err)
	}
	refKey := phases.RefJSONKey(key)
	if err := store.Put(ctx, cfg.Bucket, refKey, bytes.NewReader(refJSON), int64(len(refJSON)), "application/json"); err != nil {
		return nil, fmt.Errorf("writing %s: %w", refKey, err)
	}
	timer.Upload = time.Since(t)

	log.Info("processed", "width", img.width, "height", img.height, "ref_json_r2_key", refKey,
		"conversion_ms", timer.Conversion.Milliseconds(), "upload_ms", timer.Upload.Milliseconds())
	return &Result{
		RefJSONR2Key: refKey,
		RefData:      ref,
		ArchiveR2Key: key,
		RefJSONSize:  int64(len(refJSON)),
		Performance:  timer.Performance(),
	}, nil
}

// cdnURL is the public URL of a CDN object, each key segment escaped.
func cdnURL(base, key string) string {
	segs := strings.Split(key, "/")
	for i, s := range segs {
		segs[i] = url.PathEscape(s)
	}
	return base + "/" + strings.Join(segs, "/")
}

// variantSet is an image's variants, encoded in the order of the sizes.
type variantSet struct {
	mediaType     string
	width, height int // the original's, as displayed (EXIF orientation applied)
	variants      [][]byte
}

// makeVariants decodes the image once, shrunk on load to the largest
// variant size, keeps that in memory and derives the smaller variants
// from it.
func makeVariants(file string, size int64, variants []worker.Variant, quality int) (*variantSet, error) {
	if size == 0 {
		return nil, fmt.Errorf("the file is empty")
	}
	loader := vips.Loader(file)
	mediaType, ok := mediaTypes[loader]
	if !ok {
		if loader == "" {
			return nil, fmt.Errorf("not an image format libvips reads")
		}
		return nil, fmt.Errorf("unsupported format %s (want JPEG, PNG or WebP)", strings.TrimSuffix(loader, "load"))
	}

	// The header alone: dimensions and orientation, no pixels decoded.
	hdr, err := vips.Open(file, "access=sequential")
	if err != nil {
		return nil, err
	}
	out := &variantSet{mediaType: mediaType, width: hdr.Width(), height: hdr.Height()}
	if err := worker.CheckPixels(out.width, out.height); err != nil {
		hdr.Close()
		return nil, err
	}
	if o := hdr.Orientation(); o >= 5 && o <= 8 {
		out.width, out.height = out.height, out.width
	}
	hdr.Close()

	largest := variants[len(variants)-1].Size
	thumb, err := vips.Thumbnail(file, largest)
	if err != nil {
		return nil, err
	}
	flat, err := thumb.ForJPEG()
	thumb.Close()
	if err != nil {
		return nil, err
	}
	base, err := flat.CopyMemory()
	flat.Close()
	if err != nil {
		return nil, err
	}
	defer base.Close()

	for _, v := range variants {
		im := base
		if v.Size < max(base.Width(), base.Height()) {
			if im, err = base.Thumbnail(v.Size); err != nil {
				return nil, fmt.Errorf("making %s variant: %w", v.Name, err)
			}
		}
		jpg, err := im.JPEG(quality)
		if im != base {
			im.Close()
		}
		if err != nil {
			return nil, fmt.Errorf("encoding %s variant: %w", v.Name, err)
		}
		out.variants = append(out.variants, jpg)
	}
	return out, nil
}
