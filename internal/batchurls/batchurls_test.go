package batchurls_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/arke-institute/orchestrator/blob"
	"github.com/arke-institute/orchestrator/internal/batchurls"
	"github.com/arke-institute/orchestrator/phases"
)

func TestTTL(t *testing.T) {
	t.Parallel()
	now := time.Date(2025, 10, 29, 12, 0, 0, 0, time.UTC)
	require.Equal(t, 2*time.Minute+batchurls.Margin, batchurls.TTL(now, now.Add(2*time.Minute)))
	require.Equal(t, batchurls.Margin-time.Second, batchurls.TTL(now, now.Add(-time.Second)), "a deadline just passed keeps the rest of the margin")
	require.LessOrEqual(t, batchurls.TTL(now, now.Add(-batchurls.Margin)), time.Duration(0), "past the margin: none")
	require.Equal(t, blob.MaxPresignExpiry, batchurls.TTL(now, now.Add(30*24*time.Hour)), "SigV4 allows 7 days")
}

// TestCheckSharedBucket: a bucket with several roles (staging and CDN in
// one) takes the keys of each role's prefix.
func TestCheckSharedBucket(t *testing.T) {
	t.Parallel()
	store, err := blob.NewS3(blob.S3Config{Endpoint: "http://127.0.0.1:1", AccessKeyID: "id", SecretAccessKey: "secret"})
	require.NoError(t, err)
	s, err := batchurls.New(store, batchurls.Buckets{phases.StagingBucket: "one", phases.ArchiveBucket: "archive", phases.CDNBucket: "one"})
	require.NoError(t, err)
	for key, ok := range map[string]bool{"staging/B/a.jpg": true, "variants/B/a.jpg/large.jpg": true, "variants/C/a.jpg": false, "other/B/a": false} {
		err := s.Check("B", blob.Object{Method: blob.MethodPut, Bucket: "one", Key: key})
		require.Equal(t, ok, err == nil, "%s: %v", key, err)
	}
	require.ErrorContains(t, s.Check("B", blob.Object{Method: blob.MethodPut, Bucket: "archive", Key: "variants/B/a.jpg"}),
		`key "variants/B/a.jpg" is not under the batch's prefix "staging/B/"`)

	_, err = batchurls.New(store, batchurls.Buckets{phases.StagingBucket: "one"})
	require.ErrorContains(t, err, "no archive bucket")
	_, err = s.Sign(context.Background(), "B", []blob.Object{{Method: blob.MethodGet, Bucket: "one", Key: "staging/B/x"}, {Method: blob.MethodGet, Bucket: "one", Key: "staging/C/x"}}, time.Hour)
	var refused *batchurls.RefusedError
	require.ErrorAs(t, err, &refused)
}
