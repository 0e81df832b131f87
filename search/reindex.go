package search

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/arke-institute/orchestrator/db"
)

// Re-index batch sizes: chunks embedded in one call (and one
// transaction), chunks whose text is parsed again in one statement.
const (
	reindexVectors = 50
	reindexTexts   = 1000
)

// ReindexProgress says how far the chunks of current versions are from
// the index's embedder and text search configuration.
type ReindexProgress struct {
	// Embedder and TextConfig are what the chunks are brought to.
	Embedder   string `json:"embedder"`
	TextConfig string `json:"textConfig"`
	// Chunks counts the chunks of current versions (past their
	// embeddings step), Done those with a vector of the embedder and
	// search text of the configuration.
	Chunks int64 `json:"chunks"`
	Done   int64 `json:"done"`
	// Running says a re-index runs in this process; Error is how its last
	// run ended, when it failed.
	Running bool   `json:"running"`
	Error   string `json:"error,omitempty"`
}

// reindexState is the re-index of one process.
type reindexState struct {
	running bool
	err     error
}

// Progress is how far the re-index is.
func (x *Index) Progress(ctx context.Context) (ReindexProgress, error) {
	row, err := db.New(x.pool).DocumentSearchReindexProgress(ctx, db.DocumentSearchReindexProgressParams{
		EmbeddingModel: x.embedder.Model(), EmbeddingDims: int32(x.embedder.Dimensions()), TextConfig: x.cfg.TextConfig})
	if err != nil {
		return ReindexProgress{}, fmt.Errorf("counting the chunks to re-index: %w", err)
	}
	p := ReindexProgress{Embedder: fmt.Sprintf("%s (%d dimensions)", x.embedder.Model(), x.embedder.Dimensions()),
		TextConfig: x.cfg.TextConfig, Chunks: row.Chunks, Done: row.Done}
	x.mu.Lock()
	p.Running = x.reindex.running
	if x.reindex.err != nil {
		p.Error = x.reindex.err.Error()
	}
	x.mu.Unlock()
	return p, nil
}

// StartReindex starts a re-index in the background of this process,
// unless one runs: it ends when every chunk of a current version has a
// vector of the embedder and search text of the configuration, or at the
// first failure (Progress says which). ctx bounds it.
func (x *Index) StartReindex(ctx context.Context) {
	x.mu.Lock()
	defer x.mu.Unlock()
	if x.reindex.running {
		return
	}
	x.reindex = reindexState{running: true}
	go func() {
		start := time.Now()
		err := x.Reindex(ctx)
		x.mu.Lock()
		x.reindex = reindexState{err: err}
		x.mu.Unlock()
		if err != nil {
			x.cfg.Logger.Error("search re-index failed; POST /admin/reindex resumes it", "error", err)
			return
		}
		x.cfg.Logger.Info("search re-index done", "took_ms", time.Since(start).Milliseconds())
	}()
}

// Reindex brings the chunks of current versions to the index's text
// search configuration and embedder: their text parsed again, their
// vectors embedded again, each batch committed. Stopped, it resumes where
// it was; several processes may run it at once (each takes chunks the
// others have not locked).
func (x *Index) Reindex(ctx context.Context) error {
	q := db.New(x.pool)
	for {
		n, err := q.DocumentSearchReindexText(ctx, db.DocumentSearchReindexTextParams{TextConfig: x.cfg.TextConfig, Max: reindexTexts})
		if err != nil {
			return fmt.Errorf("parsing chunks' text as %s: %w", x.cfg.TextConfig, err)
		}
		if n == 0 {
			break
		}
	}
	for {
		n, err := x.reembed(ctx)
		if err != nil {
			return err
		}
		if n == 0 {
			return nil
		}
	}
}

// reembed embeds the next chunks of other embedders again, in one
// transaction that holds them, and says how many.
func (x *Index) reembed(ctx context.Context) (int, error) {
	model, dims := x.embedder.Model(), int32(x.embedder.Dimensions())
	var n int
	err := pgx.BeginFunc(ctx, x.pool, func(tx pgx.Tx) error {
		q := db.New(tx)
		rows, err := q.DocumentSearchReindexNext(ctx, db.DocumentSearchReindexNextParams{EmbeddingModel: model, EmbeddingDims: dims, Max: reindexVectors})
		if err != nil {
			return fmt.Errorf("reading the chunks to embed again: %w", err)
		}
		if n = len(rows); n == 0 {
			return nil
		}
		texts := make([]string, len(rows))
		for i, r := range rows {
			// As the embeddings step embeds a chunk.
			texts[i] = r.Text
			if r.Heading != "" {
				texts[i] = r.Heading + "\n\n" + r.Text
			}
		}
		vectors, err := x.embedder.Embed(ctx, texts)
		if err != nil {
			return fmt.Errorf("embedding %d chunks with %s: %w", len(texts), model, err)
		}
		if len(vectors) != len(rows) {
			return fmt.Errorf("the embedder %s answered %d vectors for %d chunks", model, len(vectors), len(rows))
		}
		for i, r := range rows {
			if len(vectors[i]) != int(dims) {
				return errors.New("the embedder " + model + " answered a vector of the wrong size")
			}
			if err := q.DocumentSearchReindexVector(ctx, db.DocumentSearchReindexVectorParams{DocumentID: r.DocumentID, ChunkIndex: r.ChunkIndex,
				Embedding: vectors[i], EmbeddingModel: model, EmbeddingDims: dims, Signature: Signature(vectors[i]), Quantised: Quantise(vectors[i])}); err != nil {
				return fmt.Errorf("storing document %d chunk %d's vector: %w", r.DocumentID, r.ChunkIndex, err)
			}
		}
		return nil
	})
	return n, err
}
