package jobs

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river"

	"github.com/arke-institute/orchestrator/db"
	"github.com/arke-institute/orchestrator/metrics"
	"github.com/arke-institute/orchestrator/phases"
)

// Chunked phases (spec 004's OCR): a phase whose executor is
// phases.Chunked has no tasks. Entering it writes its chunks and their
// items (enterChunkedPhase) and enqueues one ChunkArgs job per chunk, in
// the phase's own queue. A chunk job settles a few items per run and
// snoozes between runs (ocr_chunk.go); the run that finds none left ends
// the chunk under the batch's shared fan-in lock and makes sure a
// phase_check runs (EndTasks), as a task's callback does. The check counts
// the phase's open chunks instead of its open tasks, and the transform
// reads each file's item as its task (generationItemsSQL).

// ChunkArgs is one chunk of a batch's chunked phase. Unique while
// unfinished: one run of a chunk's job at a time, which is what lets a run
// take every item left processing as a crashed run's leftover.
type ChunkArgs struct {
	BatchID string `json:"batch_id"`
	Phase   string `json:"phase"`
	ChunkID string `json:"chunk_id"`
}

// Kind is the River job kind.
func (ChunkArgs) Kind() string { return "chunk" }

// InsertOpts puts the job in its phase's queue (ChunkQueue), unique while
// unfinished. Its attempts are the chunk's global retries, set when it is
// enqueued (chunkInsertOpts).
func (a ChunkArgs) InsertOpts() river.InsertOpts {
	return river.InsertOpts{Queue: ChunkQueue(phases.Name(a.Phase)),
		UniqueOpts: river.UniqueOpts{ByArgs: true, ByState: uniqueUnfinished}}
}

// ChunkQueue is the River queue of a chunked phase's chunk jobs: its short
// name in lower case ("ocr"). A process started with only that queue
// (`orchestrator serve -queues ocr`) works chunks and nothing else.
func ChunkQueue(phase phases.Name) string {
	p, ok := phases.Get(phase)
	if !ok {
		return river.QueueDefault
	}
	return strings.ToLower(p.Spec().Short)
}

// ChunkQueues are the queues of every chunked phase.
func ChunkQueues() []string {
	var out []string
	for _, p := range phases.All() {
		if p.Spec().Executor == phases.Chunked {
			out = append(out, ChunkQueue(p.Spec().Name))
		}
	}
	return out
}

// chunkParams are the insert parameters of the jobs of chunks ids of a
// batch's phase: maxAttempts is one run plus the chunk's global retries.
func chunkParams(batchID string, phase phases.Name, ids []string, maxAttempts int) []river.InsertManyParams {
	params := make([]river.InsertManyParams, 0, len(ids))
	for _, id := range ids {
		args := ChunkArgs{BatchID: batchID, Phase: string(phase), ChunkID: id}
		opts := args.InsertOpts()
		opts.MaxAttempts = maxAttempts
		params = append(params, river.InsertManyParams{Args: args, InsertOpts: &opts})
	}
	return params
}

// chunkMaxAttempts is a chunk job's attempts: one and the global retries.
func (d Deps) chunkMaxAttempts() int { return d.Config.OCR.MaxGlobalRetries + 1 }

