package textchunk

import (
	"unicode"
	"unicode/utf8"
)

// EstimateTokens approximates how many tokens OpenAI's cl100k_base
// encoding (text-embedding-3-*, GPT-4) makes of s, offline and without its
// 1.7 MB vocabulary. It follows the encoding's pre-tokenisation: s is cut
// into runs of letters, digits, punctuation and white space, and each run
// is costed by a rule fitted to real counts (the constants below).
//
// The vocabulary's own words are not known, so languages whose words it
// holds whole (French, German's long compounds) are underestimated more
// than English prose, markdown, code or scripts without spaces;
// tokens_test.go holds each sample of testdata/tokens to its measured
// error against cl100k_base.
func EstimateTokens(s string) int {
	t := estimate(s)
	if t > 0 && t < 1 {
		return 1
	}
	return int(t + 0.5)
}

// The costs of the runs, fitted to cl100k_base counts of English, French,
// German, Russian, Chinese, Japanese and Korean text, markdown and Go code.
const (
	// A lower-case Latin word (with the space before it) is one token up
	// to wordRunes letters, then 1/8 token a letter up to 12 letters and a
	// quarter token a letter after that (identifiers, rare words).
	wordRunes = 6
	// A word with two capitals or more (CamelCase, ALL_CAPS parts) costs
	// a token plus 1/capsRunesPerToken a letter after the second.
	capsRunesPerToken = 6.0
	// A word with accented letters splits sooner: a token plus
	// 1/accentedRunesPerToken a letter after the fourth.
	accentedRunesPerToken = 3.0
	// Other alphabets (Cyrillic, Greek, Arabic...): a token per two letters.
	otherRunesPerToken = 2.0
	// Han, kana, hangul and Thai: a little more than a token a character.
	cjkTokensPerRune = 1.15
	// Box drawing and block elements come in long runs the vocabulary has.
	boxTokensPerRune = 0.3
)

func estimate(s string) float64 {
	var t float64
	afterPunct := false // the previous run was punctuation
	for i := 0; i < len(s); {
		wasPunct := afterPunct
		afterPunct = false
		r, size := utf8.DecodeRuneInString(s[i:])
		j := i + size
		switch {
		case isCJK(r):
			n := 1
			for j < len(s) {
				r2, sz := utf8.DecodeRuneInString(s[j:])
				if !isCJK(r2) {
					break
				}
				n++
				j += sz
			}
			t += float64(n) * cjkTokensPerRune
		case isWordRune(r):
			var latin, other, upper, accented int
			for j = i; j < len(s); {
				r2, sz := utf8.DecodeRuneInString(s[j:])
				if !isWordRune(r2) || isCJK(r2) {
					break
				}
				switch {
				case r2 < utf8.RuneSelf:
					latin++
					if 'A' <= r2 && r2 <= 'Z' {
						upper++
					}
				case unicode.Is(unicode.Latin, r2) || unicode.IsMark(r2):
					latin++
					accented++
				default:
					other++
				}
				j += sz
			}
			t += wordCost(latin, upper, accented) + float64(other)/otherRunesPerToken
		case '0' <= r && r <= '9' || r >= utf8.RuneSelf && unicode.IsDigit(r):
			n := 1
			for j < len(s) {
				r2, sz := utf8.DecodeRuneInString(s[j:])
				if !unicode.IsDigit(r2) {
					break
				}
				n++
				j += sz
			}
			t += float64((n + 2) / 3) // cl100k cuts numbers into groups of three
		case unicode.IsSpace(r):
			// Newlines make one token (none straight after punctuation,
			// which takes them in); the white space after the last of them
			// is a token when longer than one character (a lone space joins
			// the word after it).
			newline, indent := false, 0
			j = i
			if wasPunct {
				for j < len(s) && (s[j] == '\n' || s[j] == '\r') {
					j++
				}
			}
			for j < len(s) {
				r2, sz := utf8.DecodeRuneInString(s[j:])
				if !unicode.IsSpace(r2) {
					break
				}
				if r2 == '\n' || r2 == '\r' {
					newline, indent = true, 0
				} else {
					indent++
				}
				j += sz
			}
			if newline {
				t++
			}
			switch {
			case indent > 1:
				t++
			case indent == 1 && j < len(s):
				// One space joins the word or punctuation after it, but
				// not a number.
				if r2, _ := utf8.DecodeRuneInString(s[j:]); '0' <= r2 && r2 <= '9' || unicode.IsDigit(r2) {
					t++
				}
			case indent == 1 && !newline:
				t++ // trailing
			}
		default:
			// A run of punctuation: a token, and one more per three
			// characters after the first; symbols outside Latin-1 (arrows,
			// emoji) a token each.
			var n, box, wide int
			for j = i; j < len(s); {
				r2, sz := utf8.DecodeRuneInString(s[j:])
				if isWordRune(r2) || unicode.IsDigit(r2) || unicode.IsSpace(r2) {
					break
				}
				switch {
				case 0x2500 <= r2 && r2 <= 0x259F:
					box++
				case sz > 2:
					wide++
				default:
					n++
				}
				j += sz
			}
			afterPunct = true
			if n == 1 && box == 0 && wide == 0 && !spaceBefore(s, i) && j < len(s) {
				// One mark between a word and the next letter ("_name",
				// "(word", ".com") joins that word.
				if r2, _ := utf8.DecodeRuneInString(s[j:]); isWordRune(r2) {
					afterPunct = false
					break
				}
			}
			if n > 0 {
				t += 1 + float64(n-1)/3
			}
			t += float64(box)*boxTokensPerRune + float64(wide)
		}
		i = j
	}
	return t
}

// spaceBefore says whether the rune before s[i] is white space.
func spaceBefore(s string, i int) bool {
	if i == 0 {
		return false
	}
	r, _ := utf8.DecodeLastRuneInString(s[:i])
	return unicode.IsSpace(r)
}

// wordCost is the cost of a word of n Latin letters, of which upper are
// capitals and accented are outside ASCII.
func wordCost(n, upper, accented int) float64 {
	switch {
	case n == 0:
		return 0
	case accented > 0:
		return 1 + float64(max(0, n-4))/accentedRunesPerToken
	case upper > 1:
		return 1 + float64(max(0, n-2))/capsRunesPerToken
	case n <= wordRunes:
		return 1
	case n <= 12:
		return 1 + float64(n-wordRunes)/8
	}
	return 1 + float64(12-wordRunes)/8 + float64(n-12)/4
}

// isWordRune is a letter or a combining mark: what words are made of.
func isWordRune(r rune) bool {
	if r < utf8.RuneSelf {
		return 'a' <= r && r <= 'z' || 'A' <= r && r <= 'Z'
	}
	return unicode.IsLetter(r) || unicode.IsMark(r)
}

// isCJK is a character of a script written without spaces between words
// (Han, Hiragana, Katakana, Thai) or costed like one (Hangul): a chunk may
// end between two of them.
func isCJK(r rune) bool {
	return r >= 0x0E00 && unicode.In(r, unicode.Han, unicode.Hiragana, unicode.Katakana, unicode.Hangul, unicode.Thai)
}
