package textchunk_test

import (
	"fmt"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/stretchr/testify/require"

	"github.com/arke-institute/orchestrator/textchunk"
)

// sentences is n distinct English sentences of about 12 tokens each.
func sentences(n int, topic string) string {
	var b strings.Builder
	for i := range n {
		if i > 0 {
			b.WriteString(" ")
		}
		fmt.Fprintf(&b, "The %s record number %d was described by the archivist before noon.", topic, i)
	}
	return b.String()
}

func codeLines(n int) string {
	var b strings.Builder
	for i := range n {
		fmt.Fprintf(&b, "\tvalue%d := compute(input, %d) // step %d\n", i, i, i)
	}
	return b.String()
}

// checkInvariants holds for every split: indexes in order, no empty chunk,
// valid UTF-8, and sizes within the target unless a chunk is one word.
func checkInvariants(t *testing.T, chunks []textchunk.Chunk, opts textchunk.Options) {
	t.Helper()
	target := opts.TargetTokens
	if target == 0 {
		target = textchunk.DefaultTargetTokens
	}
	for i, c := range chunks {
		require.Equal(t, i, c.Index)
		require.NotEmpty(t, strings.TrimSpace(c.Text))
		require.True(t, utf8.ValidString(c.Text), "chunk %d is not UTF-8", i)
		require.Equal(t, textchunk.EstimateTokens(c.Text), c.Tokens)
		if len(strings.Fields(c.Text)) > 1 {
			require.LessOrEqual(t, c.Tokens, target, "chunk %d: %q", i, c.Text)
		}
	}
}

// wordsOf is the set of white-space separated words of s.
func wordsOf(s string) map[string]bool {
	m := map[string]bool{}
	for _, w := range strings.Fields(s) {
		m[w] = true
	}
	return m
}

