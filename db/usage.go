package db

import (
	"context"
	"fmt"

	"github.com/arke-institute/orchestrator/provider"
)

// UsageAddMeter adds what the calls m metered consumed to a batch's phase
// (an empty batchID for a document posted alone) under role (the
// engine's: ocr, embeddings, tags), in the caller's transaction, the one
// that commits the work those calls did. A meter that recorded nothing
// writes nothing.
func (q *Queries) UsageAddMeter(ctx context.Context, batchID, phase, role string, m *provider.Meter) error {
	models, usage := m.Models()
	if len(models) == 0 {
		return nil
	}
	p := UsageAddProviderParams{BatchID: batchID, Phase: phase, Role: role, Models: models,
		Requests: make([]int64, len(models)), PromptTokens: make([]int64, len(models)), CompletionTokens: make([]int64, len(models))}
	for i, u := range usage {
		p.Requests[i], p.PromptTokens[i], p.CompletionTokens[i] = u.Requests, u.PromptTokens, u.CompletionTokens
	}
	if err := q.UsageAddProvider(ctx, p); err != nil {
		return fmt.Errorf("recording the %s provider's usage of %s: %w", role, phase, err)
	}
	return nil
}
