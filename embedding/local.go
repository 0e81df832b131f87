package embedding

import (
	"context"
	"hash/fnv"
	"math"

	"github.com/arke-institute/orchestrator/provider"
	"github.com/arke-institute/orchestrator/words"
)

// LocalModel names Local's algorithm, for Model; a change to it that
// changes vectors must change the name.
const LocalModel = "local-hashing-v1"

// The weights of Local's features, relative to a word.
const (
	bigramWeight  = 0.5
	trigramWeight = 0.5
)

// Local is an Embedder that needs no API: feature hashing ("the hashing
// trick") of a text's words, word pairs and the character trigrams of its
// words into Dimensions buckets, each feature adding its sublinear term
// frequency (1 + ln tf, times the feature's weight) with a sign from its
// hash, then L2 normalisation. English stopwords are left out; letters
// are lower-cased; each Han, kana or Thai character counts as a word (see
// words.Split).
//
// It is lexical only: texts are near when they share words (or, through
// the trigrams, forms of words: "archive", "archives", "archival"), never
// because they mean the same thing in other words. It is deterministic and
// needs no state: the same text always gives the same vector.
type Local struct {
	dims int
}

var _ Embedder = Local{}

// NewLocal returns a Local embedder of dims dimensions
// (DefaultDimensions if dims < 1).
func NewLocal(dims int) Local {
	if dims < 1 {
		dims = DefaultDimensions
	}
	return Local{dims: dims}
}

// Embed computes each text's vector; it never fails but for a cancelled
// ctx. A text with no word gives the zero vector.
func (l Local) Embed(ctx context.Context, texts []string) ([][]float32, error) {
	out := make([][]float32, len(texts))
	for i, t := range texts {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		out[i] = l.Vector(t)
	}
	// A local call is a request that reports no tokens.
	provider.Record(ctx, LocalModel, provider.Usage{Requests: 1})
	return out, nil
}

// Vector is text's embedding.
func (l Local) Vector(text string) []float32 {
	counts := map[string]float64{}
	ws := words.Split(text)
	for i, w := range ws {
		counts["w:"+w]++
		if i > 0 {
			counts["b:"+ws[i-1]+" "+w] += bigramWeight
		}
		if r := []rune(w); len(r) >= 4 {
			padded := append(append([]rune{'^'}, r...), '$')
			for j := 0; j+3 <= len(padded); j++ {
				counts["t:"+string(padded[j:j+3])] += trigramWeight
			}
		}
	}
	v := make([]float64, l.dims)
	for f, tf := range counts {
		h := fnv.New64a()
		_, _ = h.Write([]byte(f))
		sum := h.Sum64()
		weight := 1 + math.Log(tf)
		if tf < 1 {
			weight = tf // a weighted feature seen once keeps its weight
		}
		if sum>>63 == 1 {
			weight = -weight
		}
		v[sum%uint64(l.dims)] += weight
	}
	var norm float64
	for _, x := range v {
		norm += x * x
	}
	out := make([]float32, l.dims)
	if norm == 0 {
		return out
	}
	norm = math.Sqrt(norm)
	for i, x := range v {
		out[i] = float32(x / norm)
	}
	return out
}

// Dimensions is the vectors' length.
func (l Local) Dimensions() int { return l.dims }

// Provider is "local".
func (l Local) Provider() string { return "local" }

// Model is LocalModel.
func (l Local) Model() string { return LocalModel }
