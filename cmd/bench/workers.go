package main

// The worker figures (issue 5): the TIFF worker's conversion and the image
// worker's three variants, timed against the vips command-line tools doing
// the same work on the same files in the same run.

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"image/jpeg"
	"io"
	"log/slog"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/arke-institute/orchestrator/blob"
	"github.com/arke-institute/orchestrator/worker"
	"github.com/arke-institute/orchestrator/worker/imageworker"
	"github.com/arke-institute/orchestrator/worker/tiffworker"
	"github.com/arke-institute/orchestrator/worker/vips"
)

// workerFigure is one worker operation timed against the vips CLI doing
// the same work on the same file.
type workerFigure struct {
	Name    string        // e.g. "TIFF (LZW) -> JPEG, 24 MP", "three variants from a 24 MP JPEG"
	Ours    time.Duration // median of the runs
	VIPS    time.Duration // median of the runs
	VIPSCmd string        // the CLI command(s) compared with, for the report
	// VIPSStartup is the part of VIPS that is process start-up and
	// libvips initialisation (loading its modules): the median time of
	// the same tools, as many times, printing their version.
	VIPSStartup time.Duration
}

// workerTarget is issue 33's bound on the worker against the CLI without
// its start-up (vsWork).
const workerTarget = 1.0

// vsWork is Ours / (VIPS - VIPSStartup): the conversion against the CLI's
// own work, since the worker's libvips starts once before the runs. It is
// +Inf when the start-up measured as long as the whole command, which
// leaves nothing to compare with.
func (f workerFigure) vsWork() float64 {
	work := f.VIPS - f.VIPSStartup
	if work <= 0 {
		return math.Inf(1)
	}
	return float64(f.Ours) / float64(work)
}

// vsCLI is Ours / VIPS, the CLI's process start-up included.
func (f workerFigure) vsCLI() float64 { return float64(f.Ours) / float64(f.VIPS) }

// The inputs are 24 megapixels: a full-frame camera's or an A4 scan's size.
const benchWidth, benchHeight = 6000, 4000

// benchBucket is the staging bucket of the workers' configuration; it only
// names objects in localStore.
const benchBucket = "staging"

// benchWorkers times the workers' conversion code against the vips CLI on
// generated 24 MP inputs.
//
// "Ours" runs the workers' real entry points (tiffworker.Convert,
// imageworker.Process) with a localStore in place of R2, and subtracts the
// download and upload times the workers measure themselves: what is left
// is what a task costs beyond its transfers (reading the TIFF directories,
// decoding, resizing, encoding, the work directory). The workers report
// those times in whole milliseconds, so up to 2 ms of transfer stays in.
//
// "VIPS" times the whole command, process start-up and libvips
// initialisation included, as an operator would run it. That start-up is
// timed on its own too (VIPSStartup): 0.05 to 0.2 s a command on a 2-CPU
// machine, mostly libvips loading its modules (ImageMagick, poppler,
// OpenSlide, HEIF). The in-process side pays libvips's initialisation
// once, before any run, so the headline ratio sets the worker against the
// CLI without its start-up (vsWork); the ratio against the whole command
// (vsCLI) flatters the worker by about one start-up.
//
// Each side runs runs times after one untimed run that warms the page
// cache and checks the outputs fully; the sides take turns going first,
// so all meet the same noise. Every run's JPEGs are checked to be of the
// expected size on both sides, so both did the same work.
//
// libvips starts with the worker's configuration (cmd/worker) unless the
// process started it before.
func benchWorkers(ctx context.Context, runs int) ([]workerFigure, error) {
	return benchWorkersAt(ctx, runs, benchWidth, benchHeight)
}

