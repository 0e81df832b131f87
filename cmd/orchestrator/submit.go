package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"net"
	"net/url"
	"os"
	"path"
	"path/filepath"
	"strings"
	"sync/atomic"
	"text/tabwriter"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/oklog/ulid/v2"
	"golang.org/x/sync/errgroup"

	"github.com/arke-institute/orchestrator/blob"
	"github.com/arke-institute/orchestrator/client"
	"github.com/arke-institute/orchestrator/config"
	"github.com/arke-institute/orchestrator/manifest"
)

const submitUsage = `Usage: orchestrator submit [flags] DIR

Uploads the folder DIR as a batch and follows it until DONE or ERROR.

Every file of DIR (subfolders included) is uploaded to the staging bucket
under staging/{batch_id}/{relative path}, with a manifest (spec 001) that
groups the files by folder. The queue message then goes to the orchestrator
(POST {url}/batches), and the batch's progress is shown until it ends. The
batch ID is printed on stdout; at the end, so is the final file list with
its preprocessor tags.

Nothing is uploaded when a file would be refused: an extension the pipeline
does not take (allowed: .tiff .tif .jpg .jpeg .png .gif .bmp .json .xml .txt
.csv .pdf .md), a file over MAX_FILE_SIZE, a folder over MAX_BATCH_SIZE, a
hidden file or folder (name starting with "."), or anything that is not a
regular file. Each is listed with its reason. System clutter (.DS_Store,
._* AppleDouble files, Thumbs.db, desktop.ini, __MACOSX/, ...) is skipped.

The queue message carries the ingest credential: INGEST_TOKEN as a bearer
token, else an X-Signature keyed by INGEST_SIGNING_SECRET; progress is read
with READ_TOKEN (else ADMIN_TOKEN). Next to a ` + "`make run`" + `, all of them come
from its .data/run.env.

Storage is configured as for serve: R2_ENDPOINT or R2_ACCOUNT_ID,
R2_ACCESS_KEY_ID, R2_SECRET_ACCESS_KEY and R2_BUCKET (default arke-staging).
With no R2 setting at all, the local S3 server of ` + "`make run`" + ` is used
(LOCAL_S3_ADDR, LOCAL_S3_ACCESS_KEY, LOCAL_S3_SECRET_KEY; default
http://127.0.0.1:7070 with local/localsecret).

Exit status: 0 when the batch is DONE (or submitted, with -no-wait), 1 when
files were refused, something failed or the batch ended in ERROR, 2 for a
mistake on the command line.

Flags:
`

// defaultParentPI is spec 001's root persistent identifier.
const defaultParentPI = "00000000000000000000000000"

// maxKeyBytes is the longest object key S3 and R2 accept.
const maxKeyBytes = 1024

// uploadConcurrency is how many files are uploaded at once.
const uploadConcurrency = 8

// Contact with the orchestrator while following a batch may drop (a
// restart); polling carries on for lostContactAfter before giving up.
const lostContactAfter = time.Minute

// deliveryWait bounds how long a DONE batch's final manifest is awaited.
const deliveryWait = 2 * time.Minute

// submitOptions is a parsed submit command line and environment.
type submitOptions struct {
	dir          string         // absolute
	url          string         // -url as given
	api          *client.Client // the orchestrator's API at url
	uploader     string
	rootPath     string
	parentPI     string
	batchID      string
	priority     int
	processing   manifest.ProcessingConfig
	noWait       bool
	pollInterval time.Duration
	bucket       string
	storage      blob.S3Config
	limits       manifest.Limits
}

// submit is `orchestrator submit`, on the process environment with the
// run.env of a `make run` beneath it.
func submit(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	return runSubmit(ctx, args, operatorEnv(), stdout, stderr)
}

