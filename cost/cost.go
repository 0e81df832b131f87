package cost

import (
	"math"
	"slices"
)

// Usage kinds (the usage table's kind).
const (
	// KindTask is a task's attempt on a machine of its own.
	KindTask = "task"
	// KindPoolBusy is a task's attempt on a pool's machine, from its lease
	// to its end: the pool machine's time that its tasks used.
	KindPoolBusy = "pool_busy"
	// KindPoolIdle is a pool machine's life, start-up included, less the
	// time it held leases: the pool's own.
	KindPoolIdle = "pool_idle"
	// KindProvider is the answers of an OCR, embeddings or tags provider.
	KindProvider = "provider"
)

// Usage is one row of what a batch's phase consumed: machine time of one
// kind and guest, or one role's provider answers of one model.
type Usage struct {
	Phase string
	// Kind is one of the Kind constants.
	Kind string
	// Role is a provider's role (ocr, embeddings, tags); "" for machines.
	Role string
	// Resource is the guest size of machines, the model of a provider.
	Resource         string
	Attempts         int64
	Seconds          float64
	Requests         int64
	PromptTokens     int64
	CompletionTokens int64
}

// Cost is what a batch consumed and its estimated price: the cost object
// of the status document.
type Cost struct {
	// Currency is that of every estimate (USD).
	Currency string `json:"currency"`
	// EstimatedUSD sums the priced lines; Unpriced lists what has no
	// price (a guest or a model, "guest X" or "model Y"), left out of it.
	EstimatedUSD float64  `json:"estimated_usd"`
	Unpriced     []string `json:"unpriced"`
	Totals
	// Phases break it down by phase, in the phases' order as given.
	Phases []PhaseCost `json:"phases"`
}

// Totals are amounts consumed: machine-seconds of attempts (on machines
// of their own and on pools' machines) and of pools' idle machines, and
// provider requests and tokens.
type Totals struct {
	MachineSeconds   float64 `json:"machine_seconds"`
	PoolIdleSeconds  float64 `json:"pool_idle_seconds"`
	ProviderRequests int64   `json:"provider_requests"`
	PromptTokens     int64   `json:"prompt_tokens"`
	CompletionTokens int64   `json:"completion_tokens"`
}

// PhaseCost is one phase's share.
type PhaseCost struct {
	Phase        string  `json:"phase"`
	EstimatedUSD float64 `json:"estimated_usd"`
	Totals
	Lines []Line `json:"lines"`
}

// Line is one usage row, priced.
type Line struct {
	Kind string `json:"kind"`
	// Guest is a machine line's guest size ("" when it is not known: time
	// counted before guests were recorded).
	Guest string `json:"guest,omitempty"`
	// Role and Model name a provider line's.
	Role             string  `json:"role,omitempty"`
	Model            string  `json:"model,omitempty"`
	Attempts         int64   `json:"attempts,omitempty"`
	Seconds          float64 `json:"seconds,omitempty"`
	Requests         int64   `json:"requests,omitempty"`
	PromptTokens     int64   `json:"prompt_tokens,omitempty"`
	CompletionTokens int64   `json:"completion_tokens,omitempty"`
	// EstimatedUSD is the line's price; null when unpriced.
	EstimatedUSD *float64 `json:"estimated_usd"`
}

// Of prices rows at p. Phases come in the order of order (the batch's
// phases), then any other in the rows' order.
func Of(rows []Usage, p Prices, order []string) Cost {
	c := Cost{Currency: Currency, Unpriced: []string{}, Phases: []PhaseCost{}}
	byPhase := map[string]int{}
	for _, r := range rows {
		i, ok := byPhase[r.Phase]
		if !ok {
			i = len(c.Phases)
			byPhase[r.Phase] = i
			c.Phases = append(c.Phases, PhaseCost{Phase: r.Phase, Lines: []Line{}})
		}
		ph := &c.Phases[i]
		l, missing := line(r, p)
		ph.Lines = append(ph.Lines, l)
		ph.add(r)
		c.add(r)
		if l.EstimatedUSD != nil {
			ph.EstimatedUSD += *l.EstimatedUSD
		} else if !slices.Contains(c.Unpriced, missing) {
			c.Unpriced = append(c.Unpriced, missing)
		}
	}
	slices.SortStableFunc(c.Phases, func(a, b PhaseCost) int { return rank(order, a.Phase) - rank(order, b.Phase) })
	for i := range c.Phases {
		c.Phases[i].EstimatedUSD = round(c.Phases[i].EstimatedUSD)
		c.EstimatedUSD += c.Phases[i].EstimatedUSD
	}
	c.EstimatedUSD = round(c.EstimatedUSD)
	slices.Sort(c.Unpriced)
	return c
}

// line is r priced at p, or unpriced with what lacks a price.
func line(r Usage, p Prices) (Line, string) {
	l := Line{Kind: r.Kind, Attempts: r.Attempts, Seconds: math.Round(r.Seconds*1000) / 1000, Requests: r.Requests,
		PromptTokens: r.PromptTokens, CompletionTokens: r.CompletionTokens}
	if r.Kind == KindProvider {
		l.Role, l.Model = r.Role, r.Resource
		if r.PromptTokens == 0 && r.CompletionTokens == 0 {
			return priced(l, 0), "" // a local engine, or answers without usage: nothing to bill
		}
		tp, ok := p.TokensPer1K(r.Resource)
		if !ok {
			return l, "model " + r.Resource
		}
		return priced(l, (float64(r.PromptTokens)*tp.Prompt+float64(r.CompletionTokens)*tp.Completion)/1000), ""
	}
	l.Guest = r.Resource
	if r.Seconds == 0 {
		return priced(l, 0), ""
	}
	ps, ok := p.MachineSecond(r.Resource)
	if !ok {
		if r.Resource == "" {
			return l, "guest unknown"
		}
		return l, "guest " + r.Resource
	}
	return priced(l, r.Seconds*ps), ""
}

func priced(l Line, usd float64) Line {
	v := round(usd)
	l.EstimatedUSD = &v
	return l
}

// add counts r into t.
func (t *Totals) add(r Usage) {
	switch r.Kind {
	case KindTask, KindPoolBusy:
		t.MachineSeconds = math.Round((t.MachineSeconds+r.Seconds)*1000) / 1000
	case KindPoolIdle:
		t.PoolIdleSeconds = math.Round((t.PoolIdleSeconds+r.Seconds)*1000) / 1000
	case KindProvider:
		t.ProviderRequests += r.Requests
		t.PromptTokens += r.PromptTokens
		t.CompletionTokens += r.CompletionTokens
	}
}

// rank is phase's place in order, after every listed one if it is not.
func rank(order []string, phase string) int {
	if i := slices.Index(order, phase); i >= 0 {
		return i
	}
	return len(order)
}

// round keeps a price to a billionth of a dollar (a machine-second costs
// about a millionth), without the float sums' noise.
func round(usd float64) float64 { return math.Round(usd*1e9) / 1e9 }
