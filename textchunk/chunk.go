// Package textchunk splits a document's text into chunks for embedding and
// tagging (spec 003, step 1 "Download and Chunk"): markdown-aware, it cuts
// between sections and paragraphs first, then between lines, sentences and
// words, so that each chunk is about Options.TargetTokens tokens (counted
// by EstimateTokens, offline), consecutive chunks of prose overlap, and no
// cut falls inside a word. Fenced code blocks stay whole when they fit in
// a chunk and are cut between lines (each piece fenced again) when they do
// not. Text built by JoinPages carries page markers, and each chunk says
// which pages it came from.
//
// Everything here is pure: the same text and options give the same chunks.
package textchunk

import (
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"
)

// Defaults for Options fields left zero.
const (
	DefaultTargetTokens = 500
	// DefaultOverlapPercent of TargetTokens is the default overlap.
	DefaultOverlapPercent = 10
)

// Options says how large chunks are. The zero value gives chunks of about
// DefaultTargetTokens tokens overlapping by a tenth of that.
type Options struct {
	// TargetTokens is the size a chunk is filled up to
	// (DefaultTargetTokens if zero or negative).
	TargetTokens int
	// OverlapTokens is how much of a chunk's prose the next chunk repeats
	// when it goes on with the same text (DefaultOverlapPercent of
	// TargetTokens if zero; none if negative; at most half the target).
	OverlapTokens int
	// MaxTokens bounds a chunk: a single word longer than TargetTokens
	// (a URL, a hash, base64) is kept whole up to MaxTokens and cut
	// between characters only beyond (2*TargetTokens if zero).
	MaxTokens int
}

func (o Options) withDefaults() Options {
	if o.TargetTokens <= 0 {
		o.TargetTokens = DefaultTargetTokens
	}
	switch {
	case o.OverlapTokens == 0:
		o.OverlapTokens = o.TargetTokens * DefaultOverlapPercent / 100
	case o.OverlapTokens < 0:
		o.OverlapTokens = 0
	}
	o.OverlapTokens = min(o.OverlapTokens, o.TargetTokens/2)
	if o.MaxTokens < o.TargetTokens {
		o.MaxTokens = 2 * o.TargetTokens
	}
	return o
}

// Chunk is one piece of a document.
type Chunk struct {
	// Index is the chunk's place in the document, from 0.
	Index int
	// Text is the chunk's text: whole paragraphs and blocks joined by a
	// blank line, or a slice of one, as in the document; a piece of a
	// code block is fenced again. Page markers are left out.
	Text string
	// Tokens is EstimateTokens(Text).
	Tokens int
	// Heading is the trail of headings in force where the chunk starts
	// ("Install > On Linux"), empty before the first.
	Heading string
	// FirstPage and LastPage are the pages the chunk's text is from, by
	// the markers JoinPages writes; 0 when the text has none.
	FirstPage, LastPage int
}

// PageMarker is the line JoinPages writes before page n's text.
func PageMarker(n int) string { return fmt.Sprintf("--- page %d ---", n) }

var pageMarker = regexp.MustCompile(`^--- page ([0-9]+) ---$`)

// JoinPages makes one document of a PDF's pages (pages[0] is page 1):
// each page's text after its PageMarker line, pages separated by a blank
// line. Split then tells, for each chunk, the pages it came from.
func JoinPages(pages []string) string {
	var b strings.Builder
	for i, p := range pages {
		if i > 0 {
			b.WriteString("\n\n")
		}
		b.WriteString(PageMarker(i + 1))
		if t := strings.TrimSpace(normalize(p)); t != "" {
			b.WriteString("\n")
			b.WriteString(t)
		}
	}
	return b.String()
}

// Split cuts text into chunks as the package doc says. Empty or blank text
// gives no chunks. Invalid UTF-8 is read as U+FFFD; "\r\n" as "\n".
func Split(text string, opts Options) []Chunk {
	opts = opts.withDefaults()
	p := packer{opts: opts}
	for _, b := range parseBlocks(normalize(text)) {
		p.add(b)
	}
	p.flush()
	return p.chunks
}

func normalize(s string) string {
	s = strings.ToValidUTF8(s, "\uFFFD")
	s = strings.ReplaceAll(s, "\r\n", "\n")
	return strings.ReplaceAll(s, "\r", "\n")
}

type blockKind int

const (
	paragraph blockKind = iota
	heading
	code
)

