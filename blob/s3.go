package blob

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"sync/atomic"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/smithy-go"
)

// DefaultRegion is the region R2 expects in request signatures.
const DefaultRegion = "auto"

// S3Config configures an S3 store. cmd/ fills it from the environment
// variables named in each field's comment.
type S3Config struct {
	// AccountID is the Cloudflare account (R2_ACCOUNT_ID); the endpoint is
	// https://{AccountID}.r2.cloudflarestorage.com.
	AccountID string
	// Endpoint (R2_ENDPOINT) overrides the endpoint built from AccountID,
	// for local S3 servers and tests, e.g. http://127.0.0.1:7070.
	Endpoint string
	// AccessKeyID (R2_ACCESS_KEY_ID) and SecretAccessKey
	// (R2_SECRET_ACCESS_KEY) are the static credentials requests are signed
	// with (SigV4).
	AccessKeyID     string
	SecretAccessKey string
	// Region is the signing region; "auto" (DefaultRegion) when empty.
	Region string
	// HTTPClient optionally replaces the SDK's default HTTP client (which
	// has sensible dial and TLS timeouts).
	HTTPClient *http.Client `json:"-"`
}

// S3 is a Store on an S3-compatible API, configured for Cloudflare R2.
type S3 struct {
	client    *s3.Client
	presigner *presigner
	// noConditionalPut is set once the server answers If-None-Match with
	// 501 Not Implemented, so later PutIfAbsent calls go straight to the
	// HEAD-then-PUT fallback.
	noConditionalPut atomic.Bool
}

var _ Store = (*S3)(nil)

// NewS3 validates cfg and returns a store. It reads no environment
// variables or shared AWS config files: the client is built from cfg alone,
// so the same config always talks to the same place as the same identity.
func NewS3(cfg S3Config) (*S3, error) {
	return newS3(cfg)
}

func newS3(cfg S3Config, optFns ...func(*s3.Options)) (*S3, error) {
	endpoint, err := cfg.endpoint()
	if cfg.AccessKeyID == "" {
		err = errors.Join(err, errors.New("R2_ACCESS_KEY_ID is required"))
	}
	if cfg.SecretAccessKey == "" {
		err = errors.Join(err, errors.New("R2_SECRET_ACCESS_KEY is required"))
	}
	if err != nil {
		return nil, fmt.Errorf("configuring s3 store: %w", err)
	}
	region := cfg.Region
	if region == "" {
		region = DefaultRegion
	}

	opts := s3.Options{
		Region:       region,
		BaseEndpoint: aws.String(endpoint),
		// R2 and local servers address buckets by path, not by subdomain.
		UsePathStyle: true,
		Credentials: aws.NewCredentialsCache(credentials.NewStaticCredentialsProvider(
			cfg.AccessKeyID, cfg.SecretAccessKey, "")),
		// Since s3 v1.73 the SDK sends CRC32 checksums as aws-chunked
		// trailers by default, which R2 and most S3-compatible servers
		// reject. Send and check checksums only where the API demands them.
		RequestChecksumCalculation: aws.RequestChecksumCalculationWhenRequired,
		ResponseChecksumValidation: aws.ResponseChecksumValidationWhenRequired,
	}
	if cfg.HTTPClient != nil {
		opts.HTTPClient = cfg.HTTPClient
	}
	p, err := newPresigner(endpoint, region, cfg.AccessKeyID, cfg.SecretAccessKey)
	if err != nil {
		return nil, fmt.Errorf("configuring s3 store: %w", err)
	}
	return &S3{client: s3.New(opts, optFns...), presigner: p}, nil
}

// endpoint returns the base endpoint URL: Endpoint if set, else the R2
// endpoint of AccountID.
func (cfg S3Config) endpoint() (string, error) {
	if cfg.Endpoint != "" {
		u, err := url.Parse(cfg.Endpoint)
		if err != nil {
			// The parse error quotes the URL, which may hold userinfo.
			return "", errors.New("R2_ENDPOINT is not a valid URL")
		}
		if (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return "", fmt.Errorf("R2_ENDPOINT %q must be an http:// or https:// URL with a host", u.Redacted())
		}
		return cfg.Endpoint, nil
	}
	if cfg.AccountID == "" {
		return "", errors.New("R2_ENDPOINT or R2_ACCOUNT_ID is required")
	}
	for _, r := range cfg.AccountID {
		if (r < 'a' || r > 'z') && (r < 'A' || r > 'Z') && (r < '0' || r > '9') && r != '-' {
			return "", errors.New("R2_ACCOUNT_ID must contain only letters, digits and hyphens")
		}
	}
	return "https://" + cfg.AccountID + ".r2.cloudflarestorage.com", nil
}

// Get implements Store.
func (s *S3) Get(ctx context.Context, bucket, key string) ([]byte, error) {
	out, err := s.client.GetObject(ctx, &s3.GetObjectInput{
		Bucket: aws.String(bucket),
		Key:    aws.String(key),
	})
	if err != nil {
		return nil, wrapErr("getting", bucket, key, err)
	}
	defer out.Body.Close()
	var buf bytes.Buffer
	if n := aws.ToInt64(out.ContentLength); n > 0 && n <= 1<<30 {
		buf.Grow(int(n))
	}
	if _, err := buf.ReadFrom(out.Body); err != nil {
		return nil, wrapErr("reading", bucket, key, err)
	}
	return buf.Bytes(), nil
}

