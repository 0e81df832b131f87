package dbtest

import (
	"context"
	"fmt"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/arke-institute/orchestrator/db"
	"github.com/arke-institute/orchestrator/tasktoken"
)

// Token is the nonce of the callback token SeedProcessingTasks gives task
// id: its SHA-256 is the task's record.
func Token(taskID string) string { return "tok-" + taskID }

// CallbackToken is the callback token SeedProcessingTasks gives task taskID
// of batch batchID, sealed as the orchestrator of pool's database seals it.
func CallbackToken(tb testing.TB, pool *pgxpool.Pool, batchID, taskID string) string {
	tb.Helper()
	token, err := tasktoken.New(pool).Seal(context.Background(), tasktoken.Task(batchID, taskID), Token(taskID))
	require.NoError(tb, err)
	return token
}

// SeedProcessingTasks writes batch batchID in TIFF_CONVERSION with n TIFFs
// and their tasks tiff_t000, tiff_t001, ..., all processing on a machine
// of their own, with callback tokens Token(id): what the callback path
// finds while a phase's machines are out.
func SeedProcessingTasks(tb testing.TB, pool *pgxpool.Pool, batchID string, n int) {
	tb.Helper()
	const phase = "TIFF_CONVERSION"
	ctx := context.Background()
	q := db.New(pool)
	_, err := q.BatchInsert(ctx, db.BatchInsertParams{ID: batchID, Uploader: "test", QueueMessage: []byte(`{}`)})
	require.NoError(tb, err)
	_, err = q.BatchSetPhase(ctx, db.BatchSetPhaseParams{ID: batchID, Phase: phase})
	require.NoError(tb, err)
	files := make([]db.FileInsertManyParams, n)
	for i := range files {
		name := fmt.Sprintf("f%03d.tif", i)
		files[i] = db.FileInsertManyParams{BatchID: batchID, Ordinal: int32(i), DirectoryPath: "/", R2Key: "staging/" + name,
			LogicalPath: "/" + name, FileName: name, FileSize: 10, ContentType: "image/tiff",
			ProcessingConfig: []byte(`{}`), PreprocessorTags: []string{}}
	}
	_, err = q.FileInsertMany(ctx, files)
	require.NoError(tb, err)
	_, err = pool.Exec(ctx, `INSERT INTO tasks (id, batch_id, phase, file_id, status, attempt, machine_id, token_hash, launched_at, deadline)
		SELECT 'tiff_t' || lpad(ordinal::text, 3, '0'), batch_id, $2, id, 'processing', 1, 'm' || ordinal,
			sha256(convert_to('tok-tiff_t' || lpad(ordinal::text, 3, '0'), 'UTF8')), now(), now() + interval '1 hour'
		FROM files WHERE batch_id = $1`, batchID, phase)
	require.NoError(tb, err)
}
