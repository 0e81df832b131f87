package machine

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/arke-institute/orchestrator/fanin"
)

// TestCheckWaitGrowsWithTheCheck: a group is checked every
// MACHINE_CHECK_INTERVAL until a check takes long (a list of many
// machines); it then waits checkShare times that check, and a group no
// longer running is forgotten with its wait.
func TestCheckWaitGrowsWithTheCheck(t *testing.T) {
	c := newCheckTimes()
	small, big := fanin.PhaseRef{BatchID: "a", Phase: "P"}, fanin.PhaseRef{BatchID: "b", Phase: "P"}
	both := []fanin.PhaseRef{small, big}
	t0 := time.Unix(1_000_000, 0)
	every := 10 * time.Second

	require.Equal(t, both, c.due(both, every, t0))
	c.took(small, 5*time.Millisecond)
	c.took(big, 2*time.Second) // 40 s before the next
	require.Empty(t, c.due(both, every, t0.Add(9*time.Second)))
	require.Equal(t, []fanin.PhaseRef{small}, c.due(both, every, t0.Add(10*time.Second)))
	require.Equal(t, []fanin.PhaseRef{small}, c.due(both, every, t0.Add(39*time.Second)))
	require.Equal(t, []fanin.PhaseRef{big}, c.due([]fanin.PhaseRef{big}, every, t0.Add(40*time.Second)))
	// small was forgotten: it is due at once when it runs again.
	require.Equal(t, []fanin.PhaseRef{small}, c.due(both, every, t0.Add(41*time.Second)))
	// A quick check brings big back to the interval.
	c.took(big, time.Millisecond)
	require.Equal(t, []fanin.PhaseRef{big}, c.due([]fanin.PhaseRef{big}, every, t0.Add(50*time.Second)))
}