// benchWorkersAt is benchWorkers on w x h inputs (tests use smaller ones).
// Both sides of the image should be larger than the largest variant, or
// vipsthumbnail enlarges where the worker does not.
func benchWorkersAt(ctx context.Context, runs, w, h int) ([]workerFigure, error) {
	if runs < 1 {
		return nil, fmt.Errorf("runs is %d; it must be at least 1", runs)
	}
	for _, tool := range []string{"vips", "vipsthumbnail"} {
		if _, err := exec.LookPath(tool); err != nil {
			return nil, fmt.Errorf("the worker benchmark compares with the vips command-line tools, and %s is not installed (%w): install Debian's libvips-tools (apt-get install libvips-tools)", tool, err)
		}
	}
	threads, env := vipsThreads()
	if err := vips.Startup(vips.Config{Concurrency: threads}); err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp("", "bench-workers-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	in, err := writeWorkerInputs(dir, w, h)
	if err != nil {
		return nil, fmt.Errorf("generating inputs: %w", err)
	}

	b := &workerBench{dir: dir, env: env, width: w, height: h, quality: worker.DefaultJPEGQuality, variants: slices.Clone(worker.DefaultVariants)}
	mp := fmt.Sprintf("%.0f MP", float64(w*h)/1e6)
	cases := []workerCase{
		b.tiffCase("TIFF (LZW) -> JPEG, "+mp, in.lzw),
		b.tiffCase("TIFF (uncompressed) -> JPEG, "+mp, in.uncompressed),
		b.variantsCase("three variants from a "+mp+" JPEG", in.jpeg),
	}
	figs := make([]workerFigure, 0, len(cases))
	for _, c := range cases {
		fmt.Fprintf(os.Stderr, "workers: %s, %d runs each...\n", c.name, runs)
		fig, err := b.measure(ctx, c, runs)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", c.name, err)
		}
		figs = append(figs, fig)
	}
	return figs, nil
}

// workersTable renders the figures as rows of the benchmark's table: per
// input the headline ratio, against the CLI without its start-up, first.
func workersTable(figs []workerFigure) string {
	var b strings.Builder
	for _, f := range figs {
		fmt.Fprintf(&b, "%-44s %14s\n", f.Name, "")
		fmt.Fprintf(&b, "%-44s %14s\n", "  worker", f.Ours.Round(time.Millisecond))
		fmt.Fprintf(&b, "%-44s %14s\n", "  vips CLI", f.VIPS.Round(time.Millisecond))
		fmt.Fprintf(&b, "%-44s %14s\n", "  of which process start-up", f.VIPSStartup.Round(time.Millisecond))
		fmt.Fprintf(&b, "%-44s %13.2fx\n", "  worker / (vips CLI - start-up)", f.vsWork())
		fmt.Fprintf(&b, "%-44s %13.2fx\n", "  worker / vips CLI, incl. its start-up", f.vsCLI())
	}
	return b.String()
}

// vipsThreads is the libvips thread count cmd/worker uses (0, libvips's own
// choice, when VIPS_CONCURRENCY is set; else the CPUs, at most 4), and the
// environment that gives the CLI as many threads, so that neither side
// computes with more.
func vipsThreads() (int, []string) {
	env := os.Environ()
	if os.Getenv("VIPS_CONCURRENCY") != "" {
		return 0, env // both sides' libvips read it
	}
	n := min(runtime.NumCPU(), 4)
	return n, append(env, "VIPS_CONCURRENCY="+strconv.Itoa(n))
}

// workerInputs are the files both sides convert.
type workerInputs struct {
	lzw, uncompressed, jpeg string
}

// writeWorkerInputs writes the same photo-like image as an LZW TIFF, an
// uncompressed TIFF and a quality-90 JPEG (a camera's).
//
// It encodes with libvips, as worker/samples does; the samples' own
// pattern is four flat quadrants, which JPEG encodes far faster than a
// photograph and LZW shrinks to almost nothing, so it would not show what
// archive scans cost.
func writeWorkerInputs(dir string, w, h int) (workerInputs, error) {
	im, err := vips.FromMemory(photoLike(w, h), w, h, 3, vips.FormatUchar, vips.InterpretationSRGB)
	if err != nil {
		return workerInputs{}, err
	}
	defer im.Close()
	in := workerInputs{
		lzw:          filepath.Join(dir, "lzw.tif"),
		uncompressed: filepath.Join(dir, "uncompressed.tif"),
		jpeg:         filepath.Join(dir, "photo.jpg"),
	}
	for file, suffix := range map[string]string{
		in.lzw:          ".tif[compression=lzw]",
		in.uncompressed: ".tif[compression=none]",
		in.jpeg:         ".jpg[Q=90]",
	} {
		data, err := im.Save(suffix)
		if err != nil {
			return workerInputs{}, err
		}
		if err := os.WriteFile(file, data, 0o644); err != nil {
			return workerInputs{}, err
		}
	}
	return in, nil
}

