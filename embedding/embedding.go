// Package embedding turns texts into vectors (spec 003, step 2) and ranks
// vectors by cosine similarity. An Embedder is either OpenAI, a client of
// an OpenAI-compatible /embeddings API, or Local, a feature-hashing
// embedder that needs no API (the embedded default): lexical only, but
// real enough that search works offline and tests can assert rankings.
package embedding

import (
	"context"
)

// Embedder turns texts into vectors. Implementations are safe for
// concurrent use.
type Embedder interface {
	// Embed returns one vector per text, in the texts' order, each
	// Dimensions() long. An OpenAI embedder's errors are *provider.Error
	// (or wrap one), except that a cancelled ctx yields an error wrapping
	// ctx.Err().
	Embed(ctx context.Context, texts []string) ([][]float32, error)
	// Dimensions is the length of every vector.
	Dimensions() int
	// Provider names who computes the vectors (the API's host, or
	// "local"): what a rate limit is keyed by.
	Provider() string
	// Model names the model; vectors of different models (or sizes) must
	// not be compared, so it is stored beside them.
	Model() string
}