// runSubmit is submit with the environment read through lookup, so tests
// run it without touching the process environment.
func runSubmit(ctx context.Context, args []string, lookup func(string) (string, bool), stdout, stderr io.Writer) error {
	opts, err := parseSubmitArgs(args, lookup, stderr)
	if errors.Is(err, flag.ErrHelp) {
		return nil
	}
	if err != nil {
		return err
	}
	store, err := blob.NewS3(opts.storage)
	if err != nil {
		return err
	}
	s := &submitter{
		opts: opts, store: store, stdout: stdout, stderr: stderr,
		terminal: isTerminal(stderr),
	}
	return s.run(ctx)
}

// parseSubmitArgs reads the flags, which may come before or after DIR, and
// the storage settings.
func parseSubmitArgs(args []string, lookup func(string) (string, bool), stderr io.Writer) (submitOptions, error) {
	cfg, err := config.Load(lookup)
	if err != nil {
		return submitOptions{}, err
	}
	uploader := "cli"
	if u, ok := lookup("USER"); ok && u != "" {
		uploader = u
	}

	flags := flag.NewFlagSet("submit", flag.ContinueOnError)
	flags.SetOutput(stderr)
	flags.Usage = func() {
		fmt.Fprint(stderr, submitUsage)
		flags.PrintDefaults()
	}
	var o submitOptions
	flags.StringVar(&o.url, "url", cfg.OrchestratorURL, "orchestrator base URL ($ORCHESTRATOR_URL, else from LISTEN_ADDR)")
	flags.StringVar(&o.uploader, "uploader", uploader, "who uploads the batch ($USER)")
	flags.StringVar(&o.rootPath, "root-path", "/", "logical root the files' paths hang from")
	flags.StringVar(&o.parentPI, "parent-pi", defaultParentPI, "persistent identifier the batch is ingested under")
	flags.StringVar(&o.batchID, "batch-id", "", "batch ID (default a new ULID)")
	flags.BoolVar(&o.processing.OCR, "ocr", false, "processing_config.ocr for every folder")
	flags.BoolVar(&o.processing.Describe, "describe", false, "processing_config.describe for every folder")
	flags.BoolVar(&o.processing.Pinax, "pinax", true, "processing_config.pinax for every folder")
	flags.Func("priority", "the batch's priority: -10 (lowest) to 10 (highest), or lowest, low, normal, high (default normal, 0)", func(v string) error {
		var err error
		o.priority, err = manifest.ParsePriority(v)
		return err
	})
	flags.BoolVar(&o.noWait, "no-wait", false, "exit once the batch is submitted")
	flags.DurationVar(&o.pollInterval, "poll-interval", 500*time.Millisecond, "how often the batch status is read")

	dirs, err := parseInterleaved(flags, args)
	if err != nil {
		return o, err
	}
	if len(dirs) != 1 {
		flags.Usage()
		return o, usageError{fmt.Sprintf("submit takes one folder, got %d", len(dirs))}
	}

	o.api, err = client.New(client.Config{URL: o.url, IngestToken: cfg.IngestToken, IngestSigningSecret: cfg.IngestSigningSecret,
		ReadToken: cfg.ReadToken, AdminToken: cfg.AdminToken, OnSubmitWait: func(refusal *client.Error, wait time.Duration) {
			fmt.Fprintf(stderr, "the orchestrator refused the batch for now (%s): submitting again in %s\n", refusal.Message, wait)
		}})
	if err != nil {
		return o, usageError{fmt.Sprintf("-url %q must be an http:// or https:// URL", strings.TrimRight(o.url, "/"))}
	}
	if o.pollInterval <= 0 {
		return o, usageError{"-poll-interval must be positive"}
	}
	if o.batchID == "" {
		o.batchID = ulid.Make().String()
	}
	if o.dir, err = filepath.Abs(dirs[0]); err != nil {
		return o, err
	}
	if fi, err := os.Stat(o.dir); err != nil {
		return o, err
	} else if !fi.IsDir() {
		return o, fmt.Errorf("%s is not a folder", dirs[0])
	}
	if o.storage, err = submitStorage(cfg); err != nil {
		return o, err
	}
	o.bucket = cfg.R2Bucket
	o.limits = manifest.Limits{MaxFileSize: cfg.MaxFileSize, MaxBatchSize: cfg.MaxBatchSize}
	if cfg.IngestToken == "" && cfg.IngestSigningSecret == "" {
		return o, fmt.Errorf("submit needs the ingest credential: set INGEST_TOKEN (or INGEST_SIGNING_SECRET) to the orchestrator's (next to a `make run`, run this from its folder: its .data/run.env leads to the tokens)")
	}
	return o, nil
}

