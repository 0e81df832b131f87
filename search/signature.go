package search

import (
	"encoding/binary"
	"fmt"
	"math"
	"math/bits"
	"math/rand/v2"
	"sync"

	"github.com/jackc/pgx/v5/pgtype"
)

// maxSignatureBits is a signature's length for vectors of 512 dimensions
// or more.
const maxSignatureBits = 512

// signature is a vector's binary signature (SimHash): the signs of the
// vector after a fixed pseudo-random rotation, packed into words first bit
// first (the most significant bit of the first word), as a Postgres bit
// string lays them out. The share of bits two signatures differ in
// estimates the angle between their vectors over pi, dense or sparse (a
// plain sign of each component would not: the zeros of a sparse vector
// would weigh as much as its values).
type signature []uint64

// signatureLen is the length in bits of the signatures of vectors of dims
// dimensions: the rotation's size (dims rounded up to a power of 2), at
// most maxSignatureBits.
func signatureLen(dims int) int { return min(maxSignatureBits, rotationSize(dims)) }

// words is the number of 64-bit words a signature of n bits takes.
func words(n int) int { return (n + 63) / 64 }

// signatureOf is v's signature.
func signatureOf(v []float32) signature {
	x := rotate(v)
	n := signatureLen(len(v))
	s := make(signature, words(n))
	for i, c := range x[:n] {
		if c > 0 {
			s[i/64] |= 1 << (63 - uint(i%64))
		}
	}
	return s
}

// Signature is v's signature as chunk_signatures stores it (a bit
// string): what the embeddings step and the re-index write beside each
// vector.
func Signature(v []float32) pgtype.Bits {
	n := signatureLen(len(v))
	s := signatureOf(v)
	b := make([]byte, (n+7)/8)
	for i := range b {
		b[i] = byte(s[i/8] >> (56 - 8*uint(i%8)))
	}
	return pgtype.Bits{Bytes: b, Len: int32(n), Valid: true}
}

// signatureFromBits reads a bit string of n bits (pgtype.Bits' Bytes, most
// significant bit first) into dst, which is words(n) long.
func signatureFromBits(dst []uint64, b []byte, n int) error {
	if len(b) != (n+7)/8 {
		return fmt.Errorf("a signature of %d bytes, want %d (%d bits)", len(b), (n+7)/8, n)
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

// rotationSize is the size of the rotation of vectors of dims dimensions.
func rotationSize(dims int) int {
	n := 1
	for n < dims {
		n *= 2
	}
	return n
}

// rotationRounds is how many times rotate flips signs and mixes: two
// rounds spread even a vector of one non-zero component over every
// output.
const rotationRounds = 2

// rotate is v zero-padded to rotationSize and rotated: rotationRounds
// times, fixed pseudo-random sign flips then a Walsh-Hadamard transform
// (a randomized Hadamard transform, which acts on angles as a random
// rotation does, in n log n steps). The flips come from a fixed seed:
// every process and every version computes the same signatures, and a
// change to them is a change of every signature (a re-index).
func rotate(v []float32) []float32 {
	n := rotationSize(len(v))
	x := make([]float32, n)
	copy(x, v)
	for _, flips := range rotationFlips(n) {
		for i, f := range flips {
			if f {
				x[i] = -x[i]
			}
		}
		hadamard(x)
	}
	return x
}

// hadamard transforms x (of a power of 2 length) in place, unnormalised:
// signs are all a signature reads.
func hadamard(x []float32) {
	for h := 1; h < len(x); h *= 2 {
		for i := 0; i < len(x); i += 2 * h {
			for j := i; j < i+h; j++ {
				a, b := x[j], x[j+h]
				x[j], x[j+h] = a+b, a-b
			}
		}
	}
}

// flipsBySize holds rotationFlips' answers.
var flipsBySize sync.Map // int -> [][]bool

// rotationFlips are the sign flips of each round of the rotation of size
// n.
func rotationFlips(n int) [][]bool {
	if f, ok := flipsBySize.Load(n); ok {
		return f.([][]bool)
	}
	rng := rand.New(rand.NewPCG(0x5eed5e4c, uint64(n)))
	flips := make([][]bool, rotationRounds)
	for r := range flips {
		flips[r] = make([]bool, n)
		for i := range flips[r] {
			flips[r][i] = rng.Uint64()&1 == 1
		}
	}
	f, _ := flipsBySize.LoadOrStore(n, flips)
	return f.([][]bool)
}

// decodeVector reads a real[] in Postgres's binary array form (array_send):
// dimensions, a null flag, the element type, each dimension's length and
// lower bound, then each element's length and its 4 bytes, big-endian.
func decodeVector(b []byte) ([]float32, error) {
	if len(b) < 12 {
		return nil, fmt.Errorf("a vector of %d bytes: too short for an array", len(b))
	}
	ndim := int(binary.BigEndian.Uint32(b))
	if ndim == 0 {
		return []float32{}, nil
	}
	if ndim != 1 || len(b) < 20 {
		return nil, fmt.Errorf("a vector of %d dimensions, want 1", ndim)
	}
	n := int(binary.BigEndian.Uint32(b[12:]))
	data := b[20:]
	if len(data) != n*8 {
		return nil, fmt.Errorf("a vector of %d elements in %d bytes, want %d", n, len(data), n*8)
	}
	v := make([]float32, n)
	for i := range v {
		e := data[i*8 : i*8+8]
		if int32(binary.BigEndian.Uint32(e)) != 4 {
			return nil, fmt.Errorf("element %d of a vector is null or not 4 bytes", i)
		}
		v[i] = math.Float32frombits(binary.BigEndian.Uint32(e[4:]))
	}
	return v, nil
}
