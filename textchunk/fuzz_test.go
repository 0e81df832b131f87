package textchunk_test

import (
	"regexp"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/arke-institute/orchestrator/textchunk"
)

// FuzzSplit looks for inputs that make Split panic, loop, lose its
// invariants or drop words.
func FuzzSplit(f *testing.F) {
	f.Add("# T\n\nSome text. More text.\n\n```go\ncode\n```\n", 20, 4)
	f.Add(strings.Repeat("档案馆收藏了", 50)+"\n--- page 2 ---\n"+strings.Repeat("word ", 200), 30, 10)
	f.Add("e\u0301\u200d👩‍👩‍👧 \xff\r\n~~~\n"+strings.Repeat("x", 500), 8, 0)
	f.Fuzz(func(t *testing.T, text string, target, overlap int) {
		opts := textchunk.Options{TargetTokens: 8 + abs(target)%600, OverlapTokens: overlap % 100}
		done := make(chan []textchunk.Chunk, 1)
		go func() { done <- textchunk.Split(text, opts) }()
		var chunks []textchunk.Chunk
		select {
		case chunks = <-done:
		case <-time.After(5 * time.Second):
			t.Fatalf("Split(%q, %+v) takes more than 5 s", text, opts)
		}
		var all strings.Builder
		for i, c := range chunks {
			if c.Index != i || strings.TrimSpace(c.Text) == "" || !utf8.ValidString(c.Text) {
				t.Fatalf("chunk %d: index %d, text %q", i, c.Index, c.Text)
			}
			if c.Tokens > 2*opts.TargetTokens+10 && len(strings.Fields(c.Text)) > 3 {
				t.Fatalf("chunk %d has %d tokens for a target of %d: %q", i, c.Tokens, opts.TargetTokens, c.Text)
			}
			all.WriteString(c.Text)
			all.WriteString(" ")
		}
		// Every word of the text is in some chunk, whole (markers and
		// fences aside).
		got := strings.Fields(all.String())
		have := map[string]bool{}
		for _, w := range got {
			have[w] = true
		}
		for _, line := range strings.Split(strings.ToValidUTF8(strings.ReplaceAll(text, "\r", "\n"), "\uFFFD"), "\n") {
			if marker.MatchString(strings.TrimSpace(line)) {
				continue
			}
			for _, w := range strings.Fields(line) {
				short := utf8.RuneCountInString(w) <= 20 && !strings.ContainsAny(w, "`~-=#")
				if short && !have[w] && !strings.Contains(all.String(), w) {
					t.Fatalf("word %q is lost", w)
				}
			}
		}
	})
}

var marker = regexp.MustCompile(`^--- page [0-9]+ ---$`)

func abs(n int) int {
	if n < 0 {
		return -n
	}
	return n
}