// submitStorage is where the files go: R2 (or any S3 server) when an R2
// setting is given, all of them then being required as for serve; with none,
// the local S3 server that serve starts on its defaults.
func submitStorage(cfg *config.Config) (blob.S3Config, error) {
	if cfg.LocalStorage() {
		return blob.S3Config{
			Endpoint:        "http://" + loopback(cfg.LocalS3Addr),
			AccessKeyID:     cfg.LocalS3AccessKey,
			SecretAccessKey: cfg.LocalS3SecretKey,
		}, nil
	}
	if err := cfg.CheckStorage(); err != nil {
		return blob.S3Config{}, err
	}
	return blob.S3Config{
		AccountID: cfg.R2AccountID, Endpoint: cfg.R2Endpoint,
		AccessKeyID: cfg.R2AccessKeyID, SecretAccessKey: cfg.R2SecretAccessKey,
	}, nil
}

// loopback turns a listen address into one to dial: a server listening on
// all interfaces (":7070", "0.0.0.0:7070") is reached on 127.0.0.1.
func loopback(addr string) string {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return addr
	}
	if host == "" || host == "0.0.0.0" || host == "::" {
		host = "127.0.0.1"
	}
	return net.JoinHostPort(host, port)
}

// submitter runs one submit.
type submitter struct {
	opts     submitOptions
	store    blob.Store
	stdout   io.Writer
	stderr   io.Writer
	terminal bool // stderr is a terminal: redraw progress in place
}

// localFile is a file of DIR to upload.
type localFile struct {
	abs  string // absolute path
	rel  string // relative to DIR, with forward slashes
	size int64
}

// refusal is a file (or folder) that cannot be part of the batch.
type refusal struct {
	rel, reason string
}

func (s *submitter) run(ctx context.Context) error {
	o := s.opts
	prefix := "staging/" + o.batchID + "/"
	files, refused, skipped, err := scanFolder(o.dir, prefix, o.limits)
	if err != nil {
		return err
	}
	if len(skipped) > 0 {
		fmt.Fprintf(s.stderr, "skipping %d system %s: %s\n", len(skipped), plural(len(skipped), "file", "files"), strings.Join(skipped, ", "))
	}
	if len(refused) > 0 {
		fmt.Fprintf(s.stderr, "refused (nothing was uploaded):\n")
		for _, r := range refused {
			fmt.Fprintf(s.stderr, "  %s: %s\n", r.rel, r.reason)
		}
		return fmt.Errorf("%d %s refused; nothing was uploaded", len(refused), plural(len(refused), "entry", "entries"))
	}
	if len(files) == 0 {
		return fmt.Errorf("%s holds no files to submit", o.dir)
	}

	man := buildManifest(o.batchID, prefix, files, o.processing)
	now := time.Now().UTC()
	msg := manifest.QueueMessage{
		BatchID: o.batchID, ManifestR2Key: prefix + "_manifest.json", R2Prefix: prefix,
		Uploader: o.uploader, RootPath: o.rootPath, ParentPI: o.parentPI,
		TotalFiles: man.TotalFiles, TotalBytes: man.TotalBytes,
		UploadedAt: now, FinalizedAt: now,
		Metadata: map[string]any{"source": "orchestrator submit"},
		Priority: o.priority,
	}
	manBody, err := json.MarshalIndent(man, "", "  ")
	if err != nil {
		return err
	}
	// The orchestrator checks both the same way before doing any work; a
	// batch it would refuse must not be uploaded at all.
	if err := validateBatch(msg, manBody, o.limits); err != nil {
		return fmt.Errorf("nothing was uploaded: %w", err)
	}

	if err := s.preflight(ctx, msg.ManifestR2Key); err != nil {
		return err
	}
	fmt.Fprintf(s.stderr, "uploading %d %s (%s) to s3://%s/%s\n", len(files), plural(len(files), "file", "files"),
		humanBytes(man.TotalBytes), o.bucket, prefix)
	if err := s.upload(ctx, prefix, files); err != nil {
		return fmt.Errorf("uploading batch %s (it was not submitted; run submit again): %w", o.batchID, err)
	}
	if err := s.store.Put(ctx, o.bucket, msg.ManifestR2Key, bytes.NewReader(manBody), int64(len(manBody)), "application/json"); err != nil {
		return fmt.Errorf("uploading the manifest of batch %s (it was not submitted; run submit again): %w", o.batchID, err)
	}

	msg.FinalizedAt = time.Now().UTC()
	acc, err := s.post(ctx, msg)
	if err != nil {
		return err
	}
	fmt.Fprintln(s.stdout, o.batchID)
	if acc.Status != client.StatusPending {
		fmt.Fprintf(s.stderr, "batch %s was already known to the orchestrator (status %s)\n", o.batchID, acc.Status)
	} else {
		fmt.Fprintf(s.stderr, "submitted batch %s to %s\n", o.batchID, s.opts.api.URL())
	}
	if o.noWait {
		return nil
	}
	return s.follow(ctx)
}

