// Package worker is the shared library of the worker programs that the
// orchestrator's machines run (cmd/worker): one short-lived process per
// task, processing one file and reporting back with one callback.
//
// It holds what every worker needs: the environment contract (ParseEnv),
// the object store (URLStore: presigned URLs, no credentials), downloads
// and never-overwriting uploads, timings, and the callback (PostCallback)
// with Run, which guarantees that a worker always reports, whether its
// work succeeded, failed or panicked. The workers themselves are in
// tiffworker, imageworker and pdfworker.
//
// # Environment
//
// Set identically by the Fly launcher and by the local machine runner. A
// worker gets no storage credentials: it reaches objects through presigned
// URLs only, valid until its task's deadline plus a margin.
//
//	WORKER_PROTOCOL          optional, the orchestrator's protocol version (package
//	                         protocol; unset: 1, an orchestrator older than versions).
//	                         The worker sends its own, protocol.Current, as the
//	                         "Worker-Protocol" header of every request
//	TASK_ID, BATCH_ID        the task and batch, echoed in the callback
//	CALLBACK_URL             where the callback is POSTed
//	CALLBACK_TOKEN           sent as "Authorization: Bearer <token>"
//	TRACEPARENT              optional, the task's trace context (W3C), sent as the
//	                         "traceparent" header of the callbacks when set
//	CALLBACK_RETRY_WINDOW    optional, milliseconds, default 900000 (15 min): how long
//	                         the callback is retried while the orchestrator is
//	                         unreachable or answers 5xx or 429
//	TASK_DEADLINE            optional, RFC 3339: the task's deadline, until which
//	                         storage and URL requests retry transient failures
//	                         (2 minutes when unset)
//	TASK_ATTEMPT             optional, the attempt's name: writes that replace (PUT)
//	                         go to its staging area, "<batch prefix>.attempts/<attempt>/"
//	                         in place of the batch prefix (phases.AttemptKey); the
//	                         orchestrator promotes them to their keys when the
//	                         attempt's success is applied
//	INPUT_R2_KEY             the object to process, in R2_BUCKET (for logs and results)
//	INPUT_URL                a presigned GET of that object
//	OUTPUT_URLS              optional, the presigned requests for the objects the
//	                         worker usually writes, signed together with INPUT_URL,
//	                         one line each: "METHOD BUCKET KEY SIGNATURE" (METHOD
//	                         PUT or PUT_IF_ABSENT; BUCKET and KEY escaped as in a
//	                         URL path; SIGNATURE the signature's 32 bytes in
//	                         unpadded base64url). The request's URL is INPUT_URL
//	                         with the path /BUCKET/KEY, the method's
//	                         X-Amz-SignedHeaders and the signature in hex as
//	                         X-Amz-Signature; a PUT_IF_ABSENT sends
//	                         "If-None-Match: *" (see blob.ParseCompact). Any other
//	                         URL the worker needs (more pages, a taken name) it
//	                         asks for at POST CALLBACK_URL/urls (see URLStore)
//	R2_BUCKET                the staging bucket's name (input and TIFF outputs)
//	INPUT_CID                optional, the manifest's cid of the input (image worker: ref_data.ipfs_cid)
//	INPUT_CONTENT_TYPE       optional, the manifest's content type (image worker: ref_data.type; sniffed if unset)
//	INPUT_FILE_NAME          optional, the manifest's file name (image worker: ref_data.filename; base of the key if unset)
//	JPEG_QUALITY             optional, 1-100, default 90: quality of every JPEG written
//
// Image worker only:
//
//	ARCHIVE_BUCKET           the original is uploaded there under the same key
//	CDN_BUCKET               optional, default "arke-cdn": where variants are uploaded
//	CDN_PUBLIC_URL           base URL serving CDN_BUCKET: CDN_PUBLIC_URL + "/" + key
//	                         must fetch the object at key (for a path-style local S3
//	                         server that is http://host:port/<CDN_BUCKET>)
//	VARIANT_SIZES            optional, default "200,800,1600": longest side in pixels of
//	                         the thumbnail, medium and large variants, ascending
//
// PDF worker only (read by pdfworker.ParseSettings):
//
//	PDF_RENDER_DPI           optional, 1-1200, default 200: resolution of the page JPEGs
//	PDF_MAX_PAGES            optional, at least 1, default 2000: a longer PDF fails its task
package worker

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/arke-institute/orchestrator/blob"
	"github.com/arke-institute/orchestrator/phases"
	"github.com/arke-institute/orchestrator/worker/protocol"
)

// Kind is which worker program runs: it decides which variables are
// required.
type Kind string

// The worker kinds, also the subcommands of cmd/worker.
const (
	KindTIFF  Kind = "tiff"
	KindImage Kind = "image"
	KindPDF   Kind = "pdf"
)

