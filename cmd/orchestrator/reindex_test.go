package main

import (
	"bytes"
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/arke-institute/orchestrator/internal/harness/testenv"
)

// TestReindexCommand: reindex re-embeds the chunks another embedder made,
// following the progress to the end; without the admin token it refuses.
func TestReindexCommand(t *testing.T) {
	t.Parallel()
	env := testenv.New(t, testenv.Options{NoWorkers: true, NoSweep: true})
	ctx := context.Background()
	// A stored document whose chunks' vectors an older embedder made.
	var id int64
	require.NoError(t, env.Pool.QueryRow(ctx, `INSERT INTO documents (r2_key, version, status, current_step, current)
		VALUES ('documents/old.md', 1, 'completed', 'store', true) RETURNING id`).Scan(&id))
	for i, text := range []string{"The lighthouse keeper lit the lamp.", "Ships passed the rocks at night."} {
		_, err := env.Pool.Exec(ctx, `INSERT INTO document_chunks (document_id, chunk_index, text, tokens, status, embedding,
				embedding_model, embedding_dims, text_config, search_text)
			VALUES ($1, $2, $3, 8, 'stored', '{1,0,0}', 'an-older-model', 3, 'simple', to_tsvector('simple', $3))`, id, i, text)
		require.NoError(t, err)
	}

	cli := func(token string, args ...string) (string, error) {
		vars := map[string]string{"ADMIN_TOKEN": token, "ORCHESTRATOR_URL": env.Server.URL}
		lookup := func(k string) (string, bool) { v, ok := vars[k]; return v, ok }
		var out, errOut bytes.Buffer
		err := runReindex(ctx, args, lookup, &out, &errOut)
		return out.String(), err
	}
	_, err := cli("")
	require.ErrorContains(t, err, "reindex needs the admin token")
	_, err = cli(testenv.AdminToken, "extra")
	require.ErrorAs(t, err, new(usageError))

	out, err := cli(testenv.AdminToken, "-poll-interval", (10 * time.Millisecond).String())
	require.NoError(t, err, out)
	require.Contains(t, out, "re-indexing for local-hashing-v1 (512 dimensions), text as simple\n")
	require.Contains(t, out, "2 of 2 chunks done\n")
	var model string
	var dims int
	require.NoError(t, env.Pool.QueryRow(ctx, `SELECT embedding_model, cardinality(embedding) FROM document_chunks WHERE document_id = $1 AND chunk_index = 1`, id).Scan(&model, &dims))
	require.Equal(t, "local-hashing-v1", model)
	require.Equal(t, 512, dims)
}