// Open implements Store.
func (s *S3) Open(ctx context.Context, bucket, key string) (io.ReadCloser, int64, error) {
	out, err := s.client.GetObject(ctx, &s3.GetObjectInput{
		Bucket: aws.String(bucket),
		Key:    aws.String(key),
	})
	if err != nil {
		return nil, 0, wrapErr("opening", bucket, key, err)
	}
	size := int64(-1)
	if out.ContentLength != nil {
		size = *out.ContentLength
	}
	return out.Body, size, nil
}

// Put implements Store.
func (s *S3) Put(ctx context.Context, bucket, key string, body io.ReadSeeker, size int64, contentType string) error {
	in, err := putInput(bucket, key, body, size, contentType)
	if err != nil {
		return wrapErr("putting", bucket, key, err)
	}
	if _, err := s.client.PutObject(ctx, in); err != nil {
		return wrapErr("putting", bucket, key, err)
	}
	return nil
}

// PutIfAbsent implements Store with a conditional PUT (If-None-Match: "*"),
// which R2 and S3 apply atomically: of two writers racing on one key, exactly
// one succeeds.
//
// A server that answers the condition with 501 Not Implemented gets a HEAD
// then an unconditional PUT instead. That fallback is racy: a writer that
// creates the key between the HEAD and the PUT is overwritten. Callers that
// rely on first-writer-wins must run against a server with conditional
// writes (R2 and versitygw have them).
//
// The SDK retries a request whose answer was lost (a timeout, a reset
// connection); if the lost attempt had landed, the retry reports ErrExists
// for this call's own object. Callers for which that matters compare the
// stored object with what they wrote.
func (s *S3) PutIfAbsent(ctx context.Context, bucket, key string, body io.ReadSeeker, size int64, contentType string) error {
	const op = "putting (if absent)"
	start, err := body.Seek(0, io.SeekCurrent)
	if err != nil {
		return wrapErr(op, bucket, key, fmt.Errorf("seeking body: %w", err))
	}
	in, err := putInput(bucket, key, body, size, contentType)
	if err != nil {
		return wrapErr(op, bucket, key, err)
	}

	if !s.noConditionalPut.Load() {
		in.IfNoneMatch = aws.String("*")
		_, err := s.client.PutObject(ctx, in)
		switch {
		case err == nil:
			return nil
		case isPreconditionFailed(err):
			return wrapErr(op, bucket, key, fmt.Errorf("%w: %w", ErrExists, err))
		case !isNotImplemented(err):
			return wrapErr(op, bucket, key, err)
		}
		s.noConditionalPut.Store(true)
		in.IfNoneMatch = nil
		if _, err := body.Seek(start, io.SeekStart); err != nil {
			return wrapErr(op, bucket, key, fmt.Errorf("rewinding body: %w", err))
		}
	}

	exists, err := s.Exists(ctx, bucket, key)
	if err != nil {
		return err
	}
	if exists {
		return wrapErr(op, bucket, key, ErrExists)
	}
	if _, err := s.client.PutObject(ctx, in); err != nil {
		return wrapErr(op, bucket, key, err)
	}
	return nil
}

// Exists implements Store.
func (s *S3) Exists(ctx context.Context, bucket, key string) (bool, error) {
	_, err := s.client.HeadObject(ctx, &s3.HeadObjectInput{
		Bucket: aws.String(bucket),
		Key:    aws.String(key),
	})
	if err == nil {
		return true, nil
	}
	if isNotFound(err) {
		return false, nil
	}
	return false, wrapErr("checking", bucket, key, err)
}

// Copy implements Store. S3 copies at most 5 GiB in one request; larger
// objects would need a multipart copy, which nothing here needs yet.
func (s *S3) Copy(ctx context.Context, srcBucket, srcKey, dstBucket, dstKey string) error {
	_, err := s.client.CopyObject(ctx, &s3.CopyObjectInput{
		Bucket:     aws.String(dstBucket),
		Key:        aws.String(dstKey),
		CopySource: aws.String(copySource(srcBucket, srcKey)),
	})
	if err != nil {
		return wrapErrf(err, "copying s3://%s/%s to s3://%s/%s", srcBucket, srcKey, dstBucket, dstKey)
	}
	return nil
}

// EnsureBucket implements Store. It checks with HEAD first so credentials
// scoped to existing buckets (no permission to create) still pass.
func (s *S3) EnsureBucket(ctx context.Context, bucket string) error {
	_, err := s.client.HeadBucket(ctx, &s3.HeadBucketInput{Bucket: aws.String(bucket)})
	if err == nil {
		return nil
	}
	if !isNotFound(err) {
		return fmt.Errorf("checking bucket s3://%s: %w", bucket, err)
	}
	_, err = s.client.CreateBucket(ctx, &s3.CreateBucketInput{Bucket: aws.String(bucket)})
	if err == nil || hasCode(err, "BucketAlreadyOwnedByYou") {
		return nil
	}
	if hasCode(err, "BucketAlreadyExists") {
		// Another process created it between our HEAD and CREATE, or it
		// belongs to someone else: only the latter fails this HEAD.
		if _, headErr := s.client.HeadBucket(ctx, &s3.HeadBucketInput{Bucket: aws.String(bucket)}); headErr == nil {
			return nil
		}
	}
	return fmt.Errorf("creating bucket s3://%s: %w", bucket, err)
}

