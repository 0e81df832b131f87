package words_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/arke-institute/orchestrator/words"
)

func TestSplit(t *testing.T) {
	t.Parallel()
	require.Empty(t, words.Split(""))
	require.Equal(t, []string{"archive", "holds", "1200", "maps", "café", "naïve"},
		words.Split("The archive's holds: 1200 MAPS, a café, naïve."))
	require.Equal(t, []string{"绿", "茶", "tea"}, words.Split("绿茶 and tea"))
	require.True(t, words.Stopword("the"))
	require.False(t, words.Stopword("archive"))
}
