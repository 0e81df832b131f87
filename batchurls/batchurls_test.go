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
func newSigner(t testing.TB, buckets batchurls.Buckets) (*blob.S3, *batchurls.Signer) {
	t.Helper()
	store, err := blob.NewS3(blob.S3Config{Endpoint: "http://127.0.0.1:1", AccessKeyID: "id", SecretAccessKey: "secret"})
	require.NoError(t, err)
	s, err := batchurls.New(store, buckets)
	require.NoError(t, err)
	return store, s
}

// scope is the scope of attempt a1 of a task of batch B of phase name
// whose input is input.
func scope(name phases.Name, input string) batchurls.Scope {
	p, _ := phases.Get(name)
	attempt := ""
	if p.Spec().StagesOutputs {
		attempt = "a1"
	}
	return batchurls.Scope{BatchID: "B", Attempt: attempt, Phase: p, Input: input}
}

// TestCheckSharedBucket: a bucket with several roles (staging and CDN in
// one) takes the keys of each role's prefix.
func TestCheckSharedBucket(t *testing.T) {
	t.Parallel()
	store, s := newSigner(t, batchurls.Buckets{phases.StagingBucket: "one", phases.ArchiveBucket: "archive", phases.CDNBucket: "one"})
	sc := scope(phases.ImageProcessing, "staging/B/a.jpg")
	for o, ok := range map[blob.Object]bool{
		{Method: blob.MethodGet, Bucket: "one", Key: "staging/B/a.jpg"}:                             true,
		{Method: blob.MethodPut, Bucket: "one", Key: "variants/B/.attempts/a1/a.jpg/large.jpg"}:     true,
		{Method: blob.MethodPut, Bucket: "one", Key: "staging/B/.attempts/a1/a.jpg.ref.json"}:       true,
		{Method: blob.MethodGet, Bucket: "one", Key: "variants/C/a.jpg/large.jpg"}:                  false,
		{Method: blob.MethodGet, Bucket: "one", Key: "other/B/a"}:                                   false,
		{Method: blob.MethodPut, Bucket: "archive", Key: "staging/B/.attempts/a1/a.jpg"}:            true,
		{Method: blob.MethodPut, Bucket: "archive", Key: "variants/B/.attempts/a1/a.jpg/large.jpg"}: false,
	} {
		err := s.Check(sc, o)
		require.Equal(t, ok, err == nil, "%v: %v", o, err)
	}
	require.ErrorContains(t, s.Check(sc, blob.Object{Method: blob.MethodGet, Bucket: "archive", Key: "variants/B/a.jpg"}),
		`key "variants/B/a.jpg" is not under the batch's prefix "staging/B/"`)
	_, err := batchurls.New(store, batchurls.Buckets{phases.StagingBucket: "one"})
	require.ErrorContains(t, err, "no archive bucket")
	_, err = s.Sign(context.Background(), sc, []blob.Object{{Method: blob.MethodGet, Bucket: "one", Key: "staging/B/a.jpg"},
		{Method: blob.MethodGet, Bucket: "one", Key: "staging/C/x"}}, time.Hour)
	var refused *batchurls.RefusedError
	require.ErrorAs(t, err, &refused)
}

