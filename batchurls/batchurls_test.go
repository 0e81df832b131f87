package batchurls_test

import (
	"context"
	"maps"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/arke-institute/orchestrator/batchurls"
	"github.com/arke-institute/orchestrator/blob"
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

// newSigner is a signer over buckets, with credentials for a server that
// is never called.
func newSigner(t *testing.T, buckets batchurls.Buckets) (*blob.S3, *batchurls.Signer) {
	t.Helper()
	store, err := blob.NewS3(blob.S3Config{Endpoint: "http://127.0.0.1:1", AccessKeyID: "id", SecretAccessKey: "secret"})
	require.NoError(t, err)
	s, err := batchurls.New(store, buckets)
	require.NoError(t, err)
	return store, s
}

// TestCheckSharedBucket: a bucket with several roles (staging and CDN in
// one) takes the keys of each role's prefix.
func TestCheckSharedBucket(t *testing.T) {
	t.Parallel()
	store, s := newSigner(t, batchurls.Buckets{phases.StagingBucket: "one", phases.ArchiveBucket: "archive", phases.CDNBucket: "one"})
	for key, ok := range map[string]bool{"staging/B/a.jpg": true, "variants/B/a.jpg/large.jpg": true, "variants/C/a.jpg": false, "other/B/a": false} {
		err := s.Check("B", "a1", blob.Object{Method: blob.MethodPutIfAbsent, Bucket: "one", Key: key})
		require.Equal(t, ok, err == nil, "%s: %v", key, err)
	}
	require.ErrorContains(t, s.Check("B", "a1", blob.Object{Method: blob.MethodPutIfAbsent, Bucket: "archive", Key: "variants/B/a.jpg"}),
		`key "variants/B/a.jpg" is not under the batch's prefix "staging/B/"`)
	_, err := batchurls.New(store, batchurls.Buckets{phases.StagingBucket: "one"})
	require.ErrorContains(t, err, "no archive bucket")
	_, err = s.Sign(context.Background(), "B", "a1", []blob.Object{{Method: blob.MethodGet, Bucket: "one", Key: "staging/B/x"}, {Method: blob.MethodGet, Bucket: "one", Key: "staging/C/x"}}, time.Hour)
	var refused *batchurls.RefusedError
	require.ErrorAs(t, err, &refused)
}

// TestCheckStagedWrites: a write that replaces is signed only in the
// attempt's own staging area, in each role's bucket; reads and writes
// that never replace reach the batch's final keys.
func TestCheckStagedWrites(t *testing.T) {
	t.Parallel()
	_, s := newSigner(t, batchurls.Buckets{phases.StagingBucket: "s", phases.ArchiveBucket: "a", phases.CDNBucket: "c"})
	put := func(bucket, key string) error {
		return s.Check("B", "a1", blob.Object{Method: blob.MethodPut, Bucket: bucket, Key: key})
	}
	require.NoError(t, put("s", "staging/B/.attempts/a1/x.jpg.ref.json"))
	require.NoError(t, put("a", "staging/B/.attempts/a1/x.jpg"))
	require.NoError(t, put("c", "variants/B/.attempts/a1/x.jpg/large.jpg"))
	require.ErrorContains(t, put("s", "staging/B/x.jpg.ref.json"), `key "staging/B/x.jpg.ref.json" is not in the attempt's staging area "staging/B/.attempts/a1/": a PUT, which replaces, goes there`)
	require.ErrorContains(t, put("s", "staging/B/.attempts/a2/x.jpg.ref.json"), `not in the attempt's staging area "staging/B/.attempts/a1/"`)
	require.ErrorContains(t, put("s", "staging/C/.attempts/a1/x"), `is not under the batch's prefix "staging/B/"`)
	require.NoError(t, s.Check("B", "a1", blob.Object{Method: blob.MethodGet, Bucket: "s", Key: "staging/B/x.jpg"}))
	require.NoError(t, s.Check("B", "a1", blob.Object{Method: blob.MethodPutIfAbsent, Bucket: "s", Key: "staging/B/x.jpg"}))
	require.NoError(t, s.Check("B", "", blob.Object{Method: blob.MethodPut, Bucket: "s", Key: "staging/B/x.jpg"}), "a phase that stages nothing")
	require.Equal(t, "staging/B/.attempts/a1/dir/x.jpg", phases.AttemptKey("staging/B/dir/x.jpg", "a1"))
	require.Equal(t, "variants/B/.attempts/a1/dir/x.jpg/large.jpg", phases.AttemptKey("variants/B/dir/x.jpg/large.jpg", "a1"))
	require.Equal(t, "staging/B/.attempts/a1/x", phases.AttemptKey("staging/B/.attempts/a1/x", "a2"), "already staged")
	final, ok := phases.FinalKey(phases.CDNBucket, "B", "a1", "variants/B/.attempts/a1/dir/x.jpg/large.jpg")
	require.True(t, ok)
	require.Equal(t, "variants/B/dir/x.jpg/large.jpg", final)
	_, ok = phases.FinalKey(phases.CDNBucket, "B", "a1", "variants/B/.attempts/a2/x.jpg")
	require.False(t, ok)

}

// TestEnv: a machine's environment holds its input's GET and its planned
// outputs' PUTs in the compact form, all valid for ttl; outputs outside the
// batch are refused, and the input's GET comes alone.
func TestEnv(t *testing.T) {
	t.Parallel()
	_, s := newSigner(t, batchurls.Buckets{phases.StagingBucket: "s", phases.ArchiveBucket: "a", phases.CDNBucket: "c"})
	get := func(key string) blob.Presigned {
		return blob.Presigned{Object: blob.Object{Method: blob.MethodGet, Bucket: "s", Key: key}}
	}

	for _, name := range []phases.Name{phases.TIFFConversion, phases.ImageProcessing} {
		p, _ := phases.Get(name)
		const input = "staging/B/dir/ä b+%.tif"
		env := map[string]string{}
		require.NoError(t, s.Env(context.Background(), env, "B", "a1", p, input, time.Hour))
		base := get(input)
		base.URL = env[batchurls.EnvInputURL]
		require.Contains(t, base.URL, "/s/staging/B/dir/%C3%A4%20b%2B%25.tif?")
		urls, err := blob.ParseCompact(base, env[batchurls.EnvOutputURLs])
		require.NoError(t, err)
		outs := p.(phases.OutputPlanner).PlanOutputs(input)
		require.Len(t, urls, len(outs))
		for i, u := range urls {
			want := outs[i].Key
			if !outs[i].IfAbsent {
				want = phases.AttemptKey(want, "a1") // staged: it replaces
				require.Contains(t, u.Key, "/.attempts/a1/")
			}
			require.Equal(t, want, u.Key)
			require.WithinDuration(t, time.Now().Add(time.Hour), u.Expires, 2*time.Second)
			require.Contains(t, u.URL, "X-Amz-Expires=3600&")
		}
	}

	pdf, _ := phases.Get(phases.PDFPages)
	env := map[string]string{}
	require.NoError(t, s.Env(context.Background(), env, "B", "a1", pdf, "staging/B/x.pdf", time.Hour))
	require.Equal(t, []string{batchurls.EnvInputURL}, slices.Collect(maps.Keys(env)), "no planned outputs")

	image, _ := phases.Get(phases.ImageProcessing)
	env = map[string]string{}
	err := s.Env(context.Background(), env, "B", "a1", image, "staging/C/x.jpg", time.Hour)
	var refused *batchurls.RefusedError
	require.ErrorAs(t, err, &refused)
	require.Equal(t, []string{batchurls.EnvInputURL}, slices.Collect(maps.Keys(env)), "the input alone")
}
