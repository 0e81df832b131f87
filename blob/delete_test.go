package blob_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/arke-institute/orchestrator/blob"
)

// listAll lists every key under prefix, and how many pages List gave.
func listAll(t *testing.T, store blob.Deleter, bucket, prefix string) (keys []string, pages int) {
	t.Helper()
	err := store.List(context.Background(), bucket, prefix, func(page []string) error {
		require.LessOrEqual(t, len(page), blob.MaxDeleteKeys)
		pages++
		keys = append(keys, page...)
		return nil
	})
	require.NoError(t, err)
	return keys, pages
}

// TestListAndDelete: List finds exactly the keys under a prefix (not those
// of a longer name sharing its first characters), and Delete removes only
// the keys it is given, missing ones included without error.
func TestListAndDelete(t *testing.T) {
	t.Parallel()
	store, bucket := newStore(t)
	ctx := context.Background()
	put := func(key string) {
		require.NoError(t, store.Put(ctx, bucket, key, strings.NewReader(key), int64(len(key)), "text/plain"))
	}
	mine := []string{"staging/B1/_manifest.json", "staging/B1/a.tif", "staging/B1/scans/a.jpg", "staging/B1/scans/deep/b.jpg"}
	others := []string{"staging/B10/a.tif", "staging/B2/_manifest.json", "variants/B1/a.jpg"}
	for _, k := range append(append([]string{}, mine...), others...) {
		put(k)
	}

	keys, pages := listAll(t, store, bucket, "staging/B1/")
	require.Equal(t, mine, keys, "in key order, nothing from staging/B10/")
	require.Equal(t, 1, pages)

	require.NoError(t, store.Delete(ctx, bucket, []string{mine[1], mine[3], "staging/B1/never-was.jpg"}))
	keys, _ = listAll(t, store, bucket, "staging/B1/")
	require.Equal(t, []string{mine[0], mine[2]}, keys)
	for _, k := range others {
		ok, err := store.Exists(ctx, bucket, k)
		require.NoError(t, err)
		require.True(t, ok, "%s is another batch's or bucket area's, and stays", k)
	}

	require.NoError(t, store.Delete(ctx, bucket, nil), "nothing to delete")
	require.ErrorContains(t, store.Delete(ctx, bucket, make([]string, blob.MaxDeleteKeys+1)), "at most 1000")

	t.Run("MissingBucket", func(t *testing.T) {
		err := store.List(ctx, bucket+"-missing", "staging/", func([]string) error { return nil })
		require.ErrorIs(t, err, blob.ErrNotFound)
	})
	t.Run("CallbackErrorStops", func(t *testing.T) {
		stop := fmt.Errorf("stop here")
		require.ErrorIs(t, store.List(ctx, bucket, "staging/", func([]string) error { return stop }), stop)
	})
}

// TestListPages: more keys than a page holds come in several pages, and
// deleting them page by page leaves none.
func TestListPages(t *testing.T) {
	t.Parallel()
	store, bucket := newStore(t)
	ctx := context.Background()
	const n = blob.MaxDeleteKeys + 7
	var wg sync.WaitGroup
	sem := make(chan struct{}, 16)
	errs := make(chan error, n)
	for i := range n {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer func() { <-sem; wg.Done() }()
			key := fmt.Sprintf("staging/MANY/f-%05d.txt", i)
			errs <- store.Put(ctx, bucket, key, strings.NewReader("x"), 1, "text/plain")
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}

	keys, pages := listAll(t, store, bucket, "staging/MANY/")
	require.Len(t, keys, n)
	require.Equal(t, 2, pages)

	err := store.List(ctx, bucket, "staging/MANY/", func(page []string) error { return store.Delete(ctx, bucket, page) })
	require.NoError(t, err)
	keys, _ = listAll(t, store, bucket, "staging/MANY/")
	require.Empty(t, keys)
}
