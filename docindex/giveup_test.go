package docindex_test

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/riverqueue/river"
	"github.com/riverqueue/river/rivertype"
	"github.com/stretchr/testify/require"

	"github.com/arke-institute/orchestrator/db"
	"github.com/arke-institute/orchestrator/docindex"
	"github.com/arke-institute/orchestrator/internal/harness/dbtest"
	"github.com/arke-institute/orchestrator/jobs"
	"github.com/arke-institute/orchestrator/setting"
	"github.com/arke-institute/orchestrator/tagging"
)

// stuckEmbedder is an embeddings provider that never answers: each call
// ends when its context does.
type stuckEmbedder struct{}

func (stuckEmbedder) Embed(ctx context.Context, _ []string) ([][]float32, error) {
	<-ctx.Done()
	return nil, ctx.Err()
}
func (stuckEmbedder) Dimensions() int  { return 8 }
func (stuckEmbedder) Provider() string { return "local" }
func (stuckEmbedder) Model() string    { return "stuck" }

// TestDocumentStepGivesUpOnLastAttempt: a run of a document's step job
// that fails (here its run's time runs out) on the job's last attempt
// fails the document with the reason in its errors, since River discards
// the job and no later run would end it; on an earlier attempt the
// document goes on (River retries the job).
func TestDocumentStepGivesUpOnLastAttempt(t *testing.T) {
	t.Parallel()
	pool := dbtest.New(t)
	var cfg docindex.Config
	require.NoError(t, setting.Load(func(string) (string, bool) { return "", false }, docindex.Settings(&cfg)))
	deps := jobs.Deps{Pool: pool, Logger: slog.New(slog.DiscardHandler)}
	worker := docindex.NewUnlimited(deps, cfg, docindex.Providers{Embedder: stuckEmbedder{}, Tagger: tagging.Local{}}, "")
	ctx := context.Background()

	for _, tc := range []struct {
		name        string
		maxAttempts int
		want        db.DocumentStatus
	}{{"EarlierAttempt", 2, db.DocumentProcessing}, {"LastAttempt", 1, db.DocumentFailed}} {
		var id int64
		require.NoError(t, pool.QueryRow(ctx, `INSERT INTO documents (r2_key, version, status, current_step)
			VALUES ($1, 1, 'processing', 'embeddings') RETURNING id`, "documents/"+tc.name+".md").Scan(&id))
		_, err := pool.Exec(ctx, `INSERT INTO document_chunks (document_id, chunk_index, text, tokens) VALUES ($1, 0, 'some text', 2)`, id)
		require.NoError(t, err)

		// The run's time runs out, as River's job timeout ends it.
		runCtx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
		job := &river.Job[docindex.DocumentStepArgs]{JobRow: &rivertype.JobRow{ID: id, Attempt: 1, MaxAttempts: tc.maxAttempts},
			Args: docindex.DocumentStepArgs{DocumentID: id}}
		err = worker.Work(runCtx, job)
		cancel()
		require.ErrorIs(t, err, context.DeadlineExceeded, tc.name)
		doc, err := db.New(pool).DocumentGet(ctx, id)
		require.NoError(t, err)
		require.Equal(t, tc.want, doc.Status, tc.name)
		if tc.want == "failed" {
			require.Contains(t, string(doc.Errors), "gave up after 1 attempts")
			require.Contains(t, string(doc.Errors), `"step": "embeddings"`)
		}
	}
}