// block is a heading, a paragraph (any run of non-blank lines: prose,
// lists, tables, quotes) or a fenced code block, with the page it is on.
type block struct {
	kind blockKind
	// text is the block's text; for code, the lines between the fences.
	text string
	// open and close are a code block's fence lines (close may be empty
	// when the document ends inside the block).
	open, close string
	fence       string
	page        int
	// trail is the heading trail in force at the block (its own, for a
	// heading).
	trail string
}

var atxHeading = regexp.MustCompile(`^ {0,3}(#{1,6})(?:[ \t]+(.*?))?(?:[ \t]+#+)?[ \t]*$`)

// parseBlocks reads the document's blocks. It knows ATX headings (# ...),
// setext headings (a line underlined by === or ---), fenced code (``` or
// ~~~) and page markers; everything else is paragraphs split at blank
// lines.
func parseBlocks(s string) []block {
	lines := strings.Split(s, "\n")
	var (
		blocks []block
		para   []string
		page   int
		trail  []string // heading texts by level - 1
	)
	trailText := func() string {
		var parts []string
		for _, t := range trail {
			if t != "" {
				parts = append(parts, t)
			}
		}
		return strings.Join(parts, " > ")
	}
	setHeading := func(level int, text string) {
		trail = append(trail[:min(len(trail), level-1)], make([]string, max(0, level-1-len(trail)))...)
		trail = append(trail, text)
	}
	endPara := func() {
		if len(para) > 0 {
			blocks = append(blocks, block{kind: paragraph, text: strings.Join(para, "\n"), page: page, trail: trailText()})
			para = nil
		}
	}
	for i := 0; i < len(lines); i++ {
		line := lines[i]
		trimmed := strings.TrimSpace(line)
		switch {
		case trimmed == "":
			endPara()
		case pageMarker.MatchString(trimmed):
			endPara()
			page, _ = strconv.Atoi(pageMarker.FindStringSubmatch(trimmed)[1])
		case isFence(line) != "":
			endPara()
			fence := isFence(line)
			b := block{kind: code, open: strings.TrimRight(line, " \t"), fence: fence, page: page, trail: trailText()}
			var body []string
			for i++; i < len(lines); i++ {
				if t := strings.TrimSpace(lines[i]); strings.HasPrefix(t, fence) && strings.Trim(t, fence[:1]) == "" {
					b.close = t
					break
				}
				body = append(body, lines[i])
			}
			b.text = strings.Join(body, "\n")
			blocks = append(blocks, b)
		case atxHeading.MatchString(line):
			endPara()
			m := atxHeading.FindStringSubmatch(line)
			setHeading(len(m[1]), strings.TrimSpace(m[2]))
			blocks = append(blocks, block{kind: heading, text: strings.TrimSpace(line), page: page, trail: trailText()})
		case len(para) == 1 && isSetextUnderline(trimmed):
			level := 1
			if trimmed[0] == '-' {
				level = 2
			}
			text := strings.TrimSpace(para[0])
			para = nil
			setHeading(level, text)
			blocks = append(blocks, block{kind: heading, text: text + "\n" + trimmed, page: page, trail: trailText()})
		default:
			para = append(para, line)
		}
	}
	endPara()
	return blocks
}

// isFence returns the fence a line opens (``` or ~~~, three or more), or
// "".
func isFence(line string) string {
	t := strings.TrimLeft(line, " ")
	if len(line)-len(t) > 3 {
		return ""
	}
	for _, c := range []string{"`", "~"} {
		n := len(t) - len(strings.TrimLeft(t, c))
		// A backtick fence's info string has no backtick.
		if n >= 3 && (c != "`" || !strings.Contains(t[n:], "`")) {
			return strings.Repeat(c, n)
		}
	}
	return ""
}

func isSetextUnderline(t string) bool {
	return len(t) >= 2 && (strings.Trim(t, "=") == "" || strings.Trim(t, "-") == "")
}

// piece is a part of a block that is never cut: a whole block, or a line,
// sentence, word or run of characters of one too large for a chunk.
// Pieces of one block are contiguous slices of its text.
type piece struct {
	b          *block
	start, end int // byte range in b.text
	tokens     int
}

// packer fills chunks with pieces in document order. A chunk's size is
// always measured on its rendered text, so no chunk is over the target
// but for a word that is.
type packer struct {
	opts   Options
	chunks []Chunk
	cur    []piece
	// lastFlushed are the pieces of the last chunk, for the overlap.
	lastFlushed []piece
}

