package worker_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/arke-institute/orchestrator/worker"
)

// TestCheckPixels: an image over MaxPixels is refused with its size; the
// product does not overflow.
func TestCheckPixels(t *testing.T) {
	t.Parallel()
	require.NoError(t, worker.CheckPixels(25000, 20000))
	require.EqualError(t, worker.CheckPixels(25000, 20001), "the image is 25000x20001 pixels, more than the 500 megapixels a worker decodes")
	require.Error(t, worker.CheckPixels(1<<31-1, 1<<31-1))
}
