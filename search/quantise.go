package search

import (
	"math"
)

// Quantise is v at 8 bits a component, as chunk_signatures stores it
// beside the signature: each component over the largest one's magnitude,
// times 127, rounded half to even (as Postgres's round of a double, which
// the migration that added the column used), as a signed byte. A zero
// vector is all zeros. The cosine of a vector and another's quantised
// form (cosineQuantised) is within about 0.001 of the exact one.
func Quantise(v []float32) []byte {
	var top float64
	for _, x := range v {
		top = max(top, math.Abs(float64(x)))
	}
	out := make([]byte, len(v))
	if top == 0 {
		return out
	}
	for i, x := range v {
		out[i] = byte(int8(math.RoundToEven(float64(x) * 127 / top)))
	}
	return out
}

// cosineQuantised is the cosine of v and the vector q is the quantised
// form of (Quantise), 0 when either is zero. norm is v's length.
func cosineQuantised(v []float32, norm float32, q []byte) float32 {
	var dot, qq float32
	for i, b := range q[:len(v)] {
		c := float32(int8(b))
		dot += v[i] * c
		qq += c * c
	}
	if norm == 0 || qq == 0 {
		return 0
	}
	return dot / (norm * float32(math.Sqrt(float64(qq))))
}
