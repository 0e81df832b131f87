package search

import (
	"cmp"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/arke-institute/orchestrator/embedding"
)

// TestSignatureEstimatesAngle: the share of bits two signatures differ in
// is about the angle between the vectors over pi, for dense and for sparse
// vectors (most components zero, as the local embedder's), and the bit
// string stored reads back as the signature.
func TestSignatureEstimatesAngle(t *testing.T) {
	t.Parallel()
	rng := rand.New(rand.NewPCG(1, 2))
	for _, tc := range []struct {
		name     string
		dims     int
		nonZeros int
	}{{"Dense512", 512, 512}, {"Sparse512", 512, 40}, {"Dense1536", 1536, 1536}, {"Sparse100", 100, 10}} {
		t.Run(tc.name, func(t *testing.T) {
			for range 20 {
				a, b := make([]float32, tc.dims), make([]float32, tc.dims)
				for range tc.nonZeros {
					i := rng.IntN(tc.dims)
					a[i] = float32(rng.NormFloat64())
					b[i] = a[i]
				}
				// b is a with some components changed: angles from small
				// to wide.
				for range rng.IntN(tc.nonZeros) {
					b[rng.IntN(tc.dims)] = float32(rng.NormFloat64())
				}
				angle := math.Acos(math.Max(-1, math.Min(1, float64(embedding.Cosine(a, b)))))
				n := signatureLen(tc.dims)
				got := float64(distance(signatureOf(a), signatureOf(b))) / float64(n)
				// The estimate's standard deviation is at most
				// 1/(2 sqrt(n)); the rotation's bits are not quite
				// independent.
				require.InDelta(t, angle/math.Pi, got, 4/math.Sqrt(float64(n)), "angle %.2f", angle)

				stored := Signature(a)
				require.EqualValues(t, n, stored.Len)
				back := make([]uint64, words(n))
				require.NoError(t, signatureFromBits(back, stored.Bytes, n))
				require.Equal(t, signatureOf(a), signature(back))
			}
		})
	}
	require.Error(t, signatureFromBits(make([]uint64, 1), []byte{1, 2}, 8), "a signature of another size")
}

// TestSignaturesRecall: the nearest signatures, reranked by the exact
// cosine, hold most of the exact 10 nearest vectors of the local
// embedder's (sparse, lexical) vectors of made-up texts for queries of a
// few words, a hard case: cosines are low and close together (20,000
// chunks, 4,000 past the coarse stage).
func TestSignaturesRecall(t *testing.T) {
	t.Parallel()
	const dims, chunks = 512, 20_000
	e := embedding.NewLocal(dims)
	rng := rand.New(rand.NewPCG(7, 8))
	vocabulary := make([]string, 500)
	for i := range vocabulary {
		vocabulary[i] = fmt.Sprintf("w%03dx", i)
	}
	text := func(n int) string {
		ws := make([]string, n)
		for i := range ws {
			ws[i] = vocabulary[rng.IntN(len(vocabulary))]
		}
		return strings.Join(ws, " ")
	}
	s := newSignatures(dims)
	vectors := make(map[int64][]float32, chunks)
	for i := range chunks {
		v := e.Vector(text(40))
		vectors[chunkKey(int64(i), 0)] = v
		require.NoError(t, s.add(int64(i), 0, Signature(v).Bytes))
	}
	found, want := 0, 0
	for range 20 {
		q := e.Vector(text(3 + rng.IntN(4)))
		cosines := make([]float32, 0, chunks)
		for _, v := range vectors {
			cosines = append(cosines, embedding.Cosine(q, v))
		}
		slices.SortFunc(cosines, func(a, b float32) int { return cmp.Compare(b, a) })
		tenth := cosines[9]
		for _, key := range s.nearest(signatureOf(q), vectorDepth) {
			if embedding.Cosine(q, vectors[key]) >= tenth {
				found++
			}
		}
		want += 10
	}
	recall := float64(found) / float64(want)
	t.Logf("recall@10: %.2f", recall)
	require.GreaterOrEqual(t, recall, 0.7)
}

// TestSignaturesNearestAndRemove: the index gives the nearest signatures
// first and keeps each version's entries right as others are removed.
func TestSignaturesNearestAndRemove(t *testing.T) {
	t.Parallel()
	const dims = 128
	s := newSignatures(dims)
	rng := rand.New(rand.NewPCG(3, 4))
	vectors := map[int64][]float32{}
	for doc := int64(1); doc <= 50; doc++ {
		for idx := int32(0); idx < 4; idx++ {
			v := make([]float32, dims)
			for i := range v {
				v[i] = float32(rng.NormFloat64())
			}
			vectors[chunkKey(doc, idx)] = v
			require.NoError(t, s.add(doc, idx, Signature(v).Bytes))
		}
	}
	require.Equal(t, 200, s.len())
	// A query near doc 7's chunk 2: a few components flipped.
	q := append([]float32(nil), vectors[chunkKey(7, 2)]...)
	for i := range 10 {
		q[i] = -q[i]
	}
	near := s.nearest(signatureOf(q), 5)
	require.Len(t, near, 5)
	require.Equal(t, chunkKey(7, 2), near[0])
	qs := signatureOf(q)
	for i := 1; i < len(near); i++ {
		require.LessOrEqual(t, distance(qs, signatureOf(vectors[near[i-1]])), distance(qs, signatureOf(vectors[near[i]])))
	}

	for _, doc := range []int64{7, 50, 1, 23} {
		s.remove(doc)
	}
	require.Equal(t, 184, s.len())
	require.NotContains(t, s.nearest(signatureOf(q), 200), chunkKey(7, 2))
	for doc, positions := range s.byDoc {
		require.Len(t, positions, 4)
		for _, p := range positions {
			d, _ := splitKey(s.keys[p])
			require.Equal(t, doc, d, "entry %d", p)
			require.Equal(t, signatureOf(vectors[s.keys[p]]), s.signature(int(p)))
		}
	}
	require.Len(t, s.nearest(signatureOf(q), 1000), 184)
}