// validateBatch checks the message and manifest exactly as the orchestrator
// will once they arrive.
func validateBatch(msg manifest.QueueMessage, manBody []byte, limits manifest.Limits) error {
	msgBody, err := json.Marshal(msg)
	if err != nil {
		return err
	}
	parsed, err := manifest.ParseQueueMessage(msgBody)
	if err != nil {
		return err
	}
	_, err = manifest.ParseManifest(manBody, parsed, limits)
	return err
}

// scanFolder lists the files of dir to upload, in lexical order, the
// entries that cannot be uploaded, each with its reason, and the system
// clutter it skipped.
//
// Hidden entries (a name starting with ".") are refused rather than
// skipped: a hidden file may matter to its owner (".notes.txt"), and
// uploading less than the folder holds without saying so would be worse
// than asking for it to be tidied. Only well-known operating system
// clutter, which nobody means to archive, is skipped silently (and counted).
func scanFolder(dir, prefix string, limits manifest.Limits) (files []localFile, refused []refusal, skipped []string, err error) {
	limits = limitsWithDefaults(limits)
	allowed := strings.Join(manifest.AllowedExtensions(), " ")
	var total int64
	err = filepath.WalkDir(dir, func(p string, d fs.DirEntry, walkErr error) error {
		if p == dir {
			return walkErr // an unreadable DIR ends the scan
		}
		rel, err := filepath.Rel(dir, p)
		if err != nil {
			return err
		}
		rel = filepath.ToSlash(rel)
		name := d.Name()
		refuse := func(reason string) error {
			refused = append(refused, refusal{rel: rel, reason: reason})
			if d.IsDir() {
				return filepath.SkipDir
			}
			return nil
		}
		if walkErr != nil {
			return refuse("cannot be read: " + walkErr.Error())
		}
		if d.IsDir() {
			switch {
			case isClutterDir(name):
				skipped = append(skipped, rel+"/")
				return filepath.SkipDir
			case strings.HasPrefix(name, "."):
				return refuse("hidden folder (remove or rename it to upload the folder)")
			}
			return nil
		}
		if isClutterFile(name) {
			skipped = append(skipped, rel)
			return nil
		}
		if strings.HasPrefix(name, ".") {
			return refuse("hidden file (remove or rename it to upload the folder)")
		}

		fi, err := d.Info()
		if err != nil {
			return refuse("cannot be read: " + err.Error())
		}
		if fi.Mode()&fs.ModeSymlink != 0 {
			target, err := os.Stat(p)
			switch {
			case err != nil:
				return refuse("broken symbolic link")
			case target.IsDir():
				return refuse("symbolic link to a folder (not followed)")
			}
			fi = target
		}
		if !fi.Mode().IsRegular() {
			return refuse("not a regular file")
		}
		switch ext := path.Ext(name); {
		case !utf8.ValidString(rel):
			return refuse("name is not valid UTF-8")
		case strings.IndexFunc(rel, unicode.IsControl) >= 0:
			return refuse("name contains control characters")
		case ext == "":
			return refuse("no file extension (allowed: " + allowed + ")")
		case !manifest.HasAllowedExtension(name):
			return refuse(fmt.Sprintf("extension %s is not allowed (allowed: %s)", ext, allowed))
		case fi.Size() > limits.MaxFileSize:
			return refuse(fmt.Sprintf("%s exceeds the per-file limit of %s (MAX_FILE_SIZE)",
				humanBytes(fi.Size()), humanBytes(limits.MaxFileSize)))
		case len(prefix)+len(rel) > maxKeyBytes:
			return refuse(fmt.Sprintf("path too long: object keys hold at most %d bytes", maxKeyBytes))
		}
		total += fi.Size()
		files = append(files, localFile{abs: p, rel: rel, size: fi.Size()})
		return nil
	})
	if err != nil {
		return nil, nil, nil, fmt.Errorf("reading %s: %w", dir, err)
	}
	if total > limits.MaxBatchSize {
		refused = append(refused, refusal{rel: ".", reason: fmt.Sprintf(
			"the files add up to %s, over the batch limit of %s (MAX_BATCH_SIZE)", humanBytes(total), humanBytes(limits.MaxBatchSize))})
	}
	return files, refused, skipped, nil
}

