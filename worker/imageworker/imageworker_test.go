package imageworker_test

import (
	"bytes"
	"encoding/json"
	"image"
	"image/color"
	"image/jpeg"
	"log/slog"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/arke-institute/orchestrator/blob"
	"github.com/arke-institute/orchestrator/internal/harness/s3test"
	"github.com/arke-institute/orchestrator/internal/harness/workertest"
	"github.com/arke-institute/orchestrator/phases"
	"github.com/arke-institute/orchestrator/worker"
	"github.com/arke-institute/orchestrator/worker/imageworker"
	"github.com/arke-institute/orchestrator/worker/samples"
	"github.com/arke-institute/orchestrator/worker/vips"
)

func TestMain(m *testing.M) { workertest.Main(m) }

type env struct {
	store blob.Store
	cfg   worker.Config
}

// newEnv makes staging, archive and CDN buckets and an image worker
// configuration for them with the default variant sizes.
func newEnv(t *testing.T) *env {
	t.Helper()
	srv := s3test.Start(t)
	store, err := blob.NewS3(srv.Config())
	require.NoError(t, err)
	cdn := srv.NewBucket(t)
	return &env{store: store, cfg: worker.Config{
		Kind:          worker.KindImage,
		Bucket:        srv.NewBucket(t),
		ArchiveBucket: srv.NewBucket(t),
		CDNBucket:     cdn,
		CDNPublicURL:  srv.Endpoint() + "/" + cdn,
		JPEGQuality:   90,
		Variants:      worker.DefaultVariants,
	}}
}

func (e *env) process(t *testing.T, in worker.Input, data []byte) (*imageworker.Result, error) {
	t.Helper()
	require.NoError(t, e.store.Put(t.Context(), e.cfg.Bucket, in.Key, bytes.NewReader(data), int64(len(data)), ""))
	cfg := e.cfg
	cfg.Input = in
	return imageworker.Process(t.Context(), cfg, e.store, slog.New(slog.DiscardHandler))
}

func (e *env) get(t *testing.T, bucket, key string) []byte {
	t.Helper()
	data, err := e.store.Get(t.Context(), bucket, key)
	require.NoError(t, err, "s3://%s/%s", bucket, key)
	return data
}

// encoded makes the test pattern in a format (".jpg", ".png[...]").
func variantSet(t *testing.T, w, h int, suffix string, with func(*vips.Image) *vips.Image) []byte {
	t.Helper()
	im, err := samples.Image(w, h, 1)
	require.NoError(t, err)
	defer im.Close()
	if with != nil {
		im = with(im)
		defer im.Close()
	}
	data, err := im.Save(suffix)
	require.NoError(t, err)
	return data
}

func decode(t *testing.T, data []byte) image.Image {
	t.Helper()
	img, err := jpeg.Decode(bytes.NewReader(data))
	require.NoError(t, err)
	return img
}

func requireColour(t *testing.T, want samples.Colour, c color.Color, msg string) {
	t.Helper()
	got := color.RGBAModel.Convert(c).(color.RGBA)
	require.InDeltaSlice(t, []float64{float64(want[0]), float64(want[1]), float64(want[2])},
		[]float64{float64(got.R), float64(got.G), float64(got.B)}, 8, msg)
}

func TestProcessJPEG(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	original := variantSet(t, 2000, 1000, ".jpg[Q=95]", nil)
	in := worker.Input{Key: "staging/01BATCH/photos/view.jpg", CID: "bafyview", ContentType: "image/jpeg", FileName: "view.jpg"}
	res, err := e.process(t, in, original)
	require.NoError(t, err)

	body, err := json.Marshal(res)
	require.NoError(t, err)
	require.NoError(t, phases.ValidateResult(phases.ImageProcessing, body))

	prefix := "variants/01BATCH/photos/view.jpg/"
	base := e.cfg.CDNPublicURL + "/" + prefix
	require.Equal(t, imageworker.RefData{
		URL:      base + "large.jpg",
		IPFSCID:  "bafyview",
		Type:     "image/jpeg",
		Size:     int64(len(original)),
		Filename: "view.jpg",
		Width:    2000,
		Height:   1000,
		Variants: map[string]string{"thumbnail": base + "thumbnail.jpg", "medium": base + "medium.jpg", "large": base + "large.jpg"},
	}, res.RefData)
	require.Equal(t, "staging/01BATCH/photos/view.jpg.ref.json", res.RefJSONR2Key)
	require.Equal(t, "staging/01BATCH/photos/view.jpg", res.ArchiveR2Key)

	// The variants: longest side 200, 800, 1600, the pattern intact.
	for name, size := range map[string][2]int{"thumbnail": {200, 100}, "medium": {800, 400}, "large": {1600, 800}} {
		img := decode(t, e.get(t, e.cfg.CDNBucket, prefix+name+".jpg"))
		require.Equal(t, image.Rect(0, 0, size[0], size[1]), img.Bounds(), name)
		w, h := size[0], size[1]
		for _, p := range [][2]int{{w / 4, h / 4}, {3 * w / 4, h / 4}, {w / 4, 3 * h / 4}, {3 * w / 4, 3 * h / 4}} {
			requireColour(t, samples.Expected(1, p[0], p[1], w, h), img.At(p[0], p[1]), name)
		}
	}

	// The archive holds the original, byte for byte.
	require.Equal(t, original, e.get(t, e.cfg.ArchiveBucket, "staging/01BATCH/photos/view.jpg"))

	// The ref.json holds the same RefData as the callback.
	refJSON := e.get(t, e.cfg.Bucket, res.RefJSONR2Key)
	require.Equal(t, int64(len(refJSON)), res.RefJSONSize)
	var stored imageworker.RefData
	require.NoError(t, json.Unmarshal(refJSON, &stored))
	require.Equal(t, res.RefData, stored)
	var raw map[string]any
	require.NoError(t, json.Unmarshal(refJSON, &raw))
	require.ElementsMatch(t, []string{"url", "ipfs_cid", "type", "size", "filename", "width", "height", "variants"}, keys(raw))

	require.Positive(t, res.Performance.TotalMS+1)
}

