package service

import (
	"context"
	"fmt"

	"github.com/arke-institute/orchestrator/db"
)

// DocumentsProgress is a batch's DOCUMENT_INDEXING phase at a glance: its
// documents by outcome (those of its latest run), in its status while it
// has any. A running document is neither completed nor failed.
type DocumentsProgress struct {
	Total     int32 `json:"total"`
	Completed int32 `json:"completed"`
	Failed    int32 `json:"failed"`
}

// documentsProgress is the batch's documents block, nil when it has no
// documents.
func documentsProgress(ctx context.Context, q *db.Queries, batchID string) (*DocumentsProgress, error) {
	s, err := q.DocumentBatchSummary(ctx, &batchID)
	if err != nil {
		return nil, fmt.Errorf("summing the documents of %s: %w", batchID, err)
	}
	if s.Total == 0 {
		return nil, nil
	}
	p := DocumentsProgress(s)
	return &p, nil
}
