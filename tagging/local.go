package tagging

import (
	"cmp"
	"context"
	"math"
	"slices"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/arke-institute/orchestrator/provider"
	"github.com/arke-institute/orchestrator/words"
)

// LocalModel names Local's algorithm, for Model.
const LocalModel = "local-tfidf-v1"

// Local is a Tagger that needs no API: TF-IDF keywords. A chunk's
// candidates are its words (English stopwords, numbers and words under
// three letters left out; plural and singular counted as one) and the
// word pairs it repeats (and, in scripts without spaces, its character
// pairs); common verbs, adjectives and adverbs are not candidates; each scores (1 + ln tf) x idf, where idf is computed over the
// texts of the call (a batch of chunks: a word in every chunk of the
// batch says less about any one of them), doubled for words of a heading.
// A document's tags are its candidates by their scores summed over its
// chunks, each chunk's own tags adding a vote. Ties go to the earlier
// word. It is deterministic.
type Local struct{}

var _ Tagger = Local{}

// Provider is "local".
func (Local) Provider() string { return "local" }

// Model is LocalModel.
func (Local) Model() string { return LocalModel }

// chunkTagCount is how many tags Local gives a chunk.
const chunkTagCount = 5

// TagChunks returns each text's best candidates.
func (Local) TagChunks(ctx context.Context, texts []string, _ string) ([][]string, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	docs := make([]terms, len(texts))
	df := map[string]int{}
	for i, t := range texts {
		docs[i] = termsOf(t)
		for k := range docs[i].tf {
			df[k]++
		}
	}
	out := make([][]string, len(texts))
	for i, d := range docs {
		scores := map[string]float64{}
		for k, tf := range d.tf {
			idf := math.Log(float64(len(texts)+1)/float64(df[k]+1)) + 1
			scores[k] = (1 + math.Log(tf)) * idf
		}
		out[i] = Normalize(d.best(scores, chunkTagCount), MaxChunkTags)
	}
	// A local call is a request that reports no tokens.
	provider.Record(ctx, LocalModel, provider.Usage{Requests: 1})
	return out, nil
}

// TagDocument sums the chunks' candidate scores and adds a vote per chunk
// tag.
func (Local) TagDocument(ctx context.Context, texts []string, chunkTags [][]string, _ string) ([]string, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	all := terms{tf: map[string]float64{}, forms: map[string]map[string]int{}, first: map[string]int{}}
	scores := map[string]float64{}
	offset := 0
	for _, t := range texts {
		d := termsOf(t)
		for k, tf := range d.tf {
			scores[k] += 1 + math.Log(tf)
		}
		all.merge(d, offset)
		offset += len(t) + 1
	}
	for _, tags := range chunkTags {
		for _, tag := range tags {
			k := key(tag)
			scores[k]++
			if _, ok := all.forms[k]; !ok {
				all.forms[k] = map[string]int{tag: 1}
				all.first[k] = offset
				offset++
			}
		}
	}
	provider.Record(ctx, LocalModel, provider.Usage{Requests: 1})
	return Normalize(all.best(scores, MaxDocumentTags), MaxDocumentTags), nil
}

// terms are a text's candidates: by key, their weighted count, the forms
// they took and where they first appear.
type terms struct {
	tf    map[string]float64
	forms map[string]map[string]int
	first map[string]int
}

func (t terms) add(k, form string, weight float64, at int) {
	t.tf[k] += weight
	if t.forms[k] == nil {
		t.forms[k] = map[string]int{}
		t.first[k] = at
	}
	t.forms[k][form]++
}

func (t terms) merge(o terms, offset int) {
	for k, tf := range o.tf {
		t.tf[k] += tf
		if t.forms[k] == nil {
			t.forms[k] = map[string]int{}
			t.first[k] = o.first[k] + offset
		}
		for f, n := range o.forms[k] {
			t.forms[k][f] += n
		}
	}
}

