package ratelimit_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/arke-institute/orchestrator/ratelimit"
	"github.com/arke-institute/orchestrator/setting"
)

// TestSettingsPrefix: a bucket's settings are read under its prefix, with
// spec 004's defaults, and checked together.
func TestSettingsPrefix(t *testing.T) {
	t.Parallel()
	env := map[string]string{"EMBEDDINGS_MAX_REFILL_RATE": "40", "MAX_REFILL_RATE": "7", "EMBEDDINGS_MIN_MAX_TOKENS": "9"}
	var a ratelimit.Adaptive
	require.NoError(t, setting.Load(func(k string) (string, bool) { v, ok := env[k]; return v, ok },
		[]setting.Group{{Settings: ratelimit.Settings(&a, "EMBEDDINGS_", "the embeddings bucket")}}))
	require.Equal(t, 40.0, a.MaxRefillRate, "a prefixed name is read, not the unprefixed one")
	require.Equal(t, ratelimit.DefaultAdaptive().InitialMaxTokens, a.InitialMaxTokens)
	require.Equal(t, []string{"EMBEDDINGS_MIN_MAX_TOKENS <= EMBEDDINGS_INITIAL_MAX_TOKENS <= EMBEDDINGS_MAX_MAX_TOKENS must hold, got 9, 5, 1000"}, a.Problems("EMBEDDINGS_"))
	require.Empty(t, ratelimit.DefaultAdaptive().Problems(""))
}
