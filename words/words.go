// Package words cuts text into the words the local embedder and tagger
// count: lower-cased runs of letters and digits, without English
// stopwords.
package words

import (
	"strings"
	"unicode"
)

// Split returns text's words: runs of letters and digits (with their
// combining marks), lower-cased, without English stopwords and one-letter
// words ("archive's" gives "archive"); each Han, kana or Thai character is
// a word of its own, as those scripts put no space between words.
func Split(text string) []string {
	var out []string
	var cur strings.Builder
	end := func() {
		if cur.Len() == 0 {
			return
		}
		w := cur.String()
		cur.Reset()
		if len([]rune(w)) > 1 && !Stopword(w) {
			out = append(out, w)
		}
	}
	for _, r := range text {
		switch {
		case unicode.In(r, unicode.Han, unicode.Hiragana, unicode.Katakana, unicode.Thai):
			end()
			out = append(out, string(r))
		case unicode.IsLetter(r) || unicode.IsDigit(r) || unicode.IsMark(r) && cur.Len() > 0:
			cur.WriteRune(unicode.ToLower(r))
		default:
			end()
		}
	}
	end()
	return out
}