// TestCheckStagedWrites: a write that replaces is signed only in the
// attempt's own staging area, in each role's bucket; reads reach the final
// keys.
func TestCheckStagedWrites(t *testing.T) {
	t.Parallel()
	_, s := newSigner(t, batchurls.Buckets{phases.StagingBucket: "s", phases.ArchiveBucket: "a", phases.CDNBucket: "c"})
	sc := scope(phases.ImageProcessing, "staging/B/x.jpg")
	put := func(bucket, key string) error {
		return s.Check(sc, blob.Object{Method: blob.MethodPut, Bucket: bucket, Key: key})
	}
	require.NoError(t, put("s", "staging/B/.attempts/a1/x.jpg.ref.json"))
	require.NoError(t, put("a", "staging/B/.attempts/a1/x.jpg"))
	require.NoError(t, put("c", "variants/B/.attempts/a1/x.jpg/large.jpg"))
	require.ErrorContains(t, put("s", "staging/B/x.jpg.ref.json"), `key "staging/B/x.jpg.ref.json" is not in the attempt's staging area "staging/B/.attempts/a1/": a PUT, which replaces, goes there`)
	require.ErrorContains(t, put("s", "staging/B/.attempts/a2/x.jpg.ref.json"), `not in the attempt's staging area "staging/B/.attempts/a1/"`)
	require.ErrorContains(t, put("s", "staging/C/.attempts/a1/x"), `is not under the batch's prefix "staging/B/"`)
	require.NoError(t, s.Check(sc, blob.Object{Method: blob.MethodGet, Bucket: "s", Key: "staging/B/x.jpg"}))
	require.ErrorContains(t, s.Check(sc, blob.Object{Method: blob.MethodPutIfAbsent, Bucket: "s", Key: "staging/B/x.jpg"}),
		"the task's input, which it may read, not write")
	tiff := scope(phases.TIFFConversion, "staging/B/x.tif")
	require.NoError(t, s.Check(tiff, blob.Object{Method: blob.MethodPutIfAbsent, Bucket: "s", Key: "staging/B/x.jpg"}), "a phase that stages nothing")
	require.ErrorContains(t, s.Check(tiff, blob.Object{Method: blob.MethodPut, Bucket: "s", Key: "staging/B/x.jpg"}),
		"may only be written with PUT_IF_ABSENT, which never replaces")
	require.Equal(t, "staging/B/.attempts/a1/dir/x.jpg", phases.AttemptKey("staging/B/dir/x.jpg", "a1"))
	require.Equal(t, "variants/B/.attempts/a1/dir/x.jpg/large.jpg", phases.AttemptKey("variants/B/dir/x.jpg/large.jpg", "a1"))
	require.Equal(t, "staging/B/.attempts/a1/x", phases.AttemptKey("staging/B/.attempts/a1/x", "a2"), "already staged")
	final, ok := phases.FinalKey(phases.CDNBucket, "B", "a1", "variants/B/.attempts/a1/dir/x.jpg/large.jpg")
	require.True(t, ok)
	require.Equal(t, "variants/B/dir/x.jpg/large.jpg", final)
	_, ok = phases.FinalKey(phases.CDNBucket, "B", "a1", "variants/B/.attempts/a2/x.jpg")
	require.False(t, ok)
}

