package main

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/arke-institute/orchestrator/config"
	"github.com/arke-institute/orchestrator/setting"
)

// TestConfigurationReference: the reference replaces what is between its
// markers, keeps the rest, lists every declared setting once, and refuses
// a file without its markers.
func TestConfigurationReference(t *testing.T) {
	t.Parallel()
	old := "# Configuration\n\nhand-written\n\n" + settingsBegin + "stale\n" + settingsEnd + "\nafter\n"
	out, err := configurationReference([]byte(old))
	require.NoError(t, err)
	s := string(out)
	require.True(t, strings.HasPrefix(s, "# Configuration\n\nhand-written\n\n"+settingsBegin))
	require.True(t, strings.HasSuffix(s, settingsEnd+"\nafter\n"))
	require.NotContains(t, s, "stale")
	for _, name := range setting.Names((&config.Config{}).Groups()) {
		require.Equal(t, 1, strings.Count(s, "| `"+name+"` |"), name)
	}
	again, err := configurationReference(out)
	require.NoError(t, err)
	require.Equal(t, s, string(again), "generating is idempotent")

	_, err = configurationReference([]byte("# Configuration\n"))
	require.ErrorContains(t, err, "markers")
}

// TestWorkerPrograms: every machine phase names its worker program.
func TestWorkerPrograms(t *testing.T) {
	t.Parallel()
	for _, s := range machineSpecs() {
		require.NotEmpty(t, s.Worker, s.Name)
	}
}
