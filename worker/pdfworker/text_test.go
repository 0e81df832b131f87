package pdfworker

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/arke-institute/orchestrator/worker/samples"
)

// TestPageTextModes checks that the per-page fallback (used when a page's
// text holds a form feed, which would shift the whole-document split)
// gives the same texts as the single pdftotext run.
func TestPageTextModes(t *testing.T) {
	t.Parallel()
	pages := []samples.PDFPage{
		{Width: 100, Height: 100, Lines: []string{"first", "second"}},
		{Width: 100, Height: 100},
		{Width: 100, Height: 100, Scan: samples.Pattern(8, 8, 2)},
		{Width: 100, Height: 100, Lines: []string{"fourth"}},
	}
	data, err := samples.PDF(pages, samples.PDFOptions{})
	require.NoError(t, err)
	dir := t.TempDir()
	file := filepath.Join(dir, "in.pdf")
	require.NoError(t, os.WriteFile(file, data, 0o600))

	whole, err := extractText(t.Context(), file, dir, len(pages))
	require.NoError(t, err)
	defer whole.Close()
	require.False(t, whole.perPage)

	// A page count that does not match the form feeds switches to one run
	// per page.
	mismatched, err := extractText(t.Context(), file, dir, len(pages)+1)
	require.NoError(t, err)
	defer mismatched.Close()
	require.True(t, mismatched.perPage)

	want := []string{"first\nsecond\n", "", "", "fourth\n"}
	for i, w := range want {
		got, err := whole.page(t.Context(), i+1)
		require.NoError(t, err)
		require.Equal(t, w, got, "whole document, page %d", i+1)
		got, err = mismatched.page(t.Context(), i+1)
		require.NoError(t, err)
		require.Equal(t, w, got, "per page, page %d", i+1)
	}
}

// TestTextCapped: pdftotext is stopped once its text passes the cap, and
// the error says so.
func TestTextCapped(t *testing.T) {
	t.Parallel()
	data, err := samples.PDF([]samples.PDFPage{{Width: 100, Height: 100, Lines: []string{"some text", "more text"}}}, samples.PDFOptions{})
	require.NoError(t, err)
	file := filepath.Join(t.TempDir(), "in.pdf")
	require.NoError(t, os.WriteFile(file, data, 0o600))
	var out bytes.Buffer
	require.NoError(t, pdftotext(t.Context(), file, 1, &out, maxPageTextBytes))
	require.Contains(t, out.String(), "more text")
	for _, page := range []int{0, 1} {
		out.Reset()
		err := pdftotext(t.Context(), file, page, &out, 8)
		require.ErrorContains(t, err, "the text is larger than 8 bytes, more than a PDF's text may be")
		require.LessOrEqual(t, out.Len(), 8)
	}
}