// photoLike is w x h interleaved 8-bit RGB pixels with what makes a
// photograph cost its time to compress: smooth gradients, hard edges and
// grain. It is deterministic, so every run converts the same file.
func photoLike(w, h int) []byte {
	// Waves along each axis, per channel, computed once: a sine per pixel
	// would make generating slower than converting.
	var colWave, rowWave [3][]int
	for c := range 3 {
		colWave[c] = make([]int, w)
		for x := range w {
			colWave[c][x] = int(55 * math.Sin(float64(x)/float64(180+60*c)+float64(c)))
		}
		rowWave[c] = make([]int, h)
		for y := range h {
			rowWave[c][y] = int(45 * math.Cos(float64(y)/float64(130+50*c)))
		}
	}
	pix := make([]byte, w*h*3)
	seed := uint32(2463534242)
	i := 0
	for y := range h {
		for x := range w {
			edge := ((x/257 + y/181) % 3) * 22 // blocks with sharp borders
			for c := range 3 {
				// xorshift32: cheap grain, a few levels either way.
				seed ^= seed << 13
				seed ^= seed >> 17
				seed ^= seed << 5
				v := 118 + colWave[c][x] + rowWave[c][y] + edge + int(seed>>28) - 8
				pix[i] = byte(max(0, min(255, v)))
				i++
			}
		}
	}
	return pix
}

// workerBench holds what every measured run needs.
type workerBench struct {
	dir           string   // where the CLI writes its outputs
	env           []string // the CLI's environment
	width, height int      // of the inputs
	quality       int      // JPEG quality of both sides: the worker's default
	variants      []worker.Variant
}

// workerCase is one figure: a run of each side, returning the time taken
// and checking the outputs. full asks for a complete decode of every
// output as well (the untimed first run).
type workerCase struct {
	name string
	cmd  string
	ours func(ctx context.Context, full bool) (time.Duration, error)
	vips func(ctx context.Context, full bool) (time.Duration, error)
	// tools are the CLI programs the vips side runs, one entry per
	// process, to time their start-up alone.
	tools []string
}

// measure runs each side of c once to check it, then runs times, and
// reports the medians.
func (b *workerBench) measure(ctx context.Context, c workerCase, runs int) (workerFigure, error) {
	startup := func(ctx context.Context, _ bool) (time.Duration, error) {
		var total time.Duration
		for _, tool := range c.tools {
			d, err := b.command(ctx, tool, "--version")
			if err != nil {
				return 0, err
			}
			total += d
		}
		return total, nil
	}
	var ours, cli, start []time.Duration
	sides := []struct {
		name  string
		run   func(context.Context, bool) (time.Duration, error)
		times *[]time.Duration
	}{{"worker", c.ours, &ours}, {"vips CLI", c.vips, &cli}, {"vips CLI start-up", startup, &start}}
	// The start-up needs no check, and the vips side's first run has
	// already brought the tools into the page cache.
	for _, s := range sides[:2] {
		if _, err := s.run(ctx, true); err != nil {
			return workerFigure{}, fmt.Errorf("%s: %w", s.name, err)
		}
	}
	for i := range runs {
		// Rotate which side goes first, so that none always runs just
		// after another has warmed the caches or heated the CPU.
		for j := range sides {
			s := sides[(i+j)%len(sides)]
			if err := ctx.Err(); err != nil {
				return workerFigure{}, err
			}
			d, err := s.run(ctx, false)
			if err != nil {
				return workerFigure{}, fmt.Errorf("%s: %w", s.name, err)
			}
			*s.times = append(*s.times, d)
		}
	}
	return workerFigure{Name: c.name, Ours: median(ours), VIPS: median(cli), VIPSCmd: c.cmd, VIPSStartup: median(start)}, nil
}

// tiffCase is the TIFF worker converting file against `vips copy`.
func (b *workerBench) tiffCase(name, file string) workerCase {
	out := filepath.Join(b.dir, "vips-"+strings.TrimSuffix(filepath.Base(file), ".tif")+".jpg")
	q := fmt.Sprintf("[Q=%d]", b.quality)
	return workerCase{
		name:  name,
		cmd:   "vips copy in.tif out.jpg" + q,
		tools: []string{"vips"},
		ours: func(ctx context.Context, full bool) (time.Duration, error) {
			store := newLocalStore()
			key := "staging/BENCH/" + filepath.Base(file)
			store.addFile(benchBucket, key, file)
			cfg := worker.Config{Kind: worker.KindTIFF, Input: worker.Input{Key: key}, Bucket: benchBucket, JPEGQuality: b.quality}
			start := time.Now()
			res, err := tiffworker.Convert(ctx, cfg, store, slog.New(slog.DiscardHandler))
			elapsed := time.Since(start)
			if err != nil {
				return 0, err
			}
			if len(res.Outputs) > 0 {
				return 0, fmt.Errorf("%d pages, want 1", len(res.Outputs))
			}
			data, ok := store.object(benchBucket, res.OutputR2Key)
			if !ok {
				return 0, fmt.Errorf("no object at %s", res.OutputR2Key)
			}
			if err := checkJPEG(data, b.width, b.height, 0, full); err != nil {
				return 0, err
			}
			return elapsed - transfers(res.Performance), nil
		},
		vips: func(ctx context.Context, full bool) (time.Duration, error) {
			if err := os.Remove(out); err != nil && !errors.Is(err, os.ErrNotExist) {
				return 0, err
			}
			d, err := b.command(ctx, "vips", "copy", file, out+q)
			if err != nil {
				return 0, err
			}
			return d, checkJPEGFile(out, b.width, b.height, 0, full)
		},
	}
}