func (p *packer) add(b block) {
	bp := &b
	whole := piece{b: bp, start: 0, end: len(b.text)}
	whole.tokens = blockTokens(bp, 0, len(b.text))
	if b.kind == heading && whole.tokens > p.opts.TargetTokens/2 {
		b.kind = paragraph // a "heading" of hundreds of tokens is text
	}
	if b.kind == heading {
		// A section starts a chunk, unless the chunk so far is small (then
		// the short section before shares it) or only headings, and it
		// fits.
		if len(p.cur) > 0 && (p.size(nil) >= p.opts.TargetTokens/4 && !p.onlyHeadings() || !p.fits(whole)) {
			p.flush()
		}
		p.cur = with(p.cur, whole)
		return
	}
	if whole.tokens <= p.opts.TargetTokens {
		p.put(whole)
		return
	}
	// Too large for any chunk: cut into pieces that each leave room for
	// the overlap, and fill the current chunk with them first.
	for _, pc := range cut(bp, max(1, p.opts.TargetTokens-p.opts.OverlapTokens), p.opts.MaxTokens) {
		p.put(pc)
	}
}

// put adds pc to the current chunk, or to a new one when it does not fit.
func (p *packer) put(pc piece) {
	if len(p.cur) > 0 && !p.fits(pc) {
		p.flush()
		p.overlapInto(pc)
	}
	p.cur = with(p.cur, pc)
}

// fits says whether the current chunk with pc is within the target: by
// the sum of the pieces' sizes while far from it, measured on the text
// when close.
func (p *packer) fits(pc piece) bool {
	sum := pc.tokens
	for _, c := range p.cur {
		sum += c.tokens + 1
	}
	if sum <= p.opts.TargetTokens*9/10 {
		return true
	}
	return p.size(&pc) <= p.opts.TargetTokens
}

// size is the current chunk's size, with pc if not nil.
func (p *packer) size(pc *piece) int {
	if pc == nil {
		return EstimateTokens(render(p.cur))
	}
	return EstimateTokens(render(with(slices.Clip(p.cur), *pc)))
}

// with appends pc to pieces; a piece that continues the last one (the
// next slice of the same block) extends it.
func with(pieces []piece, pc piece) []piece {
	if n := len(pieces); n > 0 && pieces[n-1].b == pc.b && pieces[n-1].end == pc.start {
		out := slices.Clone(pieces)
		out[n-1].end = pc.end
		out[n-1].tokens += pc.tokens
		return out
	}
	return append(pieces, pc)
}

func (p *packer) onlyHeadings() bool {
	for _, pc := range p.cur {
		if pc.b.kind != heading {
			return false
		}
	}
	return true
}

// overlapInto starts the new chunk with the end of the last chunk's last
// paragraph, about OverlapTokens long (less when next would not fit
// after it; none when less than half would), beginning at a sentence or
// a word. Only prose is repeated, and a chunk that starts with a heading
// gets none.
func (p *packer) overlapInto(next piece) {
	if p.opts.OverlapTokens == 0 || len(p.cur) > 0 || len(p.lastFlushed) == 0 || next.b.kind == heading {
		return
	}
	last := p.lastFlushed[len(p.lastFlushed)-1]
	if last.b.kind != paragraph {
		return
	}
	text := last.b.text[last.start:last.end]
	for budget := p.opts.OverlapTokens; budget >= max(1, p.opts.OverlapTokens/2); budget -= max(1, p.opts.OverlapTokens/8) {
		start := tailStart(text, budget)
		if start >= len(text) {
			continue
		}
		tail := piece{b: last.b, start: last.start + start, end: last.end}
		tail.tokens = blockTokens(tail.b, tail.start, tail.end)
		p.cur = []piece{tail}
		if p.fits(next) {
			return
		}
		p.cur = nil
	}
}

