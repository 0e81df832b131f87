package s3test_test

import (
	"bytes"
	"context"
	"errors"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/aws/smithy-go"
	"github.com/stretchr/testify/require"

	"github.com/arke-institute/orchestrator/blob"
	"github.com/arke-institute/orchestrator/internal/harness/s3test"
)

func TestStartIsShared(t *testing.T) {
	t.Parallel()
	a, b := s3test.Start(t), s3test.Start(t)
	require.Same(t, a, b)
	require.Regexp(t, `^http://127\.0\.0\.1:\d+$`, a.Endpoint())
	require.NotEmpty(t, a.AccessKey())
	require.NotEmpty(t, a.SecretKey())
	require.DirExists(t, a.Root())
}

// Pins the caveat in the package doc: if versitygw stops changing the
// working directory, the doc (and this test) can go.
func TestStartChangesWorkingDirectory(t *testing.T) {
	t.Parallel()
	srv := s3test.Start(t)
	wd, err := os.Getwd()
	require.NoError(t, err)
	want, err := filepath.EvalSymlinks(srv.Root())
	require.NoError(t, err)
	got, err := filepath.EvalSymlinks(wd)
	require.NoError(t, err)
	require.Equal(t, want, got)
}

func TestNewBucketIsFreshAndUsable(t *testing.T) {
	t.Parallel()
	srv := s3test.Start(t)
	valid := regexp.MustCompile(`^[a-z0-9][a-z0-9-]{1,61}[a-z0-9]$`)

	b1, b2 := srv.NewBucket(t), srv.NewBucket(t)
	require.NotEqual(t, b1, b2)
	require.Regexp(t, valid, b1)

	store, err := blob.NewS3(srv.Config())
	require.NoError(t, err)
	ctx := context.Background()
	require.NoError(t, store.Put(ctx, b1, "k", bytes.NewReader([]byte("v")), 1, ""))
	exists, err := store.Exists(ctx, b2, "k")
	require.NoError(t, err)
	require.False(t, exists, "buckets must not share objects")

	t.Run("LongTestNameStillMakesAValidBucketName"+strings.Repeat("X", 80), func(t *testing.T) {
		require.Regexp(t, valid, srv.NewBucket(t))
	})
}

// The server must check signatures, or tests would pass with clients that
// production (R2) refuses.
func TestServerEnforcesSigV4(t *testing.T) {
	t.Parallel()
	srv := s3test.Start(t)
	bucket := srv.NewBucket(t)
	ctx := context.Background()

	good, err := blob.NewS3(srv.Config())
	require.NoError(t, err)
	require.NoError(t, good.Put(ctx, bucket, "secret.txt", strings.NewReader("data"), -1, "text/plain"))

	t.Run("WrongSecret", func(t *testing.T) {
		cfg := srv.Config()
		cfg.SecretAccessKey = "not-" + srv.SecretKey()
		bad, err := blob.NewS3(cfg)
		require.NoError(t, err)
		_, err = bad.Get(ctx, bucket, "secret.txt")
		requireAPIError(t, err, http.StatusForbidden, "SignatureDoesNotMatch")
	})

	t.Run("UnknownAccessKey", func(t *testing.T) {
		cfg := srv.Config()
		cfg.AccessKeyID = "nobody"
		bad, err := blob.NewS3(cfg)
		require.NoError(t, err)
		err = bad.Put(ctx, bucket, "secret.txt", strings.NewReader("overwritten"), -1, "")
		// versitygw answers 404 XAdminUserNotFound where R2 and S3 answer
		// 403 InvalidAccessKeyId; either way the write is refused.
		requireAPIError(t, err, http.StatusNotFound, "XAdminUserNotFound")
		require.NotErrorIs(t, err, blob.ErrNotFound)
	})

	t.Run("Unsigned", func(t *testing.T) {
		resp, err := http.Get(srv.Endpoint() + "/" + bucket + "/secret.txt")
		require.NoError(t, err)
		resp.Body.Close()
		require.Equal(t, http.StatusForbidden, resp.StatusCode)
	})

	got, err := good.Get(ctx, bucket, "secret.txt")
	require.NoError(t, err)
	require.Equal(t, "data", string(got), "a refused request must not have changed the object")
}

func requireAPIError(t *testing.T, err error, status int, code string) {
	t.Helper()
	require.Error(t, err)
	var apiErr smithy.APIError
	require.True(t, errors.As(err, &apiErr), "want an S3 API error, got %v", err)
	require.Equal(t, code, apiErr.ErrorCode(), "error: %v", err)
	var re interface{ HTTPStatusCode() int }
	require.True(t, errors.As(err, &re))
	require.Equal(t, status, re.HTTPStatusCode())
}
