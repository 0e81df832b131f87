package textchunk_test

import (
	"math"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/arke-institute/orchestrator/textchunk"
)

// TestEstimateTokens compares the estimate with cl100k_base counts of the
// files in testdata/tokens, made once with the real tokenizer (tiktoken's
// vocabulary, outside this repository).
func TestEstimateTokens(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		file      string
		cl100k    int
		tolerance float64 // relative
	}{
		{"en.md", 151, 0.05},
		{"code.go.txt", 412, 0.05},
		{"ru.txt", 297, 0.05},
		{"ko.txt", 159, 0.05},
		{"zh.txt", 254, 0.08},
		{"ja.txt", 245, 0.08},
		{"fr.txt", 229, 0.15},
		{"de.txt", 216, 0.30}, // long compounds the vocabulary cuts small
	} {
		b, err := os.ReadFile(filepath.Join("testdata", "tokens", tc.file))
		require.NoError(t, err)
		got := textchunk.EstimateTokens(string(b))
		rel := float64(got-tc.cl100k) / float64(tc.cl100k)
		t.Logf("%-12s cl100k %4d estimate %4d (%+.1f%%)", tc.file, tc.cl100k, got, 100*rel)
		require.LessOrEqual(t, math.Abs(rel), tc.tolerance, "%s: estimate %d, cl100k %d", tc.file, got, tc.cl100k)
	}
}

func TestEstimateTokensSmall(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		in   string
		want int
	}{ // cl100k_base counts
		{"", 0},
		{" ", 1},
		{"hello", 1},
		{"The cat sat on the mat.", 7},
		{"end.\n\nNext", 3},
		{"(word", 1},
		{"12345678", 3},
		{"a 1", 3},
		{"a ", 2},
	} {
		require.Equal(t, tc.want, textchunk.EstimateTokens(tc.in), "%q", tc.in)
	}
}