func TestSplit(t *testing.T) {
	t.Parallel()
	long := sentences(150, "parish") // ~2,000 tokens
	for _, tc := range []struct {
		name  string
		text  string
		opts  textchunk.Options
		check func(t *testing.T, chunks []textchunk.Chunk)
	}{
		{
			name:  "Empty",
			text:  "",
			check: func(t *testing.T, chunks []textchunk.Chunk) { require.Empty(t, chunks) },
		},
		{
			name:  "Blank",
			text:  " \n\n\t\r\n  ",
			check: func(t *testing.T, chunks []textchunk.Chunk) { require.Empty(t, chunks) },
		},
		{
			name: "ShortDocumentIsOneChunk",
			text: "# Title\r\n\r\nA short note.\r\n",
			check: func(t *testing.T, chunks []textchunk.Chunk) {
				require.Len(t, chunks, 1)
				require.Equal(t, "# Title\n\nA short note.", chunks[0].Text)
				require.Equal(t, "Title", chunks[0].Heading)
				require.Zero(t, chunks[0].FirstPage)
			},
		},
		{
			name: "HeadingsStartChunks",
			text: "# Guide\n\n## Install\n\n" + sentences(15, "install") + "\n\n## Usage\n\n" + sentences(15, "usage") +
				"\n\n### Flags\n\n" + sentences(15, "flag"),
			check: func(t *testing.T, chunks []textchunk.Chunk) {
				require.Len(t, chunks, 3)
				require.True(t, strings.HasPrefix(chunks[0].Text, "# Guide\n\n## Install\n\nThe install record number 0"))
				require.Equal(t, "Guide", chunks[0].Heading)
				require.True(t, strings.HasPrefix(chunks[1].Text, "## Usage\n\n"), chunks[1].Text)
				require.Equal(t, "Guide > Usage", chunks[1].Heading)
				require.True(t, strings.HasPrefix(chunks[2].Text, "### Flags\n\n"))
				require.Equal(t, "Guide > Usage > Flags", chunks[2].Heading)
			},
		},
		{
			name: "SmallSectionsShareAChunk",
			text: "# A\n\nOne line.\n\n# B\n\nTwo lines.\n\n# C\n\nThree.",
			check: func(t *testing.T, chunks []textchunk.Chunk) {
				require.Len(t, chunks, 1)
				require.Equal(t, "# A\n\nOne line.\n\n# B\n\nTwo lines.\n\n# C\n\nThree.", chunks[0].Text)
			},
		},
		{
			name: "SetextHeadings",
			text: "Guide\n=====\n\n" + sentences(15, "intro") + "\n\nUsage\n-----\n\n" + sentences(15, "usage"),
			check: func(t *testing.T, chunks []textchunk.Chunk) {
				require.Len(t, chunks, 2)
				require.Equal(t, "Guide > Usage", chunks[1].Heading)
				require.True(t, strings.HasPrefix(chunks[1].Text, "Usage\n-----\n\n"))
			},
		},
		{
			name: "NoChunkEndsWithAHeading",
			text: sentences(30, "before") + "\n\n## Next\n\n" + sentences(30, "after"),
			opts: textchunk.Options{TargetTokens: 400},
			check: func(t *testing.T, chunks []textchunk.Chunk) {
				for _, c := range chunks {
					require.False(t, strings.HasSuffix(c.Text, "## Next"), c.Text)
				}
			},
		},
		{
			name: "ManyHeadingsInARow",
			text: func() string {
				var b strings.Builder
				for i := range 200 {
					fmt.Fprintf(&b, "## Heading number %d\n", i)
				}
				return b.String()
			}(),
			opts: textchunk.Options{TargetTokens: 100},
			check: func(t *testing.T, chunks []textchunk.Chunk) {
				require.Greater(t, len(chunks), 10)
				require.Equal(t, "Heading number 0", chunks[0].Heading)
			},
		},
		{
			name: "CodeBlockKeptWhole",
			text: sentences(30, "intro") + "\n\n```go\nfunc main() {\n" + codeLines(15) + "}\n```\n\n" + sentences(3, "outro"),
			check: func(t *testing.T, chunks []textchunk.Chunk) {
				require.Len(t, chunks, 2)
				require.NotContains(t, chunks[0].Text, "```")
				require.Contains(t, chunks[1].Text, "\n\n```go\nfunc main() {\n"+codeLines(15)+"}\n```\n\n", "the block moves whole to the next chunk, after the overlap")
				require.True(t, strings.HasPrefix(chunks[1].Text, "The intro record number"), "the overlap starts at a sentence")
			},
		},
		{
			name: "LongCodeBlockCutBetweenLines",
			text: "```go\n" + codeLines(150) + "```",
			check: func(t *testing.T, chunks []textchunk.Chunk) {
				require.Greater(t, len(chunks), 2)
				var inner []string
				for _, c := range chunks {
					body, ok := strings.CutPrefix(c.Text, "```go\n")
					require.True(t, ok, "every piece is fenced: %q", c.Text)
					body, ok = strings.CutSuffix(body, "\n```")
					require.True(t, ok, "every piece is closed: %q", c.Text)
					inner = append(inner, body)
				}
				require.Equal(t, strings.TrimRight(codeLines(150), "\n"), strings.Join(inner, "\n"), "lines whole, in order, none repeated")
			},
		},
		{
			name: "UnclosedCodeBlock",
			text: "Intro.\n\n~~~\nline one\nline two",
			check: func(t *testing.T, chunks []textchunk.Chunk) {
				require.Len(t, chunks, 1)
				require.Equal(t, "Intro.\n\n~~~\nline one\nline two\n~~~", chunks[0].Text)
			},
		},
		{
			name: "LongParagraphOverlaps",
			text: long,
			opts: textchunk.Options{TargetTokens: 300, OverlapTokens: 40},
			check: func(t *testing.T, chunks []textchunk.Chunk) {
				require.GreaterOrEqual(t, len(chunks), 7)
				words := wordsOf(long)
				for i, c := range chunks {
					for w := range wordsOf(c.Text) {
						require.True(t, words[w], "chunk %d has %q, not a word of the text", i, w)
					}
					if i == 0 {
						continue
					}
					prev := chunks[i-1].Text
					// The chunk starts with a tail of the one before, of
					// about the overlap, cut at a word.
					k := 0
					for j := range c.Text {
						if j > 0 && strings.HasSuffix(prev, c.Text[:j]) {
							k = j
						}
					}
					require.Positive(t, k, "chunk %d does not start with the end of chunk %d", i, i-1)
					overlap := textchunk.EstimateTokens(c.Text[:k])
					require.GreaterOrEqual(t, overlap, 20)
					require.LessOrEqual(t, overlap, 41)
					require.True(t, k == len(c.Text) || c.Text[k] == ' ', "the overlap ends at a word")
				}
			},
		},
		{
			name: "NoOverlap",
			text: long,
			opts: textchunk.Options{TargetTokens: 300, OverlapTokens: -1},
			check: func(t *testing.T, chunks []textchunk.Chunk) {
				var joined []string
				for _, c := range chunks {
					joined = append(joined, c.Text)
				}
				require.Equal(t, long, strings.Join(joined, " "), "without overlap the chunks are the text, cut between sentences")
			},
		},
		{
			name: "ListLinesAreCutPoints",
			text: func() string {
				var b strings.Builder
				for i := range 120 {
					fmt.Fprintf(&b, "- item %d of the inventory of boxes and folders\n", i)
				}
				return b.String()
			}(),
			opts: textchunk.Options{TargetTokens: 200, OverlapTokens: -1},
			check: func(t *testing.T, chunks []textchunk.Chunk) {
				require.Greater(t, len(chunks), 3)
				for _, c := range chunks {
					for _, line := range strings.Split(c.Text, "\n") {
						require.Regexp(t, `^- item [0-9]+ of the inventory of boxes and folders$`, line)
					}
				}
			},
		},
		{
			name: "CJKWithoutSpacesOrStops",
			text: strings.Repeat("档案馆收藏了自清代以来的政府公文地方志家谱和地图", 120), // 2,880 characters, no space, no full stop
			opts: textchunk.Options{TargetTokens: 500, OverlapTokens: -1},
			check: func(t *testing.T, chunks []textchunk.Chunk) {
				require.Greater(t, len(chunks), 5)
				var joined strings.Builder
				for _, c := range chunks {
					joined.WriteString(c.Text)
				}
				require.Equal(t, strings.Repeat("档案馆收藏了自清代以来的政府公文地方志家谱和地图", 120), joined.String(), "cut between characters, none lost")
			},
		},
		{
			name: "CJKSentences",
			text: strings.Repeat("档案馆收藏了自清代以来的政府公文。数字化工作开始于二十年前！阅览室每周开放？", 60),
			opts: textchunk.Options{TargetTokens: 200, OverlapTokens: 30},
			check: func(t *testing.T, chunks []textchunk.Chunk) {
				require.Greater(t, len(chunks), 5)
				for i, c := range chunks[:len(chunks)-1] {
					last, _ := utf8.DecodeLastRuneInString(c.Text)
					require.Contains(t, "。！？", string(last), "chunk %d ends at a full stop: %q", i, c.Text)
				}
				first, _, _ := strings.Cut(chunks[1].Text, "。")
				require.True(t, strings.HasSuffix(chunks[0].Text, first+"。"), "chunk 1 starts with chunk 0's last sentence: %q", first)
			},
		},
		{
			name: "AccentsStayOnTheirLetters",
			text: strings.Repeat("e\u0301", 3000) + " " + strings.Repeat("👩‍👩‍👧", 400),
			opts: textchunk.Options{TargetTokens: 100, OverlapTokens: -1},
			check: func(t *testing.T, chunks []textchunk.Chunk) {
				require.Greater(t, len(chunks), 2)
				for _, c := range chunks {
					r, _ := utf8.DecodeRuneInString(c.Text)
					require.NotEqual(t, '\u0301', r, "a chunk starts with a combining accent")
					require.NotEqual(t, '\u200d', r, "a chunk starts with a joiner")
					last, _ := utf8.DecodeLastRuneInString(c.Text)
					require.NotEqual(t, '\u200d', last, "a chunk ends with a joiner")
				}
			},
		},
		{
			name: "WordLongerThanTheTargetKeptWhole",
			text: "See " + strings.Repeat("abcdefgh", 250) + " for details.", // 2,000 letters: ~500 tokens
			opts: textchunk.Options{TargetTokens: 300, OverlapTokens: -1},
			check: func(t *testing.T, chunks []textchunk.Chunk) {
				require.Len(t, chunks, 3)
				require.Equal(t, "See", chunks[0].Text)
				require.Equal(t, strings.Repeat("abcdefgh", 250), chunks[1].Text)
				require.Greater(t, chunks[1].Tokens, 300)
				require.Equal(t, "for details.", chunks[2].Text)
			},
		},
		{
			name: "WordBeyondTheMaximumIsCut",
			text: strings.Repeat("abcdefgh", 1000), // ~2,000 tokens
			opts: textchunk.Options{TargetTokens: 200, OverlapTokens: -1, MaxTokens: 400},
			check: func(t *testing.T, chunks []textchunk.Chunk) {
				require.Greater(t, len(chunks), 8)
				var joined strings.Builder
				for _, c := range chunks {
					require.LessOrEqual(t, c.Tokens, 200)
					joined.WriteString(c.Text)
				}
				require.Equal(t, strings.Repeat("abcdefgh", 1000), joined.String())
			},
		},
		{
			name: "InvalidUTF8",
			text: "caf\xc3 au lait\n\nbien \xff s\xfbr",
			check: func(t *testing.T, chunks []textchunk.Chunk) {
				require.Len(t, chunks, 1)
				require.Equal(t, "caf\uFFFD au lait\n\nbien \uFFFD s\uFFFDr", chunks[0].Text)
			},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			chunks := textchunk.Split(tc.text, tc.opts)
			if testing.Verbose() {
				for _, c := range chunks {
					t.Logf("chunk %d (%d tokens, %q, pages %d-%d):\n%s", c.Index, c.Tokens, c.Heading, c.FirstPage, c.LastPage, c.Text)
				}
			}
			checkInvariants(t, chunks, tc.opts)
			tc.check(t, chunks)
			require.Equal(t, chunks, textchunk.Split(tc.text, tc.opts), "deterministic")
		})
	}
}

