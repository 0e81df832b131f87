// Package cost prices what batches consumed: machine-seconds by guest size
// and provider tokens by model, at prices the operator configures
// (PRICE_MACHINE_SECOND, PRICE_TOKENS_PER_1K), in US dollars. It is pure
// arithmetic over the usage rows the database keeps (the usage table);
// an estimate, not a bill: the provider's invoice is the truth.
package cost

import (
	"fmt"
	"maps"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"github.com/arke-institute/orchestrator/setting"
)

// Currency is the currency of every price and estimate.
const Currency = "USD"

// Fly's public prices, per second of a machine's life: a month is 30 days
// of running (2,592,000 s). A shared CPU costs $1.94 a month with 256 MB
// of memory each, a performance CPU $31 with 2 GB each, and memory beyond
// that $5 per GB a month (https://fly.io/docs/about/pricing/, the
// cheapest regions such as ord and iad; others cost up to about a third
// more).
const (
	flyMonth             = 30 * 24 * 3600
	FlySharedCPUSecond   = 1.94 / flyMonth
	FlyPerfCPUSecond     = 31.0 / flyMonth
	FlyMemoryGBSecond    = 5.0 / flyMonth
	flySharedIncludedMB  = 256
	flyPerfIncludedMB    = 2048
	guestPattern         = `^(shared-cpu|performance)-([1-9][0-9]*)x-([1-9][0-9]*)mb$`
	machinePricesExample = "shared-cpu-2x-2048mb:0.0000044"
	tokenPricesExample   = "gpt-4o-mini:0.00015/0.0006"
)

var guestName = regexp.MustCompile(guestPattern)

// FlyMachineSecond is Fly's price of a second of a machine of guest (a
// phases.Guest name such as shared-cpu-2x-2048mb); false for a name it
// cannot read.
func FlyMachineSecond(guest string) (float64, bool) {
	m := guestName.FindStringSubmatch(guest)
	if m == nil {
		return 0, false
	}
	cpus, _ := strconv.Atoi(m[2])
	memory, _ := strconv.Atoi(m[3])
	perCPU, included := FlySharedCPUSecond, flySharedIncludedMB
	if m[1] == "performance" {
		perCPU, included = FlyPerfCPUSecond, flyPerfIncludedMB
	}
	extraGB := float64(max(0, memory-cpus*included)) / 1024
	return float64(cpus)*perCPU + extraGB*FlyMemoryGBSecond, true
}

// TokenPrice is a model's price per 1,000 tokens, of the prompt and of
// the completion.
type TokenPrice struct {
	Prompt     float64
	Completion float64
}

// Prices are what a machine-second and a thousand tokens cost.
type Prices struct {
	// Machine is the price of a machine-second by guest size
	// (PRICE_MACHINE_SECOND); a guest not listed costs what Fly asks
	// (FlyMachineSecond).
	Machine map[string]float64
	// Tokens is the price of 1,000 tokens by model (PRICE_TOKENS_PER_1K);
	// a model not listed is unpriced.
	Tokens map[string]TokenPrice
}

// MachineSecond is the price of a second of a machine of guest, and
// whether it has one.
func (p Prices) MachineSecond(guest string) (float64, bool) {
	if v, ok := p.Machine[guest]; ok {
		return v, true
	}
	return FlyMachineSecond(guest)
}

// TokensPer1K is model's price per 1,000 tokens, and whether it has one.
func (p Prices) TokensPer1K(model string) (TokenPrice, bool) {
	v, ok := p.Tokens[model]
	return v, ok
}

// Settings declares the prices' settings into p.
func Settings(p *Prices) setting.Group {
	return setting.Group{
		Title: "Cost",
		Doc:   "Prices of the cost estimates, in US dollars (see [Cost](operations.md#cost)).",
		Settings: []setting.Setting{
			setting.Func("PRICE_MACHINE_SECOND", "Fly's prices", "list of `guest:price`",
				"price of a machine-second by guest size, e.g. `"+machinePricesExample+"`; a guest not listed costs what Fly's public prices say (shared CPU $1.94 a month with 256 MB, performance CPU $31 with 2 GB, memory beyond $5 a GB)",
				func() { p.Machine = nil },
				func(v string) (err error) { p.Machine, err = ParseMachine(v); return err },
				func() string { return formatMachine(p.Machine) }),
			setting.Func("PRICE_TOKENS_PER_1K", "", "list of `model:price` or `model:prompt/completion`",
				"price of 1,000 provider tokens by model (OCR, embeddings, tags), one price or the prompt's and the completion's, e.g. `"+tokenPricesExample+"`; a model not listed is shown unpriced",
				func() { p.Tokens = nil },
				func(v string) (err error) { p.Tokens, err = ParseTokens(v); return err },
				func() string { return formatTokens(p.Tokens) }),
		},
	}
}

// entries splits a "name:value,name:value" list; a name may hold colons
// (the value follows the last).
func entries(v, what string) (map[string]string, error) {
	out := map[string]string{}
	for _, e := range strings.Split(v, ",") {
		if e = strings.TrimSpace(e); e == "" {
			continue
		}
		i := strings.LastIndex(e, ":")
		if i <= 0 {
			return nil, fmt.Errorf("a list of %s", what)
		}
		out[strings.TrimSpace(e[:i])] = strings.TrimSpace(e[i+1:])
	}
	return out, nil
}

// price reads a price: a number from 0.
func price(v string) (float64, bool) {
	f, err := strconv.ParseFloat(v, 64)
	return f, err == nil && f >= 0 && f < 1e9
}

// ParseMachine reads PRICE_MACHINE_SECOND: "guest:price,...".
func ParseMachine(v string) (map[string]float64, error) {
	what := "guest:price pairs such as " + machinePricesExample
	es, err := entries(v, what)
	if err != nil {
		return nil, err
	}
	out := make(map[string]float64, len(es))
	for name, value := range es {
		f, ok := price(value)
		if !ok {
			return nil, fmt.Errorf("a list of %s (%s has no price)", what, name)
		}
		out[name] = f
	}
	return out, nil
}

// ParseTokens reads PRICE_TOKENS_PER_1K: "model:price,..." or
// "model:prompt/completion,...".
func ParseTokens(v string) (map[string]TokenPrice, error) {
	what := "model:price or model:prompt/completion pairs such as " + tokenPricesExample
	es, err := entries(v, what)
	if err != nil {
		return nil, err
	}
	out := make(map[string]TokenPrice, len(es))
	for name, value := range es {
		in, outPart, split := strings.Cut(value, "/")
		if !split {
			outPart = in
		}
		p, ok1 := price(in)
		c, ok2 := price(outPart)
		if !ok1 || !ok2 {
			return nil, fmt.Errorf("a list of %s (%s has no price)", what, name)
		}
		out[name] = TokenPrice{Prompt: p, Completion: c}
	}
	return out, nil
}

func formatMachine(m map[string]float64) string {
	parts := make([]string, 0, len(m))
	for _, k := range slices.Sorted(maps.Keys(m)) {
		parts = append(parts, k+":"+strconv.FormatFloat(m[k], 'g', -1, 64))
	}
	return strings.Join(parts, ",")
}

func formatTokens(m map[string]TokenPrice) string {
	parts := make([]string, 0, len(m))
	for _, k := range slices.Sorted(maps.Keys(m)) {
		p := m[k]
		parts = append(parts, k+":"+strconv.FormatFloat(p.Prompt, 'g', -1, 64)+"/"+strconv.FormatFloat(p.Completion, 'g', -1, 64))
	}
	return strings.Join(parts, ",")
}