// limitsWithDefaults fills unset limits with the spec's.
func limitsWithDefaults(l manifest.Limits) manifest.Limits {
	def := manifest.DefaultLimits()
	if l.MaxFileSize <= 0 {
		l.MaxFileSize = def.MaxFileSize
	}
	if l.MaxBatchSize <= 0 {
		l.MaxBatchSize = def.MaxBatchSize
	}
	return l
}

// isClutterFile reports files operating systems and file managers leave
// behind, which nobody means to archive.
func isClutterFile(name string) bool {
	switch strings.ToLower(name) {
	case ".ds_store", ".localized", ".directory", "thumbs.db", "ehthumbs.db", "desktop.ini", "icon\r":
		return true
	}
	return strings.HasPrefix(name, "._") // AppleDouble resource forks
}

// isClutterDir is isClutterFile for folders.
func isClutterDir(name string) bool {
	switch name {
	case "__MACOSX", ".Spotlight-V100", ".Trashes", ".fseventsd", ".TemporaryItems", ".AppleDouble", "$RECYCLE.BIN":
		return true
	}
	return false
}

// contentTypes maps every allowed extension to its MIME type.
var contentTypes = map[string]string{
	".tif": "image/tiff", ".tiff": "image/tiff",
	".jpg": "image/jpeg", ".jpeg": "image/jpeg",
	".png": "image/png", ".gif": "image/gif", ".bmp": "image/bmp",
	".json": "application/json", ".xml": "application/xml",
	".txt": "text/plain", ".csv": "text/csv", ".md": "text/markdown",
	".pdf": "application/pdf",
}

// contentType is a file's MIME type by extension, ignoring case.
func contentType(name string) string {
	if ct, ok := contentTypes[strings.ToLower(path.Ext(name))]; ok {
		return ct
	}
	return "application/octet-stream"
}

// buildManifest groups the files by folder, every folder with the same
// processing switches.
func buildManifest(batchID, prefix string, files []localFile, cfg manifest.ProcessingConfig) manifest.Manifest {
	groups := make([]manifest.DirectoryGroup, 0, len(files))
	for _, f := range files {
		logical := "/" + f.rel
		groups = append(groups, manifest.DirectoryGroup{
			DirectoryPath:    path.Dir(logical),
			ProcessingConfig: cfg,
			Files: []manifest.FileInfo{{
				R2Key: prefix + f.rel, LogicalPath: logical, FileName: path.Base(logical),
				FileSize: f.size, ContentType: contentType(f.rel),
			}},
		})
	}
	return manifest.Build(batchID, groups)
}

