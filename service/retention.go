package service

import (
	"encoding/json"
	"fmt"
	"time"

	"github.com/arke-institute/orchestrator/db"
)

// Pruned says that retention (RETENTION_DAYS) removed a batch's processing
// details: its tasks, chunks, events and intermediate file generations.
// Its status, final files, final manifest and documents remain.
type Pruned struct {
	// At is when the removal ended; null while it is going on.
	At *time.Time `json:"at"`
	// Note says what is gone, for people.
	Note string `json:"note"`
}

// prunedKeep is what the batch row keeps of a pruned batch's progress
// (batches.pruned_counts, written by jobs.Prune as the removal begins).
type prunedKeep struct {
	Tasks []struct {
		Phase  string `json:"phase"`
		Status string `json:"status"`
		N      int64  `json:"n"`
	} `json:"tasks"`
	OCR *OCRProgress `json:"ocr"`
}

// prunedProgress is a pruned batch's kept task counts and OCR summary, and
// its Pruned block; nil for a batch that was not pruned.
func (s *Service) prunedProgress(b db.Batch) ([]db.TaskCountByBatchRow, *OCRProgress, *Pruned, error) {
	if b.PrunedCounts == nil {
		return nil, nil, nil, nil
	}
	var keep prunedKeep
	if err := json.Unmarshal(b.PrunedCounts, &keep); err != nil {
		return nil, nil, nil, fmt.Errorf("reading the kept progress of pruned batch %s: %w", b.ID, err)
	}
	counts := make([]db.TaskCountByBatchRow, 0, len(keep.Tasks))
	for _, t := range keep.Tasks {
		counts = append(counts, db.TaskCountByBatchRow{Phase: t.Phase, Status: t.Status, Count: t.N})
	}
	return counts, keep.OCR, &Pruned{At: b.PrunedAt, Note: s.prunedNote()}, nil
}

// prunedNote says what retention removed, and when.
func (s *Service) prunedNote() string {
	const what = "processing details (tasks, chunks, events, intermediate files) removed"
	if days := s.cfg.Retention.Days; days > 0 {
		return fmt.Sprintf("%s %d days after the batch finished (RETENTION_DAYS)", what, days)
	}
	return what + " by retention"
}

// errPruned refuses to redo work of a pruned batch: what a retry would
// start from is gone.
func (s *Service) errPruned(batchID string) error {
	return fmt.Errorf("%w: batch %s cannot be retried: its %s", ErrConflict, batchID, s.prunedNote())
}
