package cost_test

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/arke-institute/orchestrator/cost"
	"github.com/arke-institute/orchestrator/phases"
	"github.com/arke-institute/orchestrator/setting"
)

func TestFlyMachineSecond(t *testing.T) {
	t.Parallel()
	month := 30 * 24 * 3600.0
	for _, tc := range []struct {
		guest   string
		monthly float64 // Fly's published monthly price
	}{
		{"shared-cpu-1x-256mb", 1.94},
		{"shared-cpu-1x-1024mb", 5.69},
		{"shared-cpu-2x-1024mb", 6.38},
		{"shared-cpu-2x-2048mb", 11.38},
		{"performance-1x-2048mb", 31},
		{"performance-2x-8192mb", 82},
	} {
		v, ok := cost.FlyMachineSecond(tc.guest)
		require.True(t, ok, tc.guest)
		require.InDelta(t, tc.monthly, v*month, 1e-9, tc.guest)
	}
	for _, bad := range []string{"", "unknown", "a100-40gb", "shared-cpu-0x-256mb"} {
		_, ok := cost.FlyMachineSecond(bad)
		require.False(t, ok, bad)
	}
	require.Equal(t, "shared-cpu-2x-2048mb", phases.Guest{MemoryMB: 2048, CPUs: 2, CPUKind: "shared"}.Name())
	require.Equal(t, "performance-4x-8192mb", phases.Guest{MemoryMB: 8192, CPUs: 4, CPUKind: "performance"}.Name())
}

func TestSettings(t *testing.T) {
	t.Parallel()
	var p cost.Prices
	lookup := func(env map[string]string) func(string) (string, bool) {
		return func(k string) (string, bool) { v, ok := env[k]; return v, ok }
	}
	groups := []setting.Group{cost.Settings(&p)}
	require.NoError(t, setting.Load(lookup(map[string]string{
		"PRICE_MACHINE_SECOND": "shared-cpu-2x-2048mb:0.000005, custom:1e-6",
		"PRICE_TOKENS_PER_1K":  "gpt-4o-mini:0.00015/0.0006,llama3:8b:0.0001",
	}), groups))
	require.Equal(t, map[string]float64{"shared-cpu-2x-2048mb": 0.000005, "custom": 1e-6}, p.Machine)
	require.Equal(t, map[string]cost.TokenPrice{"gpt-4o-mini": {Prompt: 0.00015, Completion: 0.0006}, "llama3:8b": {Prompt: 0.0001, Completion: 0.0001}}, p.Tokens,
		"a model's name may hold colons; one price is both")

	require.NoError(t, setting.Load(lookup(nil), groups))
	require.Nil(t, p.Machine, "the default: Fly's prices")
	require.Nil(t, p.Tokens)

	err := setting.Load(lookup(map[string]string{"PRICE_MACHINE_SECOND": "shared-cpu-1x", "PRICE_TOKENS_PER_1K": "m:-1"}), groups)
	require.ErrorContains(t, err, "PRICE_MACHINE_SECOND must be a list of guest:price pairs")
	require.ErrorContains(t, err, "PRICE_TOKENS_PER_1K must be a list of model:price")
}

// TestOf: known amounts give known prices, per line, phase and batch;
// what has no price is named and left out.
func TestOf(t *testing.T) {
	t.Parallel()
	prices := cost.Prices{
		Machine: map[string]float64{"shared-cpu-2x-1024mb": 0.000002},
		Tokens:  map[string]cost.TokenPrice{"gpt": {Prompt: 0.001, Completion: 0.002}},
	}
	flySecond, _ := cost.FlyMachineSecond("shared-cpu-2x-2048mb")
	rows := []cost.Usage{
		{Phase: "OCR", Kind: cost.KindProvider, Role: "ocr", Resource: "gpt", Requests: 4, PromptTokens: 4000, CompletionTokens: 80},
		{Phase: "OCR", Kind: cost.KindProvider, Role: "ocr", Resource: "other", Requests: 1, PromptTokens: 10},
		{Phase: "OCR", Kind: cost.KindProvider, Role: "ocr", Resource: "tesseract 5", Requests: 3},
		{Phase: "IMAGE_PROCESSING", Kind: cost.KindTask, Resource: "shared-cpu-2x-2048mb", Attempts: 3, Seconds: 100},
		{Phase: "TIFF_CONVERSION", Kind: cost.KindPoolBusy, Resource: "shared-cpu-2x-1024mb", Attempts: 2, Seconds: 30},
		{Phase: "TIFF_CONVERSION", Kind: cost.KindPoolIdle, Resource: "shared-cpu-2x-1024mb", Attempts: 1, Seconds: 20},
		{Phase: "TIFF_CONVERSION", Kind: cost.KindTask, Resource: "", Attempts: 1, Seconds: 5},
	}
	c := cost.Of(rows, prices, []string{"TIFF_CONVERSION", "IMAGE_PROCESSING", "OCR"})
	require.Equal(t, "USD", c.Currency)
	require.Equal(t, []string{"guest unknown", "model other"}, c.Unpriced)
	require.Equal(t, cost.Totals{MachineSeconds: 135, PoolIdleSeconds: 20, ProviderRequests: 8, PromptTokens: 4010, CompletionTokens: 80}, c.Totals)
	require.Equal(t, []string{"TIFF_CONVERSION", "IMAGE_PROCESSING", "OCR"}, []string{c.Phases[0].Phase, c.Phases[1].Phase, c.Phases[2].Phase})

	tiff, image, ocr := c.Phases[0], c.Phases[1], c.Phases[2]
	require.InDelta(t, 50*0.000002, tiff.EstimatedUSD, 1e-12, "30 busy + 20 idle seconds; the unknown guest's 5 left out")
	require.Nil(t, tiff.Lines[2].EstimatedUSD)
	require.InDelta(t, 100*flySecond, image.EstimatedUSD, 1e-9, "an unlisted guest at Fly's price")
	require.InDelta(t, 4*0.001+0.08*0.002, ocr.EstimatedUSD, 1e-12)
	require.Nil(t, ocr.Lines[1].EstimatedUSD, "a model without a price")
	require.Equal(t, 0.0, *ocr.Lines[2].EstimatedUSD, "a local engine's requests cost nothing")
	require.InDelta(t, tiff.EstimatedUSD+image.EstimatedUSD+ocr.EstimatedUSD, c.EstimatedUSD, 1e-12)

	b, err := json.Marshal(cost.Of(nil, prices, nil))
	require.NoError(t, err)
	require.JSONEq(t, `{"currency": "USD", "estimated_usd": 0, "unpriced": [], "machine_seconds": 0, "pool_idle_seconds": 0,
		"provider_requests": 0, "prompt_tokens": 0, "completion_tokens": 0, "phases": []}`, string(b))
}
