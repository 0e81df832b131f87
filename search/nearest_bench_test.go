package search

import (
	"math/rand/v2"
	"testing"
)

func BenchmarkNearest(b *testing.B) {
	for _, dims := range []int{512, 1536} {
		s := newSignatures(dims)
		rng := rand.New(rand.NewPCG(1, 2))
		const n = 1_000_000
		s.keys = make([]int64, n)
		s.coarse, s.fine = make([]uint64, n*s.cw), make([]uint64, n*s.fw)
		for i := range s.coarse {
			s.coarse[i] = rng.Uint64()
		}
		for i := range s.fine {
			s.fine[i] = rng.Uint64()
		}
		for i := range s.keys {
			s.keys[i] = int64(i)
		}
		q := make(signature, s.words)
		for i := range q {
			q[i] = rng.Uint64()
		}
		b.Run(map[int]string{512: "512", 1536: "1536"}[dims], func(b *testing.B) {
			for b.Loop() {
				s.nearest(q, 200)
			}
		})
	}
}
