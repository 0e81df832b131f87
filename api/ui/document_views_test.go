package ui

import (
	"context"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/arke-institute/orchestrator/db"
	"github.com/arke-institute/orchestrator/internal/harness/dbtest"
	"github.com/arke-institute/orchestrator/problem"
)

// TestDashboardDocuments: the listing pages newest first through full
// pages to an empty last one, each page below the previous, optionally of
// one status; the document page cuts long chunk texts, between characters
// not bytes, and says so.
func TestDashboardDocuments(t *testing.T) {
	t.Parallel()
	pool := dbtest.New(t)
	ctx := context.Background()
	exec := dbtest.Exec(t, pool)
	const n = 2*dashboardDocumentsPerPage + 3
	// Every third document failed.
	exec(`INSERT INTO documents (r2_key, version, status)
		SELECT 'documents/d' || i || '.md', 1, CASE WHEN i % 3 = 0 THEN 'failed' ELSE 'completed' END
		FROM generate_series(1, $1::int) i`, n)
	d := &Dashboard{pool: pool}

	t.Run("Pages", func(t *testing.T) {
		var seen []int64
		f := DocumentFilter{}
		for pages := 0; ; pages++ {
			require.Less(t, pages, 4, "the listing ends")
			page, err := d.documentList(ctx, f)
			require.NoError(t, err)
			for _, d := range page.Documents {
				if len(seen) > 0 {
					require.Less(t, d.ID, seen[len(seen)-1], "newest first, each page below the last")
				}
				seen = append(seen, d.ID)
			}
			if page.NextCursor == nil {
				require.Len(t, page.Documents, n%dashboardDocumentsPerPage)
				break
			}
			require.Len(t, page.Documents, dashboardDocumentsPerPage)
			f.Cursor = *page.NextCursor
		}
		require.Len(t, seen, n)
	})

	t.Run("Status", func(t *testing.T) {
		page, err := d.documentList(ctx, DocumentFilter{Status: "failed"})
		require.NoError(t, err)
		require.Len(t, page.Documents, n/3)
		for _, d := range page.Documents {
			require.Equal(t, db.DocumentFailed, d.Status)
		}
		require.Nil(t, page.NextCursor)
	})

	t.Run("Refused", func(t *testing.T) {
		for f, want := range map[DocumentFilter]string{
			{Status: "DONE"}: `status must be one of not_started, processing, completed, failed, got "DONE"`,
			{Cursor: "abc"}:  "cursor is not one this server issued",
			{Cursor: "0"}:    "cursor is not one this server issued",
		} {
			_, err := d.documentList(ctx, f)
			var in *problem.InputError
			require.ErrorAs(t, err, &in, "%+v", f)
			require.Contains(t, err.Error(), want)
		}
	})

	t.Run("Detail", func(t *testing.T) {
		long := strings.Repeat("é", dashboardExcerptChars+10)
		short := strings.Repeat("ü", dashboardExcerptChars)
		var id int64
		require.NoError(t, pool.QueryRow(ctx, `SELECT id FROM documents WHERE r2_key = 'documents/d1.md'`).Scan(&id))
		exec(`INSERT INTO document_chunks (document_id, chunk_index, text, tokens, tags) VALUES ($1, 0, $2, 9, '{a,b}'), ($1, 1, $3, 9, NULL)`, id, long, short)
		doc, err := d.documentDetail(ctx, id)
		require.NoError(t, err)
		require.EqualValues(t, 2, doc.ChunksTotal)
		require.Len(t, doc.Chunks, 2)
		require.Equal(t, DocumentChunkSummary{Index: 0, Tokens: 9, Status: "pending", Tags: []string{"a", "b"},
			Excerpt: strings.Repeat("é", dashboardExcerptChars), Cut: true}, doc.Chunks[0])
		require.Equal(t, short, doc.Chunks[1].Excerpt)
		require.False(t, doc.Chunks[1].Cut, "a text of exactly the excerpt's length is whole")
		require.Equal(t, "documents/d1.md", doc.R2Key)

		_, err = d.documentDetail(ctx, 999999)
		require.ErrorIs(t, err, problem.ErrNotFound)
	})
}
