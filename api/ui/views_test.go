package ui

import (
	"html"
	"net/url"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestCDNKey: only URLs under CDN_PUBLIC_URL name keys of the CDN bucket,
// unescaped segment by segment, and only keys of the batch's own variants;
// nothing climbs out of them.
func TestCDNKey(t *testing.T) {
	t.Parallel()
	s := &Dashboard{cdnPublicURL: "https://cdn.test"}
	tests := []struct {
		name, url, key string
		ok             bool
	}{
		{"Plain", "https://cdn.test/variants/B/a.jpg/thumbnail.jpg", "variants/B/a.jpg/thumbnail.jpg", true},
		{"Escaped", "https://cdn.test/variants/B/my%20photo.jpg/thumbnail.jpg", "variants/B/my photo.jpg/thumbnail.jpg", true},
		{"OtherHost", "https://elsewhere.test/variants/B/a.jpg/thumbnail.jpg", "", false},
		{"HostPrefix", "https://cdn.test.evil/variants/a.jpg", "", false},
		{"DotDot", "https://cdn.test/variants/../secrets", "", false},
		{"Empty", "https://cdn.test/", "", false},
		{"BadEscape", "https://cdn.test/variants/%zz", "", false},
		{"OtherBatch", "https://cdn.test/variants/C/a.jpg/thumbnail.jpg", "", false},
		{"NotAVariant", "https://cdn.test/staging/B/secret.json", "", false},
		{"Control", "https://cdn.test/variants/B/a%0d.jpg", "", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			key, ok := s.cdnKey(tt.url, "B")
			require.Equal(t, tt.ok, ok)
			require.Equal(t, tt.key, key)
		})
	}
	_, ok := (&Dashboard{}).cdnKey("/variants/B/a.jpg", "B")
	require.False(t, ok, "no CDN_PUBLIC_URL: no key")
}

// TestNextPageLinks: the "Older" link of each listing carries its cursor
// and status escaped once, so that following it opens the next page.
func TestNextPageLinks(t *testing.T) {
	t.Parallel()
	cursor := "2026-11-28T10:00:00.123456Z|01JABC"
	for name, data := range map[string]any{
		"list.html":      listPage{Page: Page{Batches: []Batch{{}}}, Next: nextPage(&cursor, "status", "DONE")},
		"documents.html": documentListPage{Page: DocumentPage{Documents: []Document{{}}}, Next: nextPage(&cursor, "status", "failed", "batch", "B")},
	} {
		var buf strings.Builder
		require.NoError(t, uiTemplates.ExecuteTemplate(&buf, name, data), name)
		m := regexp.MustCompile(`<a class="next" href="([^"]+)"`).FindStringSubmatch(buf.String())
		require.NotNil(t, m, "%s has no next link", name)
		u, err := url.Parse(html.UnescapeString(m[1]))
		require.NoError(t, err)
		require.Equal(t, cursor, u.Query().Get("cursor"), "%s: %s", name, m[1])
		require.NotEmpty(t, u.Query().Get("status"), name)
		if name == "documents.html" {
			require.Equal(t, "B", u.Query().Get("batch"), "the batch's documents stay the batch's")
		}
	}
	require.Empty(t, nextPage(nil, "status", "DONE"), "the last page has none")
}
