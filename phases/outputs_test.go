package phases

import (
	"testing"

	"github.com/stretchr/testify/require"
)

func TestTIFFPageKey(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		in      string
		page, n int
		want    string
	}{
		{"staging/B/dir/photo.tif", 1, 1, "staging/B/dir/photo.jpg"},
		{"staging/B/dir/photo.TIFF", 2, 3, "staging/B/dir/photo-p2.jpg"},
		{"staging/B/.tif", 1, 1, "staging/B/.tif.jpg"},
		{"staging/B/noext", 1, 1, "staging/B/noext.jpg"},
	} {
		require.Equal(t, c.want, TIFFPageKey(c.in, c.page, c.n), c.in)
	}
}

// TestPlannedOutputsStayInTheBatch: every output a phase plans for an
// input of batch B lies under B's prefix of its bucket, so the launcher
// and the URL endpoint agree on what a worker may write.
func TestPlannedOutputsStayInTheBatch(t *testing.T) {
	t.Parallel()
	const input = "staging/B/dir/a b.jpg"
	planned := 0
	for _, p := range All() {
		planner, ok := p.(OutputPlanner)
		if !ok {
			continue
		}
		planned++
		for _, out := range planner.PlanOutputs(input) {
			require.NoError(t, CheckKey(out.Key, BatchPrefix(out.Bucket, "B")), "%s: %+v", p.Spec().Name, out)
		}
	}
	require.Equal(t, 2, planned, "the TIFF and image phases plan their outputs")

	require.Equal(t, []Output{
		{Bucket: CDNBucket, Key: "variants/B/dir/a b.jpg/thumbnail.jpg"},
		{Bucket: CDNBucket, Key: "variants/B/dir/a b.jpg/medium.jpg"},
		{Bucket: CDNBucket, Key: "variants/B/dir/a b.jpg/large.jpg"},
		{Bucket: ArchiveBucket, Key: input},
		{Bucket: StagingBucket, Key: input + ".ref.json"},
	}, imageProcessing{}.PlanOutputs(input))
	require.Equal(t, []Output{{Bucket: StagingBucket, Key: "staging/B/dir/a b.jpg", IfAbsent: true}},
		tiffConversion{}.PlanOutputs("staging/B/dir/a b.tif"))
}

func TestCheckKey(t *testing.T) {
	t.Parallel()
	const prefix = "staging/B/"
	for key, want := range map[string]string{
		"staging/B/x.jpg":       "",
		"staging/B/d/é x+y.jpg": "",
		"staging/C/x.jpg":       `key "staging/C/x.jpg" is not under the batch's prefix "staging/B/"`,
		"staging/B/../C/x":      `key "staging/B/../C/x" has an empty, "." or ".." path segment`,
		"staging/B//x":          `key "staging/B//x" has an empty, "." or ".." path segment`,
		"staging/B/x/":          `key "staging/B/x/" has an empty, "." or ".." path segment`,
		"staging/B/./x":         `key "staging/B/./x" has an empty, "." or ".." path segment`,
		"staging/B/x\n":         `key "staging/B/x\n" holds a control character`,
		"staging/B":             `key "staging/B" is not under the batch's prefix "staging/B/"`,
	} {
		err := CheckKey(key, prefix)
		if want == "" {
			require.NoError(t, err, key)
		} else {
			require.EqualError(t, err, want, key)
		}
	}
	require.Equal(t, "variants/B/", BatchPrefix(CDNBucket, "B"))
	require.Equal(t, "staging/B/", BatchPrefix(ArchiveBucket, "B"))
}
