package main

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/arke-institute/orchestrator/phases"
)

// TestSettingsTableChunked: a chunked phase gets no Fly or launch rows
// (config reads none for it), its chunk size, and no worker program.
func TestSettingsTableChunked(t *testing.T) {
	t.Parallel()
	machine := phases.All()[0].Spec()
	chunked := phases.Spec{Name: "CHUNKY", TaskPrefix: "chunky", Short: "CHUNKY", Executor: "chunked", Defaults: phases.Defaults{ChunkSize: 10}}
	table := settingsTable([]phases.Spec{machine, chunked})
	require.Contains(t, table, "FLY_"+machine.Short+"_APP_NAME")
	require.NotContains(t, table, "FLY_CHUNKY_")
	require.NotContains(t, table, "BATCH_SIZE_CHUNKY")
	require.Contains(t, table, "`CHUNKY_CHUNK_SIZE` | `10`")
	for _, s := range machineSpecs() {
		require.NotEmpty(t, s.Worker)
	}
}