// variantsCase is the image worker making its variants of file against
// vipsthumbnail run once per variant size.
func (b *workerBench) variantsCase(name, file string) workerCase {
	q := fmt.Sprintf("[Q=%d]", b.quality)
	var cmds []string
	for _, v := range b.variants {
		cmds = append(cmds, fmt.Sprintf("vipsthumbnail in.jpg -s %d -o %s.jpg%s", v.Size, v.Name, q))
	}
	return workerCase{
		name:  name,
		cmd:   strings.Join(cmds, "; "),
		tools: slices.Repeat([]string{"vipsthumbnail"}, len(b.variants)),
		ours: func(ctx context.Context, full bool) (time.Duration, error) {
			store := newLocalStore()
			key := "staging/BENCH/" + filepath.Base(file)
			store.addFile(benchBucket, key, file)
			cfg := worker.Config{Kind: worker.KindImage, Input: worker.Input{Key: key}, Bucket: benchBucket, JPEGQuality: b.quality,
				ArchiveBucket: "archive", CDNBucket: worker.DefaultCDNBucket, CDNPublicURL: "https://cdn.invalid", Variants: b.variants}
			start := time.Now()
			res, err := imageworker.Process(ctx, cfg, store, slog.New(slog.DiscardHandler))
			elapsed := time.Since(start)
			if err != nil {
				return 0, err
			}
			if res.RefData.Width != b.width || res.RefData.Height != b.height {
				return 0, fmt.Errorf("ref.json says %dx%d, want %dx%d", res.RefData.Width, res.RefData.Height, b.width, b.height)
			}
			for _, v := range b.variants {
				vkey := "variants/" + strings.TrimPrefix(key, "staging/") + "/" + v.Name + ".jpg"
				data, ok := store.object(cfg.CDNBucket, vkey)
				if !ok {
					return 0, fmt.Errorf("no %s variant at %s", v.Name, vkey)
				}
				w, h := b.variantSize(v.Size)
				if err := checkJPEG(data, w, h, variantSlack, full); err != nil {
					return 0, fmt.Errorf("%s variant: %w", v.Name, err)
				}
			}
			return elapsed - transfers(res.Performance), nil
		},
		vips: func(ctx context.Context, full bool) (time.Duration, error) {
			var total time.Duration
			for _, v := range b.variants {
				out := filepath.Join(b.dir, "vips-"+v.Name+".jpg")
				if err := os.Remove(out); err != nil && !errors.Is(err, os.ErrNotExist) {
					return 0, err
				}
				d, err := b.command(ctx, "vipsthumbnail", file, "-s", strconv.Itoa(v.Size), "-o", out+q)
				if err != nil {
					return 0, err
				}
				total += d
				w, h := b.variantSize(v.Size)
				if err := checkJPEGFile(out, w, h, variantSlack, full); err != nil {
					return 0, fmt.Errorf("%s variant: %w", v.Name, err)
				}
			}
			return total, nil
		},
	}
}

// variantSlack is how far a variant's sides may be from variantSize. The
// worker derives the smaller variants from the large one, not from the
// original, so their short side can round the other way: its 800 px
// variant of 6000x4000 is 800x534 (from 1600x1067), vipsthumbnail's is
// 800x533.
const variantSlack = 1

// variantSize is the size of a variant of the input whose longest side is
// size pixels, rounded as libvips rounds.
func (b *workerBench) variantSize(size int) (w, h int) {
	long, short := max(b.width, b.height), min(b.width, b.height)
	s := int(math.Round(float64(short) * float64(size) / float64(long)))
	if b.width >= b.height {
		return size, s
	}
	return s, size
}

// transfers is the time a worker spent downloading and uploading, which
// the CLI has no counterpart for.
func transfers(p worker.Performance) time.Duration {
	return time.Duration(p.DownloadMS+p.UploadMS) * time.Millisecond
}

// command runs a vips tool and times the whole process.
func (b *workerBench) command(ctx context.Context, name string, args ...string) (time.Duration, error) {
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Env = b.env
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	start := time.Now()
	err := cmd.Run()
	d := time.Since(start)
	if err != nil {
		return 0, fmt.Errorf("%s %s: %w: %s", name, strings.Join(args, " "), err, bytes.TrimSpace(out.Bytes()))
	}
	return d, nil
}

