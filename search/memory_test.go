package search

import (
	"context"
	"math/rand/v2"
	"testing"

	"github.com/jackc/pgx/v5/pgtype"
	"github.com/stretchr/testify/require"

	"github.com/arke-institute/orchestrator/internal/harness/dbtest"
)

// TestSignatureMatchesPostgres: the signature Go computes for a query is
// the one Postgres's embedding_signature stores for the same vector, at
// sizes that fill whole words and that do not.
func TestSignatureMatchesPostgres(t *testing.T) {
	t.Parallel()
	pool := dbtest.New(t)
	rng := rand.New(rand.NewPCG(1, 2))
	for _, dims := range []int{8, 64, 100, 512, 1536} {
		v := make([]float32, dims)
		for i := range v {
			v[i] = float32(rng.NormFloat64())
		}
		v[0] = 0 // zero is not positive
		var bits pgtype.Bits
		require.NoError(t, pool.QueryRow(context.Background(), "SELECT embedding_signature($1::real[])", v).Scan(&bits))
		require.EqualValues(t, dims, bits.Len)
		stored := make([]uint64, words(dims))
		require.NoError(t, signatureFromBits(stored, bits.Bytes, dims))
		require.Equal(t, []uint64(signatureOf(v)), stored, "%d dimensions", dims)
	}
	require.Error(t, signatureFromBits(make([]uint64, 1), []byte{1, 2}, 8), "a signature of another size")
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
			bits := make([]byte, dims/8)
			for w, x := range signatureOf(v) {
				for b := range 8 {
					bits[w*8+b] = byte(x >> (56 - 8*b))
				}
			}
			require.NoError(t, s.add(doc, idx, bits))
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
