package blob_test

import (
	"context"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/arke-institute/orchestrator/blob"
)

// TestScan: Scan lists the objects under a prefix after a key, in key
// order, with the size and ETag Stat gives; an error of fn stops it.
func TestScan(t *testing.T) {
	t.Parallel()
	store, bucket := newStore(t)
	ctx := context.Background()
	for _, k := range []string{"documents/a.md", "documents/b/c.txt", "documents/d.txt", "documentsX/e.md"} {
		require.NoError(t, store.Put(ctx, bucket, k, strings.NewReader(k+" body"), int64(len(k)+5), "text/plain"))
	}
	scan := func(after string) []blob.Listed {
		var out []blob.Listed
		require.NoError(t, store.Scan(ctx, bucket, "documents/", after, func(page []blob.Listed) error {
			out = append(out, page...)
			return nil
		}))
		return out
	}
	all := scan("")
	require.Len(t, all, 3, "nothing of documentsX/")
	for _, o := range all {
		info, err := store.Stat(ctx, bucket, o.Key)
		require.NoError(t, err)
		require.Equal(t, info, o.Info, o.Key)
		require.NotEmpty(t, o.ETag)
	}
	require.Equal(t, []string{"documents/b/c.txt", "documents/d.txt"}, []string{scan("documents/a.md")[0].Key, scan("documents/a.md")[1].Key})
	require.Empty(t, scan("documents/d.txt"))

	stop := context.Canceled
	err := store.Scan(ctx, bucket, "documents/", "", func([]blob.Listed) error { return stop })
	require.ErrorIs(t, err, stop)
	err = store.Scan(ctx, "no-such-bucket", "documents/", "", func([]blob.Listed) error { return nil })
	require.ErrorIs(t, err, blob.ErrNotFound)
}
