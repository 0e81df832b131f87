package worker_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/arke-institute/orchestrator/worker"
)

func TestPages(t *testing.T) {
	t.Parallel()

	t.Run("EveryPageUploadedWithBoundedUploads", func(t *testing.T) {
		t.Parallel()
		var inFlight, most atomic.Int32
		got := make([]int, 6)
		timer := worker.StartTimer()
		err := worker.Pages(t.Context(), 6, 2, timer,
			func(_ context.Context, page int) (int, error) { return page * 10, nil },
			func(_ context.Context, page int, v int) error {
				n := inFlight.Add(1)
				defer inFlight.Add(-1)
				raise(&most, n)
				got[page-1] = v
				return nil
			})
		require.NoError(t, err)
		require.Equal(t, []int{10, 20, 30, 40, 50, 60}, got)
		require.LessOrEqual(t, most.Load(), int32(2))
	})

	t.Run("ConversionErrorStops", func(t *testing.T) {
		t.Parallel()
		var converted []int
		bad := errors.New("page 3 is corrupt")
		err := worker.Pages(t.Context(), 5, 2, worker.StartTimer(),
			func(_ context.Context, page int) (int, error) {
				converted = append(converted, page)
				if page == 3 {
					return 0, bad
				}
				return page, nil
			},
			func(context.Context, int, int) error { return nil })
		require.ErrorIs(t, err, bad)
		require.Equal(t, []int{1, 2, 3}, converted)
	})

	t.Run("UploadErrorIsTheCause", func(t *testing.T) {
		t.Parallel()
		// Page 1's upload fails; page 2's conversion then sees its context
		// cancelled and fails too. The upload's error is what went wrong.
		uploadFailed := make(chan struct{})
		storeDown := errors.New("store answered 503")
		err := worker.Pages(t.Context(), 3, 1, worker.StartTimer(),
			func(ctx context.Context, page int) (int, error) {
				if page == 2 {
					<-uploadFailed
					<-ctx.Done()
					return 0, ctx.Err()
				}
				return page, nil
			},
			func(_ context.Context, page int, _ int) error {
				defer close(uploadFailed)
				return storeDown
			})
		require.ErrorIs(t, err, storeDown)
	})

	t.Run("CancelledContext", func(t *testing.T) {
		t.Parallel()
		ctx, cancel := context.WithCancel(t.Context())
		cancel()
		err := worker.Pages(ctx, 3, 1, worker.StartTimer(),
			func(context.Context, int) (int, error) { return 0, nil },
			func(context.Context, int, int) error { return nil })
		require.ErrorIs(t, err, context.Canceled)
	})
}

// raise sets m to n if n is larger.
func raise(m *atomic.Int32, n int32) {
	for old := m.Load(); n > old; old = m.Load() {
		if m.CompareAndSwap(old, n) {
			return
		}
	}
}
