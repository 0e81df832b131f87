package repocheck_test

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// mdLink is a Markdown link's target: [text](target).
var mdLink = regexp.MustCompile(`\]\(([^)\s]+)\)`)

// heading is a Markdown heading; anchor is an explicit <a id="...">.
var (
	heading = regexp.MustCompile(`(?m)^#{1,6} (.+)$`)
	anchor  = regexp.MustCompile(`<a id="([^"]+)"></a>`)
)

// TestDocLinks: every relative link of README.md and docs/ names a file
// of the repository, and an anchor of it that exists (a heading's, as
// GitHub makes them, or an explicit <a id>).
func TestDocLinks(t *testing.T) {
	t.Parallel()
	root := "../.."
	files := []string{"README.md", "BENCHMARKS.md", "CHAOS.md"}
	docs, err := filepath.Glob(filepath.Join(root, "docs", "*.md"))
	require.NoError(t, err)
	require.NotEmpty(t, docs)
	for _, d := range docs {
		rel, err := filepath.Rel(root, d)
		require.NoError(t, err)
		files = append(files, rel)
	}
	anchors := map[string]map[string]bool{} // file -> its anchors
	anchorsOf := func(path string) map[string]bool {
		if a, ok := anchors[path]; ok {
			return a
		}
		a := map[string]bool{}
		if data, err := os.ReadFile(filepath.Join(root, path)); err == nil {
			text := withoutCode(string(data))
			for _, m := range heading.FindAllStringSubmatch(text, -1) {
				a[slug(m[1])] = true
			}
			for _, m := range anchor.FindAllStringSubmatch(text, -1) {
				a[m[1]] = true
			}
		}
		anchors[path] = a
		return a
	}
	links := 0
	for _, file := range files {
		data, err := os.ReadFile(filepath.Join(root, file))
		require.NoError(t, err, file)
		for _, m := range mdLink.FindAllStringSubmatch(withoutCode(string(data)), -1) {
			target := m[1]
			if strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") {
				continue
			}
			links++
			path, frag, _ := strings.Cut(target, "#")
			if path == "" {
				path = file
			} else {
				path = filepath.ToSlash(filepath.Clean(filepath.Join(filepath.Dir(file), path)))
				_, err := os.Stat(filepath.Join(root, path))
				if !assertNoError(t, err, "%s links to %s, which does not exist", file, target) {
					continue
				}
			}
			if frag != "" && strings.HasSuffix(path, ".md") {
				require.True(t, anchorsOf(path)[frag], "%s links to %s: %s has no anchor %q", file, target, path, frag)
			}
		}
	}
	require.Greater(t, links, 20, "the docs' links were found")
}

// TestSlug checks the anchors made of headings against GitHub's.
func TestSlug(t *testing.T) {
	t.Parallel()
	require.Equal(t, "documents-documents", slug("Documents: `/documents`"))
	require.Equal(t, "post-callbackbatchidtaskid", slug("`POST /callback/:batchId/:taskId`"))
	require.Equal(t, "phase-pdf_pages", slug("Phase PDF_PAGES"))
	require.Equal(t, "the-callback-path", slug("The callback path"))
}

// slug is the anchor GitHub makes of a heading: lower case, spaces to
// hyphens, and nothing but letters, digits, hyphens and underscores.
func slug(h string) string {
	var b strings.Builder
	for _, r := range strings.ToLower(strings.TrimSpace(h)) {
		switch {
		case r == ' ':
			b.WriteRune('-')
		case r == '-' || r == '_' || r >= 'a' && r <= 'z' || r >= '0' && r <= '9':
			b.WriteRune(r)
		}
	}
	return b.String()
}

// fence is a line that opens or closes a code block.
var fence = regexp.MustCompile("(?m)^```.*$")

// withoutCode is text without its code blocks, whose lines are no
// headings and no links.
func withoutCode(text string) string {
	parts := fence.Split(text, -1)
	var b strings.Builder
	for i, p := range parts {
		if i%2 == 0 {
			b.WriteString(p)
		}
	}
	return b.String()
}

// assertNoError is assert's NoError, reporting whether err is nil.
func assertNoError(t *testing.T, err error, msg string, args ...any) bool {
	t.Helper()
	if err != nil {
		t.Errorf(msg, args...)
		return false
	}
	return true
}