func checkJPEGFile(file string, w, h, slack int, full bool) error {
	data, err := os.ReadFile(file)
	if err != nil {
		return err
	}
	return checkJPEG(data, w, h, slack, full)
}

func abs(n int) int { return max(n, -n) }

// checkJPEG checks that data is a JPEG of w x h pixels, give or take
// slack pixels a side, decoding it completely (with Go's decoder, not
// libvips's) if full.
func checkJPEG(data []byte, w, h, slack int, full bool) error {
	cfg, err := jpeg.DecodeConfig(bytes.NewReader(data))
	if err != nil {
		return fmt.Errorf("output is not a JPEG: %w", err)
	}
	if abs(cfg.Width-w) > slack || abs(cfg.Height-h) > slack {
		return fmt.Errorf("output is %dx%d, want %dx%d", cfg.Width, cfg.Height, w, h)
	}
	if full {
		if _, err := jpeg.Decode(bytes.NewReader(data)); err != nil {
			return fmt.Errorf("output does not decode: %w", err)
		}
	}
	return nil
}

// localStore is the object store the benchmark gives the workers in place
// of R2: inputs are local files, and what the workers write is kept in
// memory for checking. The transfers are subtracted from the worker's time
// anyway; this keeps the network out of the noise.
type localStore struct {
	mu      sync.Mutex
	files   map[string]string // bucket/key -> file
	objects map[string][]byte // bucket/key -> written content
}

var _ blob.Store = (*localStore)(nil)

func newLocalStore() *localStore {
	return &localStore{files: map[string]string{}, objects: map[string][]byte{}}
}

func (s *localStore) addFile(bucket, key, file string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.files[bucket+"/"+key] = file
}

func (s *localStore) object(bucket, key string) ([]byte, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	data, ok := s.objects[bucket+"/"+key]
	return data, ok
}

func (s *localStore) Get(ctx context.Context, bucket, key string) ([]byte, error) {
	body, _, err := s.Open(ctx, bucket, key)
	if err != nil {
		return nil, err
	}
	defer body.Close()
	return io.ReadAll(body)
}

func (s *localStore) Open(_ context.Context, bucket, key string) (io.ReadCloser, int64, error) {
	s.mu.Lock()
	file, isFile := s.files[bucket+"/"+key]
	data, isObject := s.objects[bucket+"/"+key]
	s.mu.Unlock()
	switch {
	case isObject:
		return io.NopCloser(bytes.NewReader(data)), int64(len(data)), nil
	case isFile:
		f, err := os.Open(file)
		if err != nil {
			return nil, 0, err
		}
		st, err := f.Stat()
		if err != nil {
			f.Close()
			return nil, 0, err
		}
		return f, st.Size(), nil
	}
	return nil, 0, fmt.Errorf("opening %s/%s: %w", bucket, key, blob.ErrNotFound)
}

func (s *localStore) Put(_ context.Context, bucket, key string, body io.ReadSeeker, _ int64, _ string) error {
	data, err := io.ReadAll(body)
	if err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.objects[bucket+"/"+key] = data
	return nil
}

func (s *localStore) PutIfAbsent(ctx context.Context, bucket, key string, body io.ReadSeeker, size int64, contentType string) error {
	if ok, _ := s.Exists(ctx, bucket, key); ok {
		return fmt.Errorf("putting %s/%s: %w", bucket, key, blob.ErrExists)
	}
	// The benchmark's workers never race for a key, so check-then-put is
	// enough.
	return s.Put(ctx, bucket, key, body, size, contentType)
}

func (s *localStore) Exists(_ context.Context, bucket, key string) (bool, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	_, isFile := s.files[bucket+"/"+key]
	_, isObject := s.objects[bucket+"/"+key]
	return isFile || isObject, nil
}

func (s *localStore) Copy(_ context.Context, srcBucket, srcKey, dstBucket, dstKey string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if file, ok := s.files[srcBucket+"/"+srcKey]; ok {
		s.files[dstBucket+"/"+dstKey] = file // a server-side copy costs the worker nothing either
		return nil
	}
	data, ok := s.objects[srcBucket+"/"+srcKey]
	if !ok {
		return fmt.Errorf("copying %s/%s: %w", srcBucket, srcKey, blob.ErrNotFound)
	}
	s.objects[dstBucket+"/"+dstKey] = data
	return nil
}

func (s *localStore) EnsureBucket(context.Context, string) error { return nil }