// preflight checks, before anything is uploaded, that the orchestrator
// answers and that the bucket is reachable and holds no batch of this ID.
func (s *submitter) preflight(ctx context.Context, manifestKey string) error {
	var apiErr *client.Error
	switch err := s.opts.api.Health(ctx); {
	case errors.As(err, &apiErr):
		return fmt.Errorf("the orchestrator at %s is not healthy: %s %s", s.opts.api.URL(), apiErr.Status, apiErr.Body)
	case err != nil:
		return fmt.Errorf("the orchestrator does not answer at %s (start it with `make run`, or pass -url): %w", s.opts.api.URL(), err)
	}
	exists, err := s.store.Exists(ctx, s.opts.bucket, manifestKey)
	if err != nil {
		return fmt.Errorf("checking the staging bucket %s: %w", s.opts.bucket, err)
	}
	if exists {
		return fmt.Errorf("batch %s already has a manifest at s3://%s/%s; pass another -batch-id", s.opts.batchID, s.opts.bucket, manifestKey)
	}
	return nil
}

// upload puts the files under prefix, a few at a time, showing progress.
func (s *submitter) upload(ctx context.Context, prefix string, files []localFile) error {
	var total int64
	for _, f := range files {
		total += f.size
	}
	var doneFiles, doneBytes atomic.Int64
	draw := func() {
		n, b := doneFiles.Load(), doneBytes.Load()
		s.progress(fmt.Sprintf("uploading %s %d/%d files, %s of %s", bar(b, total), n, len(files), humanBytes(b), humanBytes(total)))
	}
	stop := make(chan struct{})
	drawn := make(chan struct{})
	go func() {
		defer close(drawn)
		if !s.terminal {
			return
		}
		tick := time.NewTicker(200 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-stop:
				return
			case <-tick.C:
				draw()
			}
		}
	}()

	start := time.Now()
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(uploadConcurrency)
	for _, f := range files {
		g.Go(func() error {
			if err := s.uploadFile(gctx, prefix+f.rel, f); err != nil {
				return err
			}
			doneFiles.Add(1)
			doneBytes.Add(f.size)
			return nil
		})
	}
	err := g.Wait()
	close(stop)
	<-drawn
	if err != nil {
		s.endProgress()
		return err
	}
	if s.terminal {
		draw()
		s.endProgress()
	}
	took := time.Since(start)
	if took < time.Second {
		took = took.Round(time.Millisecond)
	} else {
		took = took.Round(100 * time.Millisecond)
	}
	fmt.Fprintf(s.stderr, "uploaded %d %s in %s\n", len(files), plural(len(files), "file", "files"), took)
	return nil
}

// uploadFile puts one file, refusing one that changed since the scan (its
// size is in the manifest already).
func (s *submitter) uploadFile(ctx context.Context, key string, f localFile) error {
	file, err := os.Open(f.abs)
	if err != nil {
		return err
	}
	defer file.Close()
	fi, err := file.Stat()
	if err != nil {
		return err
	}
	if fi.Size() != f.size {
		return fmt.Errorf("%s changed while being submitted (%d bytes, was %d)", f.rel, fi.Size(), f.size)
	}
	return s.store.Put(ctx, s.opts.bucket, key, io.NewSectionReader(file, 0, f.size), f.size, contentType(f.rel))
}

// post hands the batch to the orchestrator, whose answer says whether it
// knew the batch already.
func (s *submitter) post(ctx context.Context, msg manifest.QueueMessage) (client.Receipt, error) {
	acc, err := s.opts.api.Submit(ctx, msg)
	var apiErr *client.Error
	var urlErr *url.Error
	switch {
	case errors.As(err, &apiErr):
		return acc, fmt.Errorf("the orchestrator refused batch %s: %s: %s", msg.BatchID, apiErr.Status, apiErr.Message)
	case errors.As(err, &urlErr):
		return acc, fmt.Errorf("submitting batch %s to %s (its files are uploaded but it was not submitted; run submit again): %w", msg.BatchID, s.opts.api.URL(), err)
	}
	return acc, err
}