// best returns the n keys of highest score (ties: the first seen), each as
// its most frequent form.
func (t terms) best(scores map[string]float64, n int) []string {
	keys := make([]string, 0, len(scores))
	for k := range scores {
		if _, ok := t.forms[k]; ok {
			keys = append(keys, k)
		}
	}
	slices.SortFunc(keys, func(a, b string) int {
		if c := cmp.Compare(scores[b], scores[a]); c != 0 {
			return c
		}
		return cmp.Or(cmp.Compare(t.first[a], t.first[b]), strings.Compare(a, b))
	})
	// A word is not given beside a pair that holds it, in either order.
	var out, chosen []string
	for _, k := range keys {
		if len(out) == n {
			break
		}
		if slices.ContainsFunc(chosen, func(c string) bool { return overlaps(c, k) }) {
			continue
		}
		chosen = append(chosen, k)
		out = append(out, t.form(k))
	}
	return out
}

// overlaps says whether keys a and b share a word, one of them a pair.
func overlaps(a, b string) bool {
	if !strings.Contains(a, " ") && !strings.Contains(b, " ") {
		return false
	}
	for _, w := range strings.Fields(a) {
		if slices.Contains(strings.Fields(b), w) {
			return true
		}
	}
	return false
}

// form is the most frequent form of key k (ties: the shortest, then the
// first in order).
func (t terms) form(k string) string {
	var best string
	for f, n := range t.forms[k] {
		m := t.forms[k][best]
		if best == "" || n > m || n == m && (len(f) < len(best) || len(f) == len(best) && f < best) {
			best = f
		}
	}
	return best
}

// termsOf finds a text's candidates, words of heading lines counting
// twice. Pairs (of words, or of characters in scripts without spaces)
// count only when the text repeats them, then half as much again as
// words: they say more.
func termsOf(text string) terms {
	t := terms{tf: map[string]float64{}, forms: map[string]map[string]int{}, first: map[string]int{}}
	type pair struct {
		form   string
		n      int
		weight float64
		first  int
	}
	pairs := map[string]*pair{}
	addPair := func(k, form string, weight float64, at int) {
		p := pairs[k]
		if p == nil {
			p = &pair{form: form, first: at}
			pairs[k] = p
		}
		p.n++
		p.weight += weight
	}
	at := 0
	for line := range strings.Lines(text) {
		weight := 1.0
		if strings.HasPrefix(strings.TrimSpace(line), "#") {
			weight = 2
		}
		// Candidates are cut at punctuation: a pair never spans a comma.
		for _, phrase := range strings.FieldsFunc(line, func(r rune) bool { return unicode.IsPunct(r) && r != '-' && r != '\'' && r != '’' }) {
			ws := words.Split(phrase)
			for i, w := range ws {
				at++
				if isCJK(w) {
					// One character says little: pairs are the candidates.
					if i > 0 && isCJK(ws[i-1]) && !strings.ContainsAny(ws[i-1]+w, genericFunctionChars) {
						addPair(ws[i-1]+w, ws[i-1]+w, weight, at-1)
					}
					continue
				}
				if !keep(w) {
					continue
				}
				t.add(key(w), w, weight, at)
				if i > 0 && keep(ws[i-1]) && !isCJK(ws[i-1]) {
					addPair(key(ws[i-1])+" "+key(w), ws[i-1]+" "+w, weight, at-1)
				}
			}
		}
	}
	for k, p := range pairs {
		if p.n >= 2 { // a pair met once is a chance meeting
			t.add(k, p.form, 1.5*p.weight, p.first)
		}
	}
	return t
}

// keep says whether w may be a tag: three letters or more, not a number,
// not a generic word.
func keep(w string) bool {
	if utf8.RuneCountInString(w) < 3 || generic(w) {
		return false
	}
	return strings.ContainsFunc(w, unicode.IsLetter)
}

// key folds a word's plural into its singular: "bees" and "bee",
// "colonies" and "colony" count as one.
func key(w string) string {
	switch {
	case len(w) > 4 && strings.HasSuffix(w, "ies"):
		return w[:len(w)-3] + "y"
	case len(w) > 4 && (strings.HasSuffix(w, "ches") || strings.HasSuffix(w, "shes") || strings.HasSuffix(w, "xes") || strings.HasSuffix(w, "sses")):
		return w[:len(w)-2]
	case len(w) > 3 && strings.HasSuffix(w, "s") && !strings.HasSuffix(w, "ss") && !strings.HasSuffix(w, "us") && !strings.HasSuffix(w, "is"):
		return w[:len(w)-1]
	}
	return w
}

func isCJK(w string) bool {
	r, _ := utf8.DecodeRuneInString(w)
	return unicode.In(r, unicode.Han, unicode.Hiragana, unicode.Katakana, unicode.Thai)
}
