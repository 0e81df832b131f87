package provider

import (
	"context"
	"maps"
	"slices"
	"sync"
)

// Usage is what answers of a provider consumed: the requests answered and
// the tokens the answers' usage reported (OpenAI-compatible APIs answer
// {"usage": {"prompt_tokens", "completion_tokens", "total_tokens"}}). A
// local engine answers with requests and no tokens: it reports none, and
// nothing bills them.
type Usage struct {
	Requests         int64
	PromptTokens     int64
	CompletionTokens int64
}

// Add is u plus v.
func (u Usage) Add(v Usage) Usage {
	return Usage{Requests: u.Requests + v.Requests, PromptTokens: u.PromptTokens + v.PromptTokens,
		CompletionTokens: u.CompletionTokens + v.CompletionTokens}
}

// Answered is the usage of one answer that reported prompt, completion
// and total tokens; a completion count it left out is the total less the
// prompt (embeddings answer no completion tokens).
func Answered(prompt, completion, total int64) Usage {
	if completion == 0 && total > prompt {
		completion = total - prompt
	}
	return Usage{Requests: 1, PromptTokens: max(prompt, 0), CompletionTokens: max(completion, 0)}
}

// Meter sums the usage of the calls made under a context, per model, for
// the caller that commits their work: it writes the sum in the same
// transaction, so that what a batch consumed is counted once with the
// work it paid for. A Meter is safe for concurrent use.
type Meter struct {
	mu      sync.Mutex
	byModel map[string]Usage
}

// meterKey is the context key of the Meter calls report to.
type meterKey struct{}

// WithMeter is ctx with m collecting the usage of the calls made under
// it (Record).
func WithMeter(ctx context.Context, m *Meter) context.Context {
	return context.WithValue(ctx, meterKey{}, m)
}

// Record adds u, used by model, to the Meter of ctx, if it has one: the
// engines call it for every answer they take.
func Record(ctx context.Context, model string, u Usage) {
	m, _ := ctx.Value(meterKey{}).(*Meter)
	if m == nil {
		return
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.byModel == nil {
		m.byModel = map[string]Usage{}
	}
	m.byModel[model] = m.byModel[model].Add(u)
}

// Models are the models m recorded usage of, sorted, with their usage;
// none for a nil m.
func (m *Meter) Models() ([]string, []Usage) {
	if m == nil {
		return nil, nil
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	models := slices.Sorted(maps.Keys(m.byModel))
	usage := make([]Usage, len(models))
	for i, name := range models {
		usage[i] = m.byModel[name]
	}
	return models, usage
}
