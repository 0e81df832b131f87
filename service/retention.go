package service

import (
	"fmt"
	"time"
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