// follow polls the batch's status, showing progress, until DONE or ERROR.
func (s *submitter) follow(ctx context.Context) error {
	id := s.opts.batchID
	started := time.Now()
	var (
		last       string    // last line shown
		lastShown  time.Time // when it was shown (plain output)
		failingFor time.Time // start of the current run of failed polls
		doneAt     time.Time // when DONE was first seen
	)
	tick := time.NewTicker(s.opts.pollInterval)
	defer tick.Stop()
	for {
		st, err := s.status(ctx)
		var line string
		switch {
		case ctx.Err() != nil:
			s.endProgress()
			return fmt.Errorf("stopped following batch %s; it carries on (see %s/status/%s)", id, s.opts.api.URL(), id)
		case err != nil:
			if failingFor.IsZero() {
				failingFor = time.Now()
			}
			if time.Since(failingFor) > lostContactAfter {
				s.endProgress()
				return fmt.Errorf("lost contact with the orchestrator while following batch %s: %w", id, err)
			}
			line = fmt.Sprintf("%s (retrying: %v)", last, err)
		default:
			failingFor = time.Time{}
			line = statusLine(st)
		}
		if s.terminal {
			s.progress(fmt.Sprintf("%s  %s", line, time.Since(started).Round(time.Second)))
		} else if line != last || time.Since(lastShown) >= 10*time.Second {
			fmt.Fprintln(s.stderr, line)
			lastShown = time.Now()
		}
		if err == nil {
			last = line
			switch st.Status {
			case client.StatusError:
				s.endProgress()
				msg := "(no error message)"
				if st.Error != nil {
					msg = *st.Error
				}
				return fmt.Errorf("batch %s ended in ERROR: %s", id, msg)
			case client.StatusDone:
				// The final manifest is delivered just after DONE.
				if doneAt.IsZero() {
					doneAt = time.Now()
				}
				delivering := st.Ingest.Status == client.IngestPending || st.Ingest.Status == client.IngestNone
				if !delivering || time.Since(doneAt) > deliveryWait {
					s.endProgress()
					return s.report(ctx, st)
				}
			}
		}
		select {
		case <-ctx.Done():
		case <-tick.C:
		}
	}
}

// status reads the batch's status document.
func (s *submitter) status(ctx context.Context) (client.Status, error) {
	st, err := s.opts.api.Status(ctx, s.opts.batchID)
	var apiErr *client.Error
	if errors.As(err, &apiErr) {
		return st, fmt.Errorf("status answered %s: %s", apiErr.Status, apiErr.Body)
	}
	return st, err
}

// statusLine is one line of progress: the status and, during a phase, its
// tasks done out of all.
func statusLine(st client.Status) string {
	p := st.Progress
	switch st.Status {
	case client.StatusPending:
		return "PENDING: waiting for the batch to start"
	case client.StatusDone:
		if st.Ingest.Status == client.IngestPending || st.Ingest.Status == client.IngestNone {
			return "DONE: delivering the final manifest"
		}
		return client.StatusDone
	case client.StatusError:
		return client.StatusError
	}
	unit := "tasks"
	if cur, ok := st.Current(); ok && cur.Unit != "" {
		unit = cur.Unit // what the phase's executor counts: tasks, refs, documents
	}
	line := fmt.Sprintf("%s %s %d/%d %s", st.Status, bar(p.TasksCompleted+p.TasksFailed, p.TasksTotal), p.TasksCompleted+p.TasksFailed, p.TasksTotal, unit)
	if p.TasksFailed > 0 {
		line += fmt.Sprintf(" (%d failed)", p.TasksFailed)
	}
	return line
}

// bar draws done out of total as "[#####---------------]".
func bar(done, total int64) string {
	const width = 20
	filled := 0
	if total > 0 {
		filled = int(min(done, total) * width / total)
	}
	return "[" + strings.Repeat("#", filled) + strings.Repeat("-", width-filled) + "]"
}