// TestCheckTaskScope: a task's URLs reach its own input and its own
// outputs, not the rest of its batch: a compromised worker cannot put a
// page on the public CDN, replace an archived original or another task's
// output, or read another file.
func TestCheckTaskScope(t *testing.T) {
	t.Parallel()
	_, s := newSigner(t, batchurls.Buckets{phases.StagingBucket: "s", phases.ArchiveBucket: "a", phases.CDNBucket: "c"})
	obj := func(m blob.Method, bucket, key string) blob.Object {
		return blob.Object{Method: m, Bucket: bucket, Key: key}
	}
	get, put, putNew := blob.MethodGet, blob.MethodPut, blob.MethodPutIfAbsent
	for _, c := range []struct {
		name  string
		sc    batchurls.Scope
		o     blob.Object
		error string // "" when allowed
	}{
		{"ImageVariant", scope(phases.ImageProcessing, "staging/B/d/x.jpg"), obj(put, "c", "variants/B/.attempts/a1/d/x.jpg/thumb.jpg"), ""},
		{"ImageHTMLOnCDN", scope(phases.ImageProcessing, "staging/B/d/x.jpg"), obj(put, "c", "variants/B/.attempts/a1/x.html"), `neither the task's input "staging/B/d/x.jpg" nor one of its outputs`},
		{"ImageHTMLInItsFolder", scope(phases.ImageProcessing, "staging/B/d/x.jpg"), obj(put, "c", "variants/B/.attempts/a1/d/x.jpg/x.html"), "nor one of its outputs"},
		{"ImageOtherVariants", scope(phases.ImageProcessing, "staging/B/d/x.jpg"), obj(put, "c", "variants/B/.attempts/a1/d/y.jpg/thumb.jpg"), "nor one of its outputs"},
		{"ImageOtherArchived", scope(phases.ImageProcessing, "staging/B/d/x.jpg"), obj(put, "a", "staging/B/.attempts/a1/d/y.jpg"), "nor one of its outputs"},
		{"ImageOtherRef", scope(phases.ImageProcessing, "staging/B/d/x.jpg"), obj(put, "s", "staging/B/.attempts/a1/d/y.jpg.ref.json"), "nor one of its outputs"},
		{"ImageReadsOtherFile", scope(phases.ImageProcessing, "staging/B/d/x.jpg"), obj(get, "s", "staging/B/d/y.jpg"), "nor one of its outputs"},
		{"TIFFPage", scope(phases.TIFFConversion, "staging/B/d/x.tif"), obj(putNew, "s", "staging/B/d/x-p2.jpg"), ""},
		{"TIFFTakenName", scope(phases.TIFFConversion, "staging/B/d/x.tif"), obj(get, "s", "staging/B/d/x-1.jpg"), ""},
		{"TIFFOtherDir", scope(phases.TIFFConversion, "staging/B/d/x.tif"), obj(putNew, "s", "staging/B/e/x.jpg"), "nor one of its outputs"},
		{"TIFFOtherStem", scope(phases.TIFFConversion, "staging/B/d/x.tif"), obj(putNew, "s", "staging/B/d/y.jpg"), "nor one of its outputs"},
		{"TIFFNotJPEG", scope(phases.TIFFConversion, "staging/B/d/x.tif"), obj(putNew, "s", "staging/B/d/x.html"), "nor one of its outputs"},
		{"TIFFOnCDN", scope(phases.TIFFConversion, "staging/B/d/x.tif"), obj(putNew, "c", "variants/B/d/x.jpg"), "nor one of its outputs"},
		{"TIFFReplaces", scope(phases.TIFFConversion, "staging/B/d/x.tif"), obj(put, "s", "staging/B/d/x.jpg"), "only be written with PUT_IF_ABSENT"},
		{"PDFText", scope(phases.PDFPages, "staging/B/r.PDF"), obj(putNew, "s", "staging/B/r-p10.txt"), ""},
		{"PDFPage", scope(phases.PDFPages, "staging/B/r.pdf"), obj(putNew, "s", "staging/B/r-p10.JPG"), ""},
		{"PDFOverwritesItself", scope(phases.PDFPages, "staging/B/r.pdf"), obj(putNew, "s", "staging/B/r.pdf"), "which it may read, not write"},
		{"PDFArchive", scope(phases.PDFPages, "staging/B/r.pdf"), obj(putNew, "a", "staging/B/r.pdf"), "nor one of its outputs"},
	} {
		err := s.Check(c.sc, c.o)
		if c.error == "" {
			require.NoError(t, err, c.name)
			continue
		}
		require.ErrorContains(t, err, c.error, c.name)
	}
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
		require.NoError(t, s.Env(context.Background(), env, scope(name, input), time.Hour))
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

	env := map[string]string{}
	require.NoError(t, s.Env(context.Background(), env, scope(phases.PDFPages, "staging/B/x.pdf"), time.Hour))
	require.Equal(t, []string{batchurls.EnvInputURL}, slices.Collect(maps.Keys(env)), "no planned outputs")

	env = map[string]string{}
	sc := scope(phases.ImageProcessing, "staging/C/x.jpg")
	err := s.Env(context.Background(), env, sc, time.Hour)
	var refused *batchurls.RefusedError
	require.ErrorAs(t, err, &refused)
	require.Equal(t, []string{batchurls.EnvInputURL}, slices.Collect(maps.Keys(env)), "the input alone")
}
