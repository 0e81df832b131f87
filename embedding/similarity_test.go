package embedding_test

import (
	"math"
	"math/rand/v2"
	"slices"
	"sort"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/arke-institute/orchestrator/embedding"
)

func randomVectors(n, dims int, seed uint64) [][]float32 {
	rng := rand.New(rand.NewPCG(seed, 1))
	out := make([][]float32, n)
	for i := range out {
		v := make([]float32, dims)
		for j := range v {
			v[j] = float32(rng.NormFloat64())
		}
		out[i] = v
	}
	return out
}

func TestCosine(t *testing.T) {
	t.Parallel()
	require.InDelta(t, 1, embedding.Cosine([]float32{1, 2, 3}, []float32{2, 4, 6}), 1e-6)
	require.InDelta(t, -1, embedding.Cosine([]float32{1, 0}, []float32{-3, 0}), 1e-6)
	require.InDelta(t, 0, embedding.Cosine([]float32{1, 0}, []float32{0, 5}), 1e-6)
	require.Zero(t, embedding.Cosine([]float32{0, 0}, []float32{1, 1}))
	require.InDelta(t, 30, embedding.Dot([]float32{1, 2, 3, 4, 5}, []float32{5, 4, 3, 2, 0}), 1e-6)
	v := embedding.Normalize([]float32{3, 4})
	require.InDeltaSlice(t, []float32{0.6, 0.8}, v, 1e-6)
	require.Equal(t, []float32{0, 0}, embedding.Normalize([]float32{0, 0}))
}

// bruteForce ranks by sorting every cosine: what TopK must agree with.
func bruteForce(q []float32, vs [][]float32, k int) []embedding.Match {
	all := make([]embedding.Match, len(vs))
	for i, v := range vs {
		all[i] = embedding.Match{Index: int64(i), Score: embedding.Cosine(q, v)}
	}
	sort.SliceStable(all, func(a, b int) bool { return all[a].Score > all[b].Score })
	return all[:min(k, len(all))]
}

func TestTopK(t *testing.T) {
	t.Parallel()
	vs := randomVectors(2000, 64, 1)
	q := randomVectors(1, 64, 2)[0]
	for _, k := range []int{0, 1, 10, 2000, 5000} {
		require.Equal(t, bruteForce(q, vs, k), embedding.TopK(q, vs, k), "k=%d", k)
	}
	// Ties go to the lower index.
	same := [][]float32{{1, 0}, {0, 1}, {2, 0}, {1, 0}}
	require.Equal(t, []embedding.Match{{Index: 0, Score: 1}, {Index: 2, Score: 1}, {Index: 3, Score: 1}}, embedding.TopK([]float32{1, 0}, same, 3))
}

func TestIndex(t *testing.T) {
	t.Parallel()
	vs := randomVectors(20000, 32, 3) // above one worker's share: searched in parallel
	x := embedding.NewIndex(32)
	for i, v := range vs {
		require.NoError(t, x.Set(int64(i), v))
	}
	require.Equal(t, 20000, x.Len())
	require.Error(t, x.Set(1, []float32{1}))

	q := randomVectors(1, 32, 4)[0]
	got, err := x.Search(q, 10)
	require.NoError(t, err)
	want := bruteForce(q, vs, 10)
	require.Len(t, got, 10)
	for i := range want {
		require.Equal(t, want[i].Index, got[i].Index)
		require.InDelta(t, want[i].Score, got[i].Score, 1e-5)
	}

	// Deleting the best and replacing the second moves the ranking on.
	x.Delete(want[0].Index, 999999)
	require.NoError(t, x.Set(want[1].Index, embedding.Normalize(slices.Clone(q))))
	got, err = x.Search(q, 2)
	require.NoError(t, err)
	require.Equal(t, want[1].Index, got[0].Index)
	require.InDelta(t, 1, got[0].Score, 1e-5)
	require.Equal(t, want[2].Index, got[1].Index)
	require.Equal(t, 19999, x.Len())

	_, err = x.Search([]float32{1}, 1)
	require.Error(t, err)
	empty, err := embedding.NewIndex(4).Search([]float32{1, 0, 0, 0}, 5)
	require.NoError(t, err)
	require.Empty(t, empty)
}

const (
	benchRows = 100_000
	benchDims = 512
)

func BenchmarkTopK100kx512(b *testing.B) {
	vs := randomVectors(benchRows, benchDims, 5)
	q := randomVectors(1, benchDims, 6)[0]
	for b.Loop() {
		embedding.TopK(q, vs, 10)
	}
}

// BenchmarkSearch100kx512 is a search end to end with the local embedder:
// embed the query, scan the index, keep the best 10. It reports p50 and
// p99 over its iterations.
func BenchmarkSearch100kx512(b *testing.B) {
	x := embedding.NewIndex(benchDims)
	for i, v := range randomVectors(benchRows, benchDims, 7) {
		if err := x.Set(int64(i), v); err != nil {
			b.Fatal(err)
		}
	}
	e := embedding.NewLocal(benchDims)
	var took []time.Duration
	for b.Loop() {
		start := time.Now()
		qv, err := e.Embed(b.Context(), []string{"what relative humidity should a parchment store room keep"})
		if err != nil {
			b.Fatal(err)
		}
		if _, err := x.Search(qv[0], 10); err != nil {
			b.Fatal(err)
		}
		took = append(took, time.Since(start))
	}
	slices.Sort(took)
	b.ReportMetric(float64(took[len(took)/2].Microseconds())/1000, "p50-ms")
	b.ReportMetric(float64(took[min(len(took)-1, int(math.Ceil(0.99*float64(len(took))))-1)].Microseconds())/1000, "p99-ms")
}