// enterChunkedPhase is enterNextPhase for a chunked phase p with work:
// it packs files (the stored generation) into chunks, writes them and
// their items (a skipped item is written settled, and counted), moves the
// batch into p and enqueues a job per chunk. Runs in the transition's
// transaction. The chunks of a phase entered again (a DONE batch retried)
// are numbered on from those of its earlier run, which stay.
func enterChunkedPhase(ctx context.Context, tx pgx.Tx, client *river.Client[pgx.Tx], d Deps, batchID string, p phases.Chunker, generation int32, files []phases.File) error {
	q := db.New(tx)
	name := p.Spec().Name
	chunks := p.Chunks(files, d.Config.Phases[name].ChunkSize)
	earlier, err := q.ChunkSummary(ctx, db.ChunkSummaryParams{BatchID: batchID, Phase: string(name)})
	if err != nil {
		return fmt.Errorf("counting earlier chunks of %s %s: %w", batchID, name, err)
	}
	if earlier.ChunksTotal > 0 {
		for i := range chunks {
			chunks[i].ID = strconv.Itoa(int(earlier.ChunksTotal) + i)
		}
	}
	rows := make([]db.ChunkInsertManyParams, 0, len(chunks))
	var items []db.ChunkItemInsertManyParams
	ids := make([]string, 0, len(chunks))
	refs, skipped := 0, 0
	for _, c := range chunks {
		row := db.ChunkInsertManyParams{BatchID: batchID, Phase: string(name), ChunkID: c.ID, TotalRefs: int32(len(c.Items))}
		for i, it := range c.Items {
			item := db.ChunkItemInsertManyParams{
				BatchID: batchID, Phase: string(name), ChunkID: c.ID, ItemIndex: int32(i),
				DirectoryPath: it.Ref.DirectoryPath, FileID: it.Ref.ID, R2Key: it.Ref.R2Key, Status: string(phases.OCRItemPending),
			}
			if it.SkipReason != "" {
				item.Status, item.Error = string(phases.OCRItemSkipped), &it.SkipReason
				row.Skipped++
			}
			items = append(items, item)
		}
		refs += len(c.Items)
		skipped += int(row.Skipped)
		rows = append(rows, row)
		ids = append(ids, c.ID)
	}
	if _, err := q.ChunkInsertMany(ctx, rows); err != nil {
		return fmt.Errorf("inserting %d chunks of %s: %w", len(rows), name, err)
	}
	if _, err := q.ChunkItemInsertMany(ctx, items); err != nil {
		return fmt.Errorf("inserting %d chunk items of %s: %w", len(items), name, err)
	}
	if _, err := q.BatchSetPhase(ctx, db.BatchSetPhaseParams{ID: batchID, Phase: string(name), Generation: generation}); err != nil {
		if errors.Is(err, pgx.ErrNoRows) {
			return nil
		}
		return fmt.Errorf("moving batch %s to %s: %w", batchID, name, err)
	}
	if err := q.EventRecord(ctx, db.Event{BatchID: batchID, Type: db.EventPhaseStarted, Phase: string(name), Data: map[string]any{
		"chunks": len(chunks), "refs": refs, "skipped": skipped, "generation": generation,
	}}); err != nil {
		return err
	}
	d.Metrics.ChunkItemsFinished(string(name), metrics.ItemSkipped, skipped)
	if _, err := client.InsertManyTx(ctx, tx, chunkParams(batchID, name, ids, d.chunkMaxAttempts())); err != nil {
		return fmt.Errorf("enqueueing the chunks of %s %s: %w", batchID, name, err)
	}
	return nil
}

// EnsureChunkJobs makes sure every open chunk of a batch's chunked phase
// has its job (unique: an existing one is kept), as a retry or the sweep's
// backstop need. It returns how many it enqueued.
func EnsureChunkJobs(ctx context.Context, tx pgx.Tx, client *river.Client[pgx.Tx], maxAttempts int, batchID string, phase phases.Name) (int, error) {
	ids, err := db.New(tx).ChunkListOpen(ctx, db.ChunkListOpenParams{BatchID: batchID, Phase: string(phase)})
	if err != nil {
		return 0, fmt.Errorf("listing open chunks of %s %s: %w", batchID, phase, err)
	}
	if len(ids) == 0 {
		return 0, nil
	}
	res, err := client.InsertManyTx(ctx, tx, chunkParams(batchID, phase, ids, maxAttempts))
	if err != nil {
		return 0, fmt.Errorf("enqueueing the chunks of %s %s: %w", batchID, phase, err)
	}
	n := 0
	for _, r := range res {
		if !r.UniqueSkippedAsDuplicate {
			n++
		}
	}
	return n, nil
}

// chunked reports whether the phase called name runs in chunks.
func chunked(name string) bool {
	p, ok := phases.Get(phases.Name(name))
	return ok && p.Spec().Executor == phases.Chunked
}