// putInput builds a PutObject request, measuring the body if size < 0.
func putInput(bucket, key string, body io.ReadSeeker, size int64, contentType string) (*s3.PutObjectInput, error) {
	if size < 0 {
		cur, err := body.Seek(0, io.SeekCurrent)
		if err != nil {
			return nil, fmt.Errorf("measuring body: %w", err)
		}
		end, err := body.Seek(0, io.SeekEnd)
		if err != nil {
			return nil, fmt.Errorf("measuring body: %w", err)
		}
		if _, err := body.Seek(cur, io.SeekStart); err != nil {
			return nil, fmt.Errorf("measuring body: %w", err)
		}
		size = end - cur
	}
	in := &s3.PutObjectInput{
		Bucket:        aws.String(bucket),
		Key:           aws.String(key),
		Body:          body,
		ContentLength: aws.Int64(size),
	}
	if contentType != "" {
		in.ContentType = aws.String(contentType)
	}
	return in, nil
}

// copySource is the x-amz-copy-source value: "bucket/key", URL-encoded
// segment by segment so the slashes in the key stay path separators. "+" is
// encoded too because some servers decode it as a space.
func copySource(bucket, key string) string {
	segs := strings.Split(key, "/")
	for i, seg := range segs {
		segs[i] = strings.ReplaceAll(url.PathEscape(seg), "+", "%2B")
	}
	return url.PathEscape(bucket) + "/" + strings.Join(segs, "/")
}

// wrapErr adds the operation and address to err ("getting s3://b/k: ...")
// and marks missing keys and buckets with ErrNotFound, keeping the SDK error
// in the chain for IsTransient and for callers that want the details.
func wrapErr(op, bucket, key string, err error) error {
	return wrapErrf(err, "%s s3://%s/%s", op, bucket, key)
}

// wrapErrf is wrapErr with a free-form context.
func wrapErrf(err error, format string, args ...any) error {
	what := fmt.Sprintf(format, args...)
	if isNotFound(err) && !errors.Is(err, ErrNotFound) {
		return fmt.Errorf("%s: %w: %w", what, ErrNotFound, err)
	}
	return fmt.Errorf("%s: %w", what, err)
}

// isNotFound reports a missing key or bucket. A 404 counts only with one of
// S3's not-found codes, or with no code at all (HEAD answers have no body):
// servers also answer 404 for other things, such as an unknown access key.
func isNotFound(err error) bool {
	if hasCode(err, "NoSuchKey", "NotFound", "NoSuchBucket") {
		return true
	}
	var apiErr smithy.APIError
	return hasStatus(err, http.StatusNotFound) && (!errors.As(err, &apiErr) || apiErr.ErrorCode() == "")
}

func isPreconditionFailed(err error) bool {
	return hasCode(err, "PreconditionFailed") || hasStatus(err, http.StatusPreconditionFailed)
}

func isNotImplemented(err error) bool {
	return hasCode(err, "NotImplemented") || hasStatus(err, http.StatusNotImplemented)
}

// hasCode reports whether err carries one of the S3 error codes.
func hasCode(err error, codes ...string) bool {
	var apiErr smithy.APIError
	if !errors.As(err, &apiErr) {
		return false
	}
	for _, c := range codes {
		if apiErr.ErrorCode() == c {
			return true
		}
	}
	return false
}

// hasStatus reports whether err is an HTTP answer with the status code.
func hasStatus(err error, status int) bool {
	var re interface{ HTTPStatusCode() int }
	return errors.As(err, &re) && re.HTTPStatusCode() == status
}

// Info is what a HEAD request tells of an object.
type Info struct {
	Size int64
	// ETag is the server's entity tag, quotes removed: it changes when the
	// content does.
	ETag string
}

// Statter reads an object's Info without its content.
type Statter interface {
	Stat(ctx context.Context, bucket, key string) (Info, error)
}

var _ Statter = (*S3)(nil)

// Stat implements Statter. A missing key or bucket matches ErrNotFound.
func (s *S3) Stat(ctx context.Context, bucket, key string) (Info, error) {
	out, err := s.client.HeadObject(ctx, &s3.HeadObjectInput{Bucket: aws.String(bucket), Key: aws.String(key)})
	if isNotFound(err) {
		return Info{}, fmt.Errorf("%s/%s: %w", bucket, key, ErrNotFound)
	}
	if err != nil {
		return Info{}, wrapErr("reading the metadata of", bucket, key, err)
	}
	return Info{Size: aws.ToInt64(out.ContentLength), ETag: strings.Trim(aws.ToString(out.ETag), `"`)}, nil
}