// tailStart is where the longest tail of text of at most budget tokens
// begins: at the start of a word (after white space), or between two
// characters of a script written without spaces; at the start of a
// sentence instead when that tail is at least half the budget.
func tailStart(text string, budget int) int {
	// Sizes are summed word by word from the end (EstimateTokens is about
	// additive), then checked on the text.
	var bounds []int // word starts, from the end, within the budget by the sum
	sum, end := 0.0, len(text)
	for i := len(text); i > 0; {
		r, size := utf8.DecodeLastRuneInString(text[:i])
		i -= size
		if i == 0 {
			break
		}
		prev, _ := utf8.DecodeLastRuneInString(text[:i])
		wordStart := unicode.IsSpace(prev) && !unicode.IsSpace(r)
		if !wordStart && (!isCJK(r) || !isCJK(prev) || !canCutBefore(text, i, r)) {
			continue
		}
		sum += estimate(text[i:end])
		end = i
		if sum > float64(budget)+0.5 {
			break
		}
		bounds = append(bounds, i)
	}
	for len(bounds) > 0 && EstimateTokens(text[bounds[len(bounds)-1]:]) > budget {
		bounds = bounds[:len(bounds)-1]
	}
	if len(bounds) == 0 {
		return len(text)
	}
	for _, i := range slices.Backward(bounds) {
		end, _ := utf8.DecodeLastRuneInString(strings.TrimRightFunc(text[:i], unicode.IsSpace))
		if !strings.ContainsRune(".!?。！？", end) {
			continue
		}
		if 2*EstimateTokens(text[i:]) >= budget {
			return i
		}
		break
	}
	return bounds[len(bounds)-1]
}

// flush ends the current chunk. Headings at its end move to the next one,
// so that no chunk ends with the title of what it does not hold.
func (p *packer) flush() {
	var carry []piece
	for len(p.cur) > 1 && p.cur[len(p.cur)-1].b.kind == heading {
		carry = append([]piece{p.cur[len(p.cur)-1]}, carry...)
		p.cur = p.cur[:len(p.cur)-1]
	}
	if len(carry) > 0 && p.onlyHeadings() {
		p.cur, carry = append(p.cur, carry...), nil
	}
	if text := render(p.cur); text != "" {
		c := Chunk{Index: len(p.chunks), Text: text, Tokens: EstimateTokens(text), Heading: p.cur[0].b.trail}
		for _, pc := range p.cur {
			if pc.b.page == 0 {
				continue
			}
			if c.FirstPage == 0 || pc.b.page < c.FirstPage {
				c.FirstPage = pc.b.page
			}
			c.LastPage = max(c.LastPage, pc.b.page)
		}
		p.chunks = append(p.chunks, c)
		p.lastFlushed = p.cur
	}
	p.cur = carry
}

// blockTokens is the estimated size of b.text[start:end] as rendered.
func blockTokens(b *block, start, end int) int {
	return EstimateTokens(renderPiece(piece{b: b, start: start, end: end}))
}

func render(pieces []piece) string {
	parts := make([]string, 0, len(pieces))
	for _, pc := range pieces {
		if t := renderPiece(pc); strings.TrimSpace(t) != "" {
			parts = append(parts, t)
		}
	}
	return strings.Join(parts, "\n\n")
}

// renderPiece is a piece's text: trimmed of the blank space at its ends,
// and fenced for code (whose indentation is kept).
func renderPiece(pc piece) string {
	t := pc.b.text[pc.start:pc.end]
	if pc.b.kind != code {
		return strings.TrimSpace(t)
	}
	t = strings.TrimRight(strings.TrimLeft(t, "\n"), " \t\n")
	closing := pc.b.close
	if closing == "" {
		closing = pc.b.fence
	}
	return pc.b.open + "\n" + t + "\n" + closing
}

// cut splits a block too large for a chunk into contiguous pieces of at
// most limit tokens: between lines, then (prose only) sentences, then
// words. A word larger than limit stays whole up to maxTokens; beyond, or
// in a script written without spaces, it is cut between characters.
func cut(b *block, limit, maxTokens int) []piece {
	var out []piece
	var split func(start, end, level int)
	split = func(start, end, level int) {
		if start >= end {
			return
		}
		tok := blockTokens(b, start, end)
		if tok <= limit {
			out = append(out, piece{b: b, start: start, end: end, tokens: tok})
			return
		}
		var bounds []int
		switch level {
		case 0:
			bounds = lineBounds(b.text, start, end)
		case 1:
			if b.kind != code {
				bounds = sentenceBounds(b.text, start, end)
			}
		case 2:
			bounds = wordBounds(b.text, start, end)
		default:
			word := strings.TrimSpace(b.text[start:end])
			if tok <= maxTokens && !strings.ContainsFunc(word, isCJK) {
				out = append(out, piece{b: b, start: start, end: end, tokens: tok})
				return
			}
			out = append(out, runeRuns(b, start, end, limit)...)
			return
		}
		if len(bounds) <= 2 { // nothing to cut at this level
			split(start, end, level+1)
			return
		}
		for i := 0; i+1 < len(bounds); i++ {
			split(bounds[i], bounds[i+1], level+1)
		}
	}
	split(0, len(b.text), 0)
	// Join neighbours while they fit: by the sum of their sizes and one
	// token for the white space between, then checked on the text.
	var merged []piece
	for i := 0; i < len(out); {
		j, sum := i+1, out[i].tokens
		for j < len(out) && sum+1+out[j].tokens <= limit {
			sum += 1 + out[j].tokens
			j++
		}
		acc := out[i]
		for ; j > i+1; j-- {
			if exact := blockTokens(b, out[i].start, out[j-1].end); exact <= limit {
				acc = piece{b: b, start: out[i].start, end: out[j-1].end, tokens: exact}
				break
			}
		}
		merged = append(merged, acc)
		i = max(j, i+1)
	}
	return merged
}