// Defaults for optional variables.
const (
	DefaultJPEGQuality = 90
	DefaultCDNBucket   = "arke-cdn"
)

// Variant is one size of image the image worker makes.
type Variant struct {
	// Name is "thumbnail", "medium" or "large": the variant's file name
	// (Name + ".jpg") and its key in ref.json's variants map.
	Name string
	// Size is the longest side in pixels. Images are never enlarged: a
	// variant of a smaller image has the image's own size.
	Size int
}

// DefaultVariants are the variant sizes when VARIANT_SIZES is unset.
var DefaultVariants = []Variant{{"thumbnail", 200}, {"medium", 800}, {"large", 1600}}

// variantNames are the names VARIANT_SIZES assigns, in order.
var variantNames = phases.ImageVariants

// Input is the file a task processes.
type Input struct {
	// Key is the object's key in Config.Bucket (INPUT_R2_KEY).
	Key string
	// CID, ContentType and FileName are the manifest's values for the file
	// (INPUT_CID, INPUT_CONTENT_TYPE, INPUT_FILE_NAME); each may be empty.
	CID         string
	ContentType string
	FileName    string
}

// Config is a worker's environment, read once by cmd/worker.
type Config struct {
	Kind Kind
	// Orchestrator is the orchestrator's protocol version
	// (WORKER_PROTOCOL): what it takes of a worker, from the version
	// before it to its own.
	Orchestrator int
	Callback     Callback
	Input        Input
	// InputURL is the presigned GET of the input (INPUT_URL).
	InputURL string
	// OutputURLs are the presigned requests for the usual outputs
	// (OUTPUT_URLS).
	OutputURLs []blob.Presigned
	// Bucket is the staging bucket (R2_BUCKET): input, TIFF outputs and
	// ref.json files.
	Bucket string
	// JPEGQuality is the quality of every JPEG written, 1-100.
	JPEGQuality int

	// ArchiveBucket, CDNBucket, CDNPublicURL and Variants are the image
	// worker's (see the package documentation).
	ArchiveBucket string
	CDNBucket     string
	CDNPublicURL  string
	Variants      []Variant
}

// EnvError lists every problem with the environment at once, so that one
// failed run shows everything to fix.
type EnvError struct {
	Missing []string // required variables that are unset or empty
	Invalid []string // "NAME: reason"
}

func (e *EnvError) Error() string {
	var parts []string
	if len(e.Missing) > 0 {
		parts = append(parts, "missing environment variables: "+strings.Join(e.Missing, ", "))
	}
	parts = append(parts, e.Invalid...)
	return strings.Join(parts, "; ")
}

