package docindex

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/arke-institute/orchestrator/db"
)

// instructions are the operator's own for the tags of doc: its batch's
// custom_prompts.general (spec 001), "" for a document posted alone or a
// batch that gave none.
func (w *DocumentStepWorker) instructions(ctx context.Context, doc db.Document) (string, error) {
	if doc.BatchID == nil {
		return "", nil
	}
	general, err := db.New(w.deps.Pool).BatchGeneralPrompt(ctx, *doc.BatchID)
	if errors.Is(err, pgx.ErrNoRows) {
		return "", nil // the batch was pruned
	}
	if err != nil {
		return "", fmt.Errorf("reading the instructions of batch %s: %w", *doc.BatchID, err)
	}
	return general, nil
}
