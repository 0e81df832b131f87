package batchurls_test

import (
	"strings"
	"testing"

	"github.com/arke-institute/orchestrator/batchurls"
	"github.com/arke-institute/orchestrator/blob"
	"github.com/arke-institute/orchestrator/phases"
)

// FuzzCheck: make fuzz; `go test` runs the seed corpus. Whatever a worker
// asks for, an object Check lets through lies under its batch's prefix in
// a bucket of that role, has no empty, "." or ".." segment, is the task's
// input or lies in one of its phase's areas, and a write never replaces
// the input.
func FuzzCheck(f *testing.F) {
	for _, s := range []struct {
		phase                      uint8
		input, method, bucket, key string
	}{
		{0, "d/x.tif", "PUT_IF_ABSENT", "s", "staging/B/d/x-p2.jpg"},
		{1, "r.pdf", "PUT_IF_ABSENT", "s", "staging/B/r-p1.txt"},
		{2, "d/x.jpg", "PUT", "c", "variants/B/.attempts/a1/d/x.jpg/large.jpg"},
		{2, "d/x.jpg", "PUT", "a", "staging/B/.attempts/a1/d/x.jpg"},
		{2, "d/x.jpg", "GET", "s", "staging/B/d/x.jpg"},
		{2, "d/x.jpg", "PUT", "c", "variants/B/.attempts/a1/d/x.jpg/../../y.jpg/large.jpg"},
		{0, "x.tif", "PUT_IF_ABSENT", "s", "staging/B/x.tif"},
	} {
		f.Add(s.phase, s.input, s.method, s.bucket, s.key)
	}
	_, s := newSigner(f, batchurls.Buckets{phases.StagingBucket: "s", phases.ArchiveBucket: "a", phases.CDNBucket: "c"})
	names := []phases.Name{phases.TIFFConversion, phases.PDFPages, phases.ImageProcessing}
	f.Fuzz(func(t *testing.T, phase uint8, input, method, bucket, key string) {
		input = "staging/B/" + input
		if phases.CheckKey(input, "staging/B/") != nil {
			return // the orchestrator's own input keys are checked at intake
		}
		sc := scope(names[int(phase)%len(names)], input)
		o := blob.Object{Method: blob.Method(method), Bucket: bucket, Key: key}
		if s.Check(sc, o) != nil {
			return
		}
		role := map[string]phases.Bucket{"s": phases.StagingBucket, "a": phases.ArchiveBucket, "c": phases.CDNBucket}[bucket]
		if err := phases.CheckKey(key, phases.BatchPrefix(role, "B")); err != nil {
			t.Fatalf("let through %v: %v", o, err)
		}
		final := key
		if o.Method == blob.MethodPut && sc.Attempt != "" {
			var ok bool
			if final, ok = phases.FinalKey(role, "B", sc.Attempt, key); !ok {
				t.Fatalf("let through a PUT outside the attempt's area: %v", o)
			}
		}
		write := o.Method != blob.MethodGet
		if err := phases.Reach(sc.Phase, input, role, final, write, o.Method == blob.MethodPut); err != nil {
			t.Fatalf("let through %v, which the task does not reach: %v", o, err)
		}
		if write && role == phases.StagingBucket && final == input {
			t.Fatalf("let through a write of the input: %v", o)
		}
		if strings.Contains(final, "/../") {
			t.Fatalf("let through a climbing key: %v", o)
		}
	})
}
