package blob_test

import (
	"testing"
	"time"

	"github.com/arke-institute/orchestrator/blob"
)

// FuzzParseCompact: make fuzz; `go test` runs the seed corpus. Whatever a
// machine's OUTPUT_URLS hold, parsing never panics, and what parses
// compacts again to lines that parse to the same requests.
func FuzzParseCompact(f *testing.F) {
	store, err := blob.NewS3(blob.S3Config{Endpoint: "http://127.0.0.1:1", AccessKeyID: "id", SecretAccessKey: "secret"})
	if err != nil {
		f.Fatal(err)
	}
	now := time.Date(2025, 10, 29, 12, 0, 0, 0, time.UTC)
	base := blob.Object{Method: blob.MethodGet, Bucket: "s", Key: "staging/B/a b.tif"}
	b, lines, err := blob.PresignCompactAt(store, base, []blob.Object{
		{Method: blob.MethodPut, Bucket: "c", Key: "variants/B/a b.tif/large.jpg"},
		{Method: blob.MethodPutIfAbsent, Bucket: "s", Key: "staging/B/a-p1.jpg"},
	}, time.Hour, now)
	if err != nil {
		f.Fatal(err)
	}
	f.Add(lines)
	f.Add("PUT s k " + string(make([]byte, 43)))
	f.Add("GET a%2Fb c\n\nPUT")
	worker := blob.Presigned{Object: b.Object, URL: b.URL}
	f.Fuzz(func(t *testing.T, lines string) {
		urls, err := blob.ParseCompact(worker, lines)
		if err != nil {
			return
		}
		again, err := blob.AppendCompact(nil, worker, urls)
		if err != nil {
			t.Fatalf("parsed %q, but it does not compact: %v", lines, err)
		}
		urls2, err := blob.ParseCompact(worker, string(again))
		if err != nil || len(urls2) != len(urls) {
			t.Fatalf("%q compacts to %q, which parses to %d (%v)", lines, again, len(urls2), err)
		}
		for i := range urls {
			if urls[i].URL != urls2[i].URL || urls[i].Key != urls2[i].Key {
				t.Fatalf("%q: request %d changed in the round trip", lines, i)
			}
		}
	})
}
