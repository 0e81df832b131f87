package testenv

import (
	"github.com/arke-institute/orchestrator/phases"
	"github.com/arke-institute/orchestrator/status"
)

// PhaseOf is the progress of the phase called name in a status, and
// whether the batch has work in it.
func PhaseOf(st status.Status, name phases.Name) (status.PhaseProgress, bool) {
	for _, p := range st.Phases {
		if p.Phase == string(name) {
			return p, true
		}
	}
	return status.PhaseProgress{}, false
}

// OCRCounts is a batch's OCR phase at a glance: its chunks and refs by
// outcome, as tests compare them.
type OCRCounts struct {
	ChunksTotal, ChunksDone, ChunksError         int64
	RefsTotal, RefsDone, RefsFailed, RefsSkipped int64
}

// OCROf is the OCR phase's counts in a status, nil while it has none.
func OCROf(st status.Status) *OCRCounts {
	p, ok := PhaseOf(st, phases.OCR)
	if !ok {
		return nil
	}
	return &OCRCounts{
		ChunksTotal: p.Detail["chunks_total"], ChunksDone: p.Detail["chunks_done"], ChunksError: p.Detail["chunks_error"],
		RefsTotal: p.TasksTotal, RefsDone: p.TasksCompleted - p.TasksSkipped, RefsFailed: p.TasksFailed, RefsSkipped: p.TasksSkipped,
	}
}

// DocumentCounts is a batch's documents phase at a glance, as tests
// compare it.
type DocumentCounts struct {
	Total, Completed, Failed int64
}

// DocumentsOf is the documents phase's counts in a status, nil while it
// has none.
func DocumentsOf(st status.Status) *DocumentCounts {
	p, ok := PhaseOf(st, phases.DocumentIndexing)
	if !ok {
		return nil
	}
	return &DocumentCounts{Total: p.TasksTotal, Completed: p.TasksCompleted, Failed: p.TasksFailed}
}
