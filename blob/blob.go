// Package blob is the object storage the orchestrator and its workers read
// inputs from and write results to. Production uses Cloudflare R2 through its
// S3 API (see S3); tests and local development use a real S3 server
// (internal/harness/s3test), never a mock.
package blob

import (
	"context"
	"errors"
	"io"
	"net/http"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/aws/retry"
	"github.com/aws/smithy-go"
)

// Store is the object storage the orchestrator and its workers use
// (Cloudflare R2 in production).
//
// Errors wrap the underlying cause with the operation and the s3:// address,
// match ErrNotFound or ErrExists with errors.Is where stated, and can be
// classified with IsTransient.
type Store interface {
	// Get reads a whole object into memory. It returns an error matching
	// ErrNotFound when the key or the bucket does not exist.
	Get(ctx context.Context, bucket, key string) ([]byte, error)
	// Open streams an object and reports its size in bytes (-1 if the server
	// did not say). The caller must close the reader. Missing keys and
	// buckets match ErrNotFound.
	Open(ctx context.Context, bucket, key string) (io.ReadCloser, int64, error)
	// Put writes an object, replacing any object at the key. The body must
	// be seekable so the request can be signed and retried over plain HTTP;
	// size is its length in bytes (a negative size is measured by seeking).
	// An empty contentType leaves the server's default.
	Put(ctx context.Context, bucket, key string, body io.ReadSeeker, size int64, contentType string) error
	// PutIfAbsent is Put that refuses to replace an existing object: it
	// returns an error matching ErrExists if the key already exists.
	PutIfAbsent(ctx context.Context, bucket, key string, body io.ReadSeeker, size int64, contentType string) error
	// Exists reports whether the key exists. A missing bucket reports false
	// (S3 answers HEAD requests for both with a bare 404).
	Exists(ctx context.Context, bucket, key string) (bool, error)
	// Copy copies an object server side, possibly across buckets, replacing
	// any object at the destination. A missing source matches ErrNotFound.
	Copy(ctx context.Context, srcBucket, srcKey, dstBucket, dstKey string) error
	// EnsureBucket creates the bucket if it does not exist; an existing
	// bucket the credentials can reach is not an error.
	EnsureBucket(ctx context.Context, bucket string) error
}

var (
	// ErrNotFound is matched (errors.Is) by errors for a key or bucket that
	// does not exist.
	ErrNotFound = errors.New("object not found")
	// ErrExists is matched (errors.Is) by PutIfAbsent's error when the key
	// already exists.
	ErrExists = errors.New("object already exists")
)

// transientCodes are S3 error codes worth retrying beyond the HTTP status
// rule in IsTransient: the SDK's throttling and timeout codes, plus S3's
// answer to two conditional writes racing on one key (the loser may retry
// and then gets a definite answer).
var transientCodes = func() map[string]bool {
	codes := map[string]bool{
		"InternalError":              true,
		"ServiceUnavailable":         true,
		"ConditionalRequestConflict": true,
	}
	for c := range retry.DefaultThrottleErrorCodes {
		codes[c] = true
	}
	for c := range retry.DefaultRetryableErrorCodes {
		codes[c] = true
	}
	return codes
}()

// IsTransient reports whether err is worth retrying later: timeouts,
// connection errors, HTTP 5xx (except 501 Not Implemented), 429 and
// throttling or timeout error codes. ErrNotFound, ErrExists, cancellation and
// other 4xx answers (403 bad credentials, 400 bad request) are not: retrying
// them gives the same answer.
//
// The SDK has already retried transient failures a few times by the time an
// error reaches the caller; this is for the caller's own, slower retries
// (a job retried by the queue).
func IsTransient(err error) bool {
	switch {
	case err == nil,
		errors.Is(err, ErrNotFound),
		errors.Is(err, ErrExists),
		errors.Is(err, context.Canceled):
		return false
	case errors.Is(err, context.DeadlineExceeded):
		return true
	}

	// An HTTP answer decides by itself: a 4xx is final even when the error
	// also looks like a network error somewhere in its chain.
	var status interface{ HTTPStatusCode() int }
	if errors.As(err, &status) && status.HTTPStatusCode() != 0 {
		code := status.HTTPStatusCode()
		if code == http.StatusTooManyRequests || (code >= 500 && code != http.StatusNotImplemented) {
			return true
		}
		var apiErr smithy.APIError
		return errors.As(err, &apiErr) && transientCodes[apiErr.ErrorCode()]
	}
	var apiErr smithy.APIError
	if errors.As(err, &apiErr) && transientCodes[apiErr.ErrorCode()] {
		return true
	}

	// No HTTP answer: a failed dial, a reset connection, a network timeout.
	if (retry.RetryableConnectionError{}).IsErrorRetryable(err) == aws.TrueTernary {
		return true
	}
	var timeout interface{ Timeout() bool }
	return errors.As(err, &timeout) && timeout.Timeout()
}
