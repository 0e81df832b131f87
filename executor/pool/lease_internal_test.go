package pool

import "testing"

// TestByPriority: with a share of s%, one lease in every 100/s of a
// machine serves the batches in turn whatever their priority.
func TestByPriority(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		share   int
		leases  int
		inTurns int
	}{{10, 100, 10}, {25, 100, 25}, {50, 10, 5}, {100, 10, 10}, {0, 200, 2}, {1, 100, 1}} {
		n := 0
		for leased := range tc.leases {
			if !byPriority(int32(leased), tc.share) {
				n++
			}
		}
		if n != tc.inTurns {
			t.Errorf("share %d%%: %d of %d leases in turn, want %d", tc.share, n, tc.leases, tc.inTurns)
		}
	}
}
