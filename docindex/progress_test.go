package docindex_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/arke-institute/orchestrator/db"
	"github.com/arke-institute/orchestrator/docindex"
)

// TestProgressNeverGoesBack walks a document of 4 chunks through its
// steps as the database records them (processedChunks counts the current
// step's chunks, from 0 at each step): the whole percentage only grows,
// reaching 100 at completion only; the step's own goes 0 to 100 each step.
func TestProgressNeverGoesBack(t *testing.T) {
	t.Parallel()
	type state struct {
		step      string
		processed int32
		status    db.DocumentStatus
		whole     int
		stepShare int
	}
	processing := db.DocumentStatus("processing")
	states := []state{
		{"download", 0, processing, 0, 0},
		{"embeddings", 0, processing, 0, 0},
		{"embeddings", 2, processing, 16, 50},
		{"embeddings", 4, processing, 33, 100},
		{"tags", 0, processing, 33, 0},
		{"tags", 3, processing, 58, 75},
		{"store", 0, processing, 66, 0},
		{"store", 4, processing, 99, 100},
		{"store", 4, db.DocumentCompleted, 100, 100},
	}
	last := -1
	for _, s := range states {
		p := docindex.DocumentOf(db.Document{CurrentStep: s.step, TotalChunks: 4, ProcessedChunks: s.processed, Status: s.status}).Progress
		require.Equal(t, []int{s.whole, s.stepShare}, []int{p.Percentage, p.StepPercentage}, "%+v", s)
		require.GreaterOrEqual(t, p.Percentage, last, "%+v", s)
		last = p.Percentage
	}
	failed := docindex.DocumentOf(db.Document{CurrentStep: "tags", TotalChunks: 4, ProcessedChunks: 1, Status: db.DocumentFailed}).Progress
	require.Equal(t, 41, failed.Percentage, "a failed document shows how far it got")
}