// lineBounds are start, the start of each line after the first, and end.
func lineBounds(s string, start, end int) []int {
	bounds := []int{start}
	for i := start; i < end; i++ {
		if s[i] == '\n' && i+1 < end {
			bounds = append(bounds, i+1)
		}
	}
	return append(bounds, end)
}

// sentenceBounds cut after ". ", "! ", "? " (and the white space after
// them) and after the full stops of scripts without spaces.
func sentenceBounds(s string, start, end int) []int {
	bounds := []int{start}
	for i := start; i < end; {
		r, size := utf8.DecodeRuneInString(s[i:])
		i += size
		switch r {
		case '。', '！', '？', '．':
			for i < end {
				r2, sz := utf8.DecodeRuneInString(s[i:])
				if !unicode.IsSpace(r2) && r2 != '」' && r2 != '』' && r2 != '）' {
					break
				}
				i += sz
			}
		case '.', '!', '?', '…':
			j := i
			for j < end {
				r2, sz := utf8.DecodeRuneInString(s[j:])
				if r2 != '"' && r2 != '\'' && r2 != ')' && r2 != '”' && r2 != '’' {
					break
				}
				j += sz
			}
			if j >= end {
				continue
			}
			if r2, _ := utf8.DecodeRuneInString(s[j:]); !unicode.IsSpace(r2) {
				continue
			}
			for j < end {
				r2, sz := utf8.DecodeRuneInString(s[j:])
				if !unicode.IsSpace(r2) {
					break
				}
				j += sz
			}
			i = j
		default:
			continue
		}
		if i < end {
			bounds = append(bounds, i)
		}
	}
	return append(bounds, end)
}

// wordBounds cut at the start of each word (after white space).
func wordBounds(s string, start, end int) []int {
	bounds := []int{start}
	space := false
	for i := start; i < end; {
		r, size := utf8.DecodeRuneInString(s[i:])
		if space && !unicode.IsSpace(r) {
			bounds = append(bounds, i)
		}
		space = unicode.IsSpace(r)
		i += size
	}
	return append(bounds, end)
}

// runeRuns cuts s[start:end] between characters into pieces of at most
// limit tokens, never before a combining mark, a joiner or a variation
// selector, nor after a joiner, so that no character is cut from its
// accents.
func runeRuns(b *block, start, end, limit int) []piece {
	var cuts []int // where a cut may go
	for i := start; i < end; {
		r, size := utf8.DecodeRuneInString(b.text[i:])
		if i > start && canCutBefore(b.text, i, r) {
			cuts = append(cuts, i)
		}
		i += size
	}
	cuts = append(cuts, end)
	var out []piece
	for from, k := start, 0; from < end; {
		// The farthest cut that keeps the piece within limit: gallop, then
		// bisect, so that a long run costs O(n log n).
		fits := func(j int) bool { return blockTokens(b, from, cuts[j]) <= limit }
		lo, step := k, 1 // cuts[lo] fits, or lo is the first cut after from
		for lo+step < len(cuts) && fits(lo+step) {
			lo += step
			step *= 2
		}
		hi := min(lo+step, len(cuts)) // the first cut known not to fit, or len
		for hi-lo > 1 {
			mid := (lo + hi) / 2
			if fits(mid) {
				lo = mid
			} else {
				hi = mid
			}
		}
		out = append(out, piece{b: b, start: from, end: cuts[lo], tokens: blockTokens(b, from, cuts[lo])})
		from, k = cuts[lo], lo+1
	}
	return out
}

func canCutBefore(s string, i int, r rune) bool {
	if unicode.IsMark(r) || r == '\u200d' || unicode.Is(unicode.Variation_Selector, r) || (0x1F3FB <= r && r <= 0x1F3FF) {
		return false
	}
	prev, _ := utf8.DecodeLastRuneInString(s[:i])
	return prev != '\u200d'
}
