package search

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/arke-institute/orchestrator/embedding"
)

// TestQuantisedCosine: the cosine of a vector and another's quantised
// form is within about 0.001 of the exact cosine, for dense vectors (a provider's
// 1,536 dimensions) and sparse ones (the local embedder's); a zero vector
// quantises to zeros, and its cosine is 0.
func TestQuantisedCosine(t *testing.T) {
	t.Parallel()
	rng := rand.New(rand.NewPCG(3, 4))
	dense := func(dims int) []float32 {
		v := make([]float32, dims)
		for i := range v {
			v[i] = float32(rng.NormFloat64())
		}
		return v
	}
	local := embedding.NewLocal(512)
	worst := 0.0
	for i := range 200 {
		var a, b []float32
		switch i % 3 {
		case 0:
			a, b = dense(1536), dense(1536)
		case 1:
			// Near each other: b is a plus a little noise.
			a = dense(1536)
			b = make([]float32, len(a))
			for j := range a {
				b[j] = a[j] + 0.3*float32(rng.NormFloat64())
			}
		default:
			a, b = local.Vector("the mariner and the ship"), local.Vector(fmt.Sprint("a sailor's ship in a storm ", i))
		}
		q := Quantise(b)
		require.Len(t, q, len(b))
		got := cosineQuantised(a, embedding.Norm(a), q)
		worst = max(worst, math.Abs(float64(got-embedding.Cosine(a, b))))
	}
	t.Logf("largest error: %.4f", worst)
	require.Less(t, worst, 0.005)

	zero := make([]float32, 8)
	require.Equal(t, make([]byte, 8), Quantise(zero))
	require.Zero(t, cosineQuantised([]float32{1, 0, 0, 0, 0, 0, 0, 0}, 1, Quantise(zero)))
	// Components scaled to the largest, rounded half to even.
	require.Equal(t, []byte{127, 0, 2, 2, 0, 256 - 2, 256 - 127}, Quantise([]float32{127, 0.5, 1.5, 2.5, -0.5, -2.5, -127}))
}
