// Package tagging gives chunks and documents short lists of lowercase
// tags (spec 003, step 3): a Tagger tags a batch of chunks, then the
// document from its chunks. OpenAI asks an OpenAI-compatible chat model
// for JSON; Local, the embedded default with no API, is a TF-IDF keyword
// extractor. Tags are always Normalize'd.
package tagging

import (
	"context"
	"slices"
	"strings"
	"unicode"
	"unicode/utf8"
)

// Bounds on tags.
const (
	// DefaultBatchSize is spec 003's: five chunks per request.
	DefaultBatchSize = 5
	// MaxChunkTags and MaxDocumentTags bound the tags of a chunk and of a
	// document.
	MaxChunkTags    = 8
	MaxDocumentTags = 12
	// MaxTagRunes bounds a tag's length; a longer one is dropped.
	MaxTagRunes = 40
)

// Tagger tags chunks and documents. Implementations are safe for
// concurrent use.
type Tagger interface {
	// TagChunks returns the tags of each text (a batch of chunks, at most
	// DefaultBatchSize for an API), in the texts' order: at most
	// MaxChunkTags normalised tags each. An OpenAI tagger's errors are
	// *provider.Error (or wrap one), except that a cancelled ctx yields
	// an error wrapping ctx.Err(). instructions, when not empty, are the
	// operator's own for this batch (its custom_prompts' general),
	// which an API tagger adds to its prompt.
	TagChunks(ctx context.Context, texts []string, instructions string) ([][]string, error)
	// TagDocument returns a document's tags, at most MaxDocumentTags,
	// from its chunks' texts and the tags TagChunks gave them (in the
	// same order; nil when there are none).
	TagDocument(ctx context.Context, texts []string, chunkTags [][]string, instructions string) ([]string, error)
	// Provider names who tags (the API's host, or "local"): what a rate
	// limit is keyed by.
	Provider() string
	// Model names the model.
	Model() string
}

// Normalize cleans tags: lower-cased, white space trimmed and collapsed,
// surrounding punctuation ("#", quotes, dots; not the end of "c++")
// removed, empty ones and ones
// over MaxTagRunes dropped, duplicates dropped (the first kept), at most
// limit kept.
func Normalize(tags []string, limit int) []string {
	out := make([]string, 0, min(len(tags), limit))
	for _, t := range tags {
		if len(out) >= limit {
			break
		}
		t = strings.Join(strings.Fields(strings.ToLower(t)), " ")
		t = strings.TrimLeftFunc(t, notAlnum)
		t = strings.TrimRightFunc(t, func(r rune) bool { return notAlnum(r) && r != '+' && r != '#' }) // c++, c#
		if t == "" || utf8.RuneCountInString(t) > MaxTagRunes || !utf8.ValidString(t) || slices.Contains(out, t) {
			continue
		}
		out = append(out, t)
	}
	return out
}

func notAlnum(r rune) bool { return !unicode.IsLetter(r) && !unicode.IsDigit(r) }