func TestJoinPages(t *testing.T) {
	t.Parallel()
	pages := []string{
		"Minutes of the council.\r\n\r\n" + sentences(20, "council"),
		"  " + sentences(30, "budget") + "\n",
		"",
		sentences(5, "appendix"),
	}
	text := textchunk.JoinPages(pages)
	require.True(t, strings.HasPrefix(text, "--- page 1 ---\nMinutes of the council.\n\n"))
	require.Contains(t, text, "\n\n--- page 2 ---\nThe budget record number 0")
	require.Contains(t, text, "\n\n--- page 3 ---\n\n--- page 4 ---\nThe appendix")
	require.Equal(t, "--- page 12 ---", textchunk.PageMarker(12))

	chunks := textchunk.Split(text, textchunk.Options{TargetTokens: 300})
	checkInvariants(t, chunks, textchunk.Options{TargetTokens: 300})
	require.Greater(t, len(chunks), 2)
	require.Equal(t, 1, chunks[0].FirstPage)
	require.Equal(t, 4, chunks[len(chunks)-1].LastPage)
	for i, c := range chunks {
		require.NotContains(t, c.Text, "--- page", "markers are not chunk text")
		require.LessOrEqual(t, c.FirstPage, c.LastPage)
		if i > 0 {
			require.GreaterOrEqual(t, c.FirstPage, chunks[i-1].FirstPage)
		}
		if strings.Contains(c.Text, "budget") {
			require.True(t, c.FirstPage <= 2 && c.LastPage >= 2, "chunk %d: pages %d-%d", i, c.FirstPage, c.LastPage)
		}
	}
}

func BenchmarkSplit(b *testing.B) {
	var md strings.Builder
	for md.Len() < 1<<20 {
		fmt.Fprintf(&md, "## Section %d\n\n%s\n\n```go\n%s```\n\n- %s\n- %s\n\n", md.Len(), sentences(40, "section"), codeLines(10), sentences(1, "item"), sentences(1, "item"))
	}
	for _, tc := range []struct {
		name string
		text string
	}{
		{"Markdown1MB", md.String()},
		{"OneParagraph1MB", strings.Repeat("word soup without any full stop ", 1<<15)},
		{"CJK1MB", strings.Repeat("档案馆收藏了自清代以来的政府公文地方志家谱和地图", 1<<20/72)},
	} {
		b.Run(tc.name, func(b *testing.B) {
			b.SetBytes(int64(len(tc.text)))
			for b.Loop() {
				textchunk.Split(tc.text, textchunk.Options{})
			}
		})
	}
}
