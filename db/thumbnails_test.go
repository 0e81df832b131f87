package db_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/arke-institute/orchestrator/db"
	"github.com/arke-institute/orchestrator/internal/harness/dbtest"
)

// TestThumbnailFollowsLineage: a file's thumbnail is the one the task of
// the nearest file of its lineage reported, however many phases ran after
// it (a ref republished by OCR, then passed on by document indexing), and
// a file whose lineage made none has none.
func TestThumbnailFollowsLineage(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := dbtest.New(t)
	exec := dbtest.Exec(t, pool)
	q := db.New(pool)
	_, err := q.BatchInsert(ctx, db.BatchInsertParams{ID: "b1", Uploader: "test", QueueMessage: []byte(`{}`)})
	require.NoError(t, err)
	// Generation 1: two uploads. 2: the image phase's refs. 3: OCR's
	// published refs. 4: document indexing's pass-through.
	exec(`INSERT INTO files (id, batch_id, generation, ordinal, parent_id, directory_path, r2_key, logical_path, file_name, file_size, content_type, processing_config) OVERRIDING SYSTEM VALUE
		VALUES
		(1, 'b1', 1, 0, NULL, '/', 'staging/b1/a.jpg', '/a.jpg', 'a.jpg', 10, 'image/jpeg', '{}'),
		(2, 'b1', 1, 1, NULL, '/', 'staging/b1/n.txt', '/n.txt', 'n.txt', 10, 'text/plain', '{}'),
		(3, 'b1', 2, 0, 1, '/', 'staging/b1/a.jpg.ref.json', '/a.jpg.ref.json', 'a.jpg.ref.json', 10, 'application/json', '{}'),
		(4, 'b1', 2, 1, 2, '/', 'staging/b1/n.txt', '/n.txt', 'n.txt', 10, 'text/plain', '{}'),
		(5, 'b1', 3, 0, 3, '/', 'staging/b1/a.jpg.ocr.ref.json', '/a.jpg.ref.json', 'a.jpg.ref.json', 10, 'application/json', '{}'),
		(6, 'b1', 3, 1, 4, '/', 'staging/b1/n.txt', '/n.txt', 'n.txt', 10, 'text/plain', '{}'),
		(7, 'b1', 4, 0, 5, '/', 'staging/b1/a.jpg.ocr.ref.json', '/a.jpg.ref.json', 'a.jpg.ref.json', 10, 'application/json', '{}'),
		(8, 'b1', 4, 1, 6, '/', 'staging/b1/n.txt', '/n.txt', 'n.txt', 10, 'text/plain', '{}')`)
	exec(`INSERT INTO tasks (id, batch_id, phase, file_id, status, result) VALUES
		('image_a', 'b1', 'IMAGE_PROCESSING', 1, 'completed', '{"ref_data": {"variants": {"thumbnail": "https://cdn.test/variants/b1/a.jpg/thumbnail.jpg"}}}'),
		('image_n', 'b1', 'IMAGE_PROCESSING', 2, 'failed', '{"ref_data": {"variants": {"thumbnail": "https://cdn.test/variants/b1/n/thumbnail.jpg"}}}'),
		('ocr_a', 'b1', 'OCR', 5, 'completed', '{"text_length": 0}')`)

	for gen := int32(2); gen <= 4; gen++ {
		rows, err := q.FileListWithThumbnail(ctx, db.FileListWithThumbnailParams{BatchID: "b1", Generation: gen, Max: 10})
		require.NoError(t, err)
		require.Len(t, rows, 2, "generation %d", gen)
		require.True(t, rows[0].HasThumbnail, "generation %d: the image's descendant", gen)
		require.False(t, rows[1].HasThumbnail, "generation %d: a failed task's thumbnail is none", gen)
		require.EqualValues(t, 2, rows[0].Total)
	}
	for _, id := range []int64{1, 3, 5, 7} {
		url, err := q.FileThumbnailURL(ctx, db.FileThumbnailURLParams{ID: id, BatchID: "b1"})
		require.NoError(t, err, "file %d", id)
		require.Equal(t, "https://cdn.test/variants/b1/a.jpg/thumbnail.jpg", url, "file %d", id)
	}
	_, err = q.FileThumbnailURL(ctx, db.FileThumbnailURLParams{ID: 8, BatchID: "b1"})
	require.Error(t, err, "no thumbnail in the text file's lineage")
	_, err = q.FileThumbnailURL(ctx, db.FileThumbnailURLParams{ID: 7, BatchID: "other"})
	require.Error(t, err, "another batch's file")
}
