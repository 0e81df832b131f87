package search

import (
	"encoding/binary"
	"fmt"
	"math/bits"
)

// signature is a vector's binary signature, one bit a dimension set where
// the component is positive, packed into words first dimension first (the
// most significant bit of the first word), as Postgres's
// embedding_signature lays out a bit string. The Hamming distance of two
// signatures estimates the angle between their vectors (sign random
// projections, with the embedding's own axes as the projections).
type signature []uint64

// words is the number of 64-bit words a signature of dims bits takes.
func words(dims int) int { return (dims + 63) / 64 }

// signatureOf is v's signature.
func signatureOf(v []float32) signature {
	s := make(signature, words(len(v)))
	for i, x := range v {
		if x > 0 {
			s[i/64] |= 1 << (63 - uint(i%64))
		}
	}
	return s
}

// signatureFromBits reads a bit string of dims bits (pgtype.Bits' Bytes,
// most significant bit first) into dst, which is words(dims) long.
func signatureFromBits(dst []uint64, b []byte, dims int) error {
	if len(b) != (dims+7)/8 {
		return fmt.Errorf("a signature of %d bytes, want %d for %d dimensions", len(b), (dims+7)/8, dims)
	}
	for w := range dst {
		var chunk [8]byte
		copy(chunk[:], b[min(len(b), w*8):min(len(b), w*8+8)])
		dst[w] = binary.BigEndian.Uint64(chunk[:])
	}
	return nil
}

// distance is the Hamming distance of a and b, of the same length.
func distance(a, b []uint64) int {
	d := 0
	for i := range a {
		d += bits.OnesCount64(a[i] ^ b[i])
	}
	return d
}