func keys(m map[string]any) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	return out
}

func TestSmallPNGNotEnlarged(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	// 300x150 with alpha: the bottom-right quadrant transparent.
	withAlpha := func(im *vips.Image) *vips.Image {
		pix := make([]byte, 0, 300*150*4)
		for y := range 150 {
			for x := range 300 {
				c := samples.Expected(1, x, y, 300, 150)
				a := byte(255)
				if x >= 150 && y >= 75 {
					a = 0
				}
				pix = append(pix, c[0], c[1], c[2], a)
			}
		}
		out, err := vips.FromMemory(pix, 300, 150, 4, vips.FormatUchar, vips.InterpretationSRGB)
		require.NoError(t, err)
		return out
	}
	original := variantSet(t, 300, 150, ".png", withAlpha)
	res, err := e.process(t, worker.Input{Key: "staging/01BATCH/logo.png"}, original)
	require.NoError(t, err)

	require.Equal(t, "image/png", res.RefData.Type, "sniffed when the manifest gave none")
	require.Equal(t, "logo.png", res.RefData.Filename, "the key's base name when the manifest gave none")
	require.Empty(t, res.RefData.IPFSCID)
	require.Equal(t, [2]int{300, 150}, [2]int{res.RefData.Width, res.RefData.Height})
	refJSON := e.get(t, e.cfg.Bucket, res.RefJSONR2Key)
	require.NotContains(t, string(refJSON), "ipfs_cid")

	for name, size := range map[string][2]int{"thumbnail": {200, 100}, "medium": {300, 150}, "large": {300, 150}} {
		img := decode(t, e.get(t, e.cfg.CDNBucket, "variants/01BATCH/logo.png/"+name+".jpg"))
		require.Equal(t, image.Rect(0, 0, size[0], size[1]), img.Bounds(), name)
		requireColour(t, samples.Colour{255, 255, 255}, img.At(size[0]*7/8, size[1]*7/8), name+": transparent is white")
		requireColour(t, samples.QuadrantColours[0], img.At(size[0]/8, size[1]/8), name)
	}
}

func TestOrientationApplied(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	// Stored 400x200 with EXIF orientation 6: displayed 200x400.
	rotated := variantSet(t, 400, 200, ".jpg", func(im *vips.Image) *vips.Image {
		out, err := im.WithInt("orientation", 6)
		require.NoError(t, err)
		return out
	})
	res, err := e.process(t, worker.Input{Key: "staging/01BATCH/phone.jpg"}, rotated)
	require.NoError(t, err)
	require.Equal(t, [2]int{200, 400}, [2]int{res.RefData.Width, res.RefData.Height})
	img := decode(t, e.get(t, e.cfg.CDNBucket, "variants/01BATCH/phone.jpg/thumbnail.jpg"))
	require.Equal(t, image.Rect(0, 0, 100, 200), img.Bounds())
}

func TestEscapedURLs(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	res, err := e.process(t, worker.Input{Key: "staging/01BATCH/My Photos/été #1.jpg"}, variantSet(t, 40, 20, ".jpg", nil))
	require.NoError(t, err)
	require.Equal(t, e.cfg.CDNPublicURL+"/variants/01BATCH/My%20Photos/%C3%A9t%C3%A9%20%231.jpg/large.jpg", res.RefData.URL)
	e.get(t, e.cfg.CDNBucket, "variants/01BATCH/My Photos/été #1.jpg/large.jpg")
}

func TestUnsupportedInput(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	pdf := []byte("%PDF-1.4\n1 0 obj << /Type /Catalog /Pages 2 0 R >> endobj\n2 0 obj << /Type /Pages /Kids [3 0 R] /Count 1 >> endobj\n3 0 obj << /Type /Page /Parent 2 0 R /MediaBox [0 0 10 10] >> endobj\ntrailer << /Root 1 0 R >>\n%%EOF\n")
	_, err := e.process(t, worker.Input{Key: "staging/01BATCH/doc.jpg"}, pdf)
	require.EqualError(t, err, "processing image staging/01BATCH/doc.jpg: unsupported format pdf (want JPEG, PNG or WebP)")

	_, err = e.process(t, worker.Input{Key: "staging/01BATCH/text.png"}, []byte("plain words, no image here at all"))
	require.EqualError(t, err, "processing image staging/01BATCH/text.png: not an image format libvips reads")

	// A truncated JPEG is shown as browsers show it: the missing part
	// grey. The original is archived as it is.
	jpg := variantSet(t, 400, 300, ".jpg", nil)
	_, err = e.process(t, worker.Input{Key: "staging/01BATCH/cut.jpg"}, jpg[:len(jpg)/3])
	require.NoError(t, err)
}