// progress redraws the progress line in place (terminal only).
func (s *submitter) progress(line string) {
	fmt.Fprintf(s.stderr, "\r%s\x1b[K", line)
}

// endProgress ends the line progress was drawn on (terminal only).
func (s *submitter) endProgress() {
	if s.terminal {
		fmt.Fprintln(s.stderr)
	}
}

// report prints the final file list of a DONE batch from the processed
// manifest the orchestrator leaves in the bucket when it has no ingest
// service to deliver to.
func (s *submitter) report(ctx context.Context, st client.Status) error {
	key := "staging/" + s.opts.batchID + "/_manifest.processed.json"
	data, err := s.store.Get(ctx, s.opts.bucket, key)
	if errors.Is(err, blob.ErrNotFound) {
		fmt.Fprintf(s.stderr, "batch %s is DONE. Its final manifest is not at s3://%s/%s: the orchestrator delivered it to its ingest service (WORKER_URL) instead", s.opts.batchID, s.opts.bucket, key)
		if st.Ingest.Status != "" {
			fmt.Fprintf(s.stderr, " (delivery %s", st.Ingest.Status)
			if st.Ingest.LastError != nil {
				fmt.Fprintf(s.stderr, ": %s", *st.Ingest.LastError)
			}
			fmt.Fprint(s.stderr, ")")
		}
		fmt.Fprintln(s.stderr, ". Final status:")
		var out bytes.Buffer
		if json.Indent(&out, st.Raw, "", "  ") != nil {
			out.Write(st.Raw)
		}
		fmt.Fprintln(s.stdout, out.String())
		return nil
	}
	if err != nil {
		return fmt.Errorf("batch %s is DONE, but reading its final manifest failed: %w", s.opts.batchID, err)
	}
	man, err := decodeProcessed(data)
	if err != nil {
		return fmt.Errorf("batch %s is DONE, but its final manifest at s3://%s/%s is unreadable: %w", s.opts.batchID, s.opts.bucket, key, err)
	}

	fmt.Fprintf(s.stderr, "batch %s is DONE: %d %s, %s (s3://%s/%s)\n", s.opts.batchID, man.TotalFiles,
		plural(int(man.TotalFiles), "file", "files"), humanBytes(man.TotalBytes), s.opts.bucket, key)
	tw := tabwriter.NewWriter(s.stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "PATH\tTYPE\tSIZE\tTAGS")
	for _, d := range man.Directories {
		for _, f := range d.Files {
			tags := strings.Join(f.PreprocessorTags, ",")
			if tags == "" {
				tags = "-"
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", f.LogicalPath, f.ContentType, humanBytes(f.FileSize), tags)
		}
	}
	return tw.Flush()
}

// decodeProcessed reads the processed manifest, which is the body sent to
// ingest ({"batch_id": ..., "manifest": {...}}) or a bare manifest.
func decodeProcessed(data []byte) (manifest.Manifest, error) {
	var wrapped struct {
		Manifest *manifest.Manifest `json:"manifest"`
	}
	if err := json.Unmarshal(data, &wrapped); err != nil {
		return manifest.Manifest{}, err
	}
	if wrapped.Manifest != nil {
		return *wrapped.Manifest, nil
	}
	var m manifest.Manifest
	err := json.Unmarshal(data, &m)
	return m, err
}

// isTerminal reports whether w is a terminal, where progress is redrawn in
// place instead of printed line after line.
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	fi, err := f.Stat()
	return err == nil && fi.Mode()&os.ModeCharDevice != 0
}

// humanBytes formats a size in decimal units: "532 B", "1.5 MB".
func humanBytes(n int64) string {
	const unit = 1000
	if n < unit {
		return fmt.Sprintf("%d B", n)
	}
	div, exp := int64(unit), 0
	for m := n / unit; m >= unit; m /= unit {
		div *= unit
		exp++
	}
	return fmt.Sprintf("%.1f %cB", float64(n)/float64(div), "kMGTPE"[exp])
}

// plural picks the singular or plural form for n.
func plural(n int, one, many string) string {
	if n == 1 {
		return one
	}
	return many
}