// ParseEnv reads a worker's configuration through getenv (os.Getenv in
// cmd/worker). It fills every field it can even when it returns an error
// (an *EnvError), so that the callback can still report the problem when
// the callback variables themselves are present (Callback.Complete).
func ParseEnv(kind Kind, getenv func(string) string) (Config, error) {
	e := &EnvError{}
	str := func(name string, required bool) string {
		v := strings.TrimSpace(getenv(name))
		if v == "" && required {
			e.Missing = append(e.Missing, name)
		}
		return v
	}

	cfg := Config{Kind: kind}
	cfg.Callback = Callback{
		TaskID:  str("TASK_ID", true),
		BatchID: str("BATCH_ID", true),
		URL:     str("CALLBACK_URL", true),
		Token:   str("CALLBACK_TOKEN", true),
		Backoff: DefaultBackoff,
		// Optional, and passed on as it is: the orchestrator's tracing
		// reads it.
		Traceparent: str("TRACEPARENT", false),
	}
	if v := str("CALLBACK_RETRY_WINDOW", false); v != "" {
		ms, err := strconv.ParseInt(v, 10, 64)
		if err != nil || ms <= 0 {
			e.Invalid = append(e.Invalid, fmt.Sprintf("CALLBACK_RETRY_WINDOW: %q is not a positive number of milliseconds", v))
		} else {
			cfg.Callback.Backoff.Window = time.Duration(ms) * time.Millisecond
		}
	}
	if v := str("TASK_DEADLINE", false); v != "" {
		d, err := time.Parse(time.RFC3339, v)
		if err != nil {
			e.Invalid = append(e.Invalid, fmt.Sprintf("TASK_DEADLINE: %q is not an RFC 3339 time", v))
		} else {
			cfg.Callback.Deadline = d
		}
	}
	cfg.Callback.Attempt = str("TASK_ATTEMPT", false)
	var err error
	if cfg.Orchestrator, err = protocol.Parse(str(protocol.EnvVar, false)); err != nil {
		e.Invalid = append(e.Invalid, protocol.EnvVar+": "+err.Error())
	}
	cfg.Input = Input{
		Key:         str("INPUT_R2_KEY", true),
		CID:         str("INPUT_CID", false),
		ContentType: str("INPUT_CONTENT_TYPE", false),
		FileName:    str("INPUT_FILE_NAME", false),
	}
	cfg.Bucket = str("R2_BUCKET", true)
	cfg.InputURL = str("INPUT_URL", true)
	if u := cfg.InputURL; u != "" && !strings.HasPrefix(u, "http://") && !strings.HasPrefix(u, "https://") {
		// Never quote it: it carries a signature.
		e.Invalid = append(e.Invalid, "INPUT_URL: not an http:// or https:// URL")
	}
	// OUTPUT_URLS is read with INPUT_URL, whose URL it shares: without
	// that, the missing variable is the problem to report.
	if v := str("OUTPUT_URLS", false); v != "" && cfg.InputURL != "" && cfg.Bucket != "" && cfg.Input.Key != "" {
		var err error
		if cfg.OutputURLs, err = blob.ParseCompact(cfg.inputPresigned(), v); err != nil {
			e.Invalid = append(e.Invalid, "OUTPUT_URLS: "+err.Error())
		}
	}

	cfg.JPEGQuality = DefaultJPEGQuality
	if v := str("JPEG_QUALITY", false); v != "" {
		q, err := strconv.Atoi(v)
		if err != nil || q < 1 || q > 100 {
			e.Invalid = append(e.Invalid, fmt.Sprintf("JPEG_QUALITY: %q is not a whole number from 1 to 100", v))
		} else {
			cfg.JPEGQuality = q
		}
	}

	if kind == KindImage {
		cfg.ArchiveBucket = str("ARCHIVE_BUCKET", true)
		cfg.CDNBucket = str("CDN_BUCKET", false)
		if cfg.CDNBucket == "" {
			cfg.CDNBucket = DefaultCDNBucket
		}
		cfg.CDNPublicURL = strings.TrimRight(str("CDN_PUBLIC_URL", true), "/")
		if u := cfg.CDNPublicURL; u != "" && !strings.HasPrefix(u, "http://") && !strings.HasPrefix(u, "https://") {
			e.Invalid = append(e.Invalid, fmt.Sprintf("CDN_PUBLIC_URL: %q is not an http:// or https:// URL", u))
		}
		cfg.Variants = slices.Clone(DefaultVariants)
		if v := str("VARIANT_SIZES", false); v != "" {
			variants, err := parseVariantSizes(v)
			if err != nil {
				e.Invalid = append(e.Invalid, "VARIANT_SIZES: "+err.Error())
			} else {
				cfg.Variants = variants
			}
		}
	}

	if len(e.Missing) > 0 || len(e.Invalid) > 0 {
		return cfg, e
	}
	return cfg, nil
}

// parseVariantSizes reads "200,800,1600": the thumbnail, medium and large
// longest sides, ascending.
func parseVariantSizes(s string) ([]Variant, error) {
	fields := strings.Split(s, ",")
	if len(fields) != len(variantNames) {
		return nil, fmt.Errorf("%q must be %d sizes (%s), e.g. \"200,800,1600\"", s, len(variantNames), strings.Join(variantNames, ", "))
	}
	out := make([]Variant, len(fields))
	for i, f := range fields {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n < 1 || n > 65535 {
			return nil, fmt.Errorf("%q: %q is not a size in pixels from 1 to 65535", s, f)
		}
		if i > 0 && n <= out[i-1].Size {
			return nil, fmt.Errorf("%q: sizes must ascend (%s)", s, strings.Join(variantNames, " < "))
		}
		out[i] = Variant{Name: variantNames[i], Size: n}
	}
	return out, nil
}

// NewStore returns the store of the configuration's URLs (see URLStore),
// which asks for more at CALLBACK_URL/urls.
func (c Config) NewStore(log *slog.Logger) *URLStore {
	return NewURLStore(c.Callback, append([]blob.Presigned{c.inputPresigned()}, c.OutputURLs...), nil, log)
}

// inputPresigned is INPUT_URL's request. Its expiry is unknown (zero): it
// is used first.
func (c Config) inputPresigned() blob.Presigned {
	return blob.Presigned{Object: blob.Object{Method: blob.MethodGet, Bucket: c.Bucket, Key: c.Input.Key}, URL: c.InputURL}
}

// Task is what a worker program gets for its one task: the common
// configuration, the environment for its own settings, the store and a
// logger.
type Task struct {
	Config Config
	Getenv func(string) string
	Store  blob.Store
	Log    *slog.Logger
}

// Program does one task's work and returns its success callback body
// (see Run). cmd/worker runs the program of each registered phase's worker
// kind: package worker/<kind>worker exports it as Run.
type Program func(ctx context.Context, t Task) (any, error)
