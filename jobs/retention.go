package jobs

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river"

	"github.com/arke-institute/orchestrator/blob"
	"github.com/arke-institute/orchestrator/db"
	"github.com/arke-institute/orchestrator/fanin"
	"github.com/arke-institute/orchestrator/phases"
)

// RetentionArgs is the periodic removal (every RETENTION_INTERVAL) of the
// processing state of batches that finished more than RETENTION_DAYS ago
// (spec 002 keeps 7 days): Prune.
type RetentionArgs struct{}

// Kind is the River job kind.
func (RetentionArgs) Kind() string { return "retention" }

// InsertOpts keeps one retention run at a time, whichever replica's leader
// inserted it.
func (RetentionArgs) InsertOpts() river.InsertOpts {
	return river.InsertOpts{UniqueOpts: river.UniqueOpts{ByState: fanin.UniqueUnfinished}}
}

// RetentionWorker works RetentionArgs.
type RetentionWorker struct {
	Defaults[RetentionArgs]
	deps Deps
}

// retentionBudget bounds one run of the retention job, well within its
// timeout (ShortTimeout); a run that stops at it with batches left
// comes back at once to go on.
const retentionBudget = 30 * time.Second

// Work prunes what is due; with more left than one run's budget, it
// snoozes briefly and goes on.
func (w *RetentionWorker) Work(ctx context.Context, _ *river.Job[RetentionArgs]) error {
	res, err := Prune(ctx, w.deps, PruneOptions{Budget: retentionBudget})
	if err != nil {
		return err
	}
	if res.More {
		return river.JobSnooze(time.Second)
	}
	return nil
}

// The tables Prune removes rows from after the executors' own (as each
// Executor.Prune names them), as they are named in PruneResult.Removed
// and in the metric's table label; StagingObjects counts the objects
// deleted under the batches' staging prefixes.
const (
	TableFiles       = "files"
	TableBatchEvents = "batch_events"
	StagingObjects   = "staging_objects"
)

// PruneOptions tune one Prune.
type PruneOptions struct {
	// Now is the time the cutoff (Now - RETENTION_DAYS) is taken from;
	// zero is time.Now().
	Now time.Time
	// Budget stops Prune, between two batches, once it has run this long
	// (zero: no limit); PruneResult.More then says batches are left.
	Budget time.Duration
}

// PruneResult is what one Prune did.
type PruneResult struct {
	// Batches are the batches whose processing state is gone now.
	Batches []string
	// Failed are the batches whose pruning failed (logged); the next run
	// tries them again.
	Failed []string
	// Removed counts the rows removed per table, and the staging objects
	// (StagingObjects).
	Removed map[string]int64
	// Statements is how many delete statements ran, each its own
	// transaction of at most RETENTION_DELETE_ROWS rows.
	Statements int
	// More is true when Prune stopped at its budget with batches still
	// due.
	More bool
}

// prunePage is how many due batches Prune lists at a time.
const prunePage = 100

// processedManifestName is the final manifest's name under the batch's
// staging prefix, when there is no ingest service to deliver it to.
const processedManifestName = "_manifest.processed.json"

// Prune removes the processing state of every batch that finished (DONE or
// ERROR) more than RETENTION_DAYS before opts.Now, and whose delivery to
// ingest is not still going on: its tasks and their counters, its chunks
// and chunk items, its events and every file generation but its current
// (final) one, plus, with RETENTION_STAGING, its objects under
// staging/{batch_id}/ but the processed manifest. The batch row stays,
// with its task counts and OCR summary (pruned_counts) for its status, and
// so do its final generation, which the final manifest is built from, and
// its documents (data, not processing state). It ends with one
// batch.pruned event saying what went.
//
// A batch whose pruning fails (say, storage refuses to delete its staging
// objects) is logged and left for the next run, and the others go on;
// only a failure to list the batches due fails Prune.
//
// Rows go RETENTION_DELETE_ROWS at a time, each delete its own short
// transaction, so retention never holds locks for long nor writes a
// batch's whole history to the WAL at once. An interrupted Prune is taken
// up again by the next: a batch is marked pruned (pruned_at) only once
// everything is gone. With RETENTION_DAYS 0 it does nothing.
func Prune(ctx context.Context, d Deps, opts PruneOptions) (PruneResult, error) {
	res := PruneResult{Removed: map[string]int64{}}
	r := d.Settings.Retention
	if r.Days <= 0 {
		return res, nil
	}
	start := time.Now()
	if opts.Now.IsZero() {
		opts.Now = start
	}
	cutoff := opts.Now.Add(-r.Age())
	var deleter blob.Deleter
	if r.Staging {
		var ok bool
		if deleter, ok = d.Store.(blob.Deleter); !ok {
			return res, errors.New("RETENTION_STAGING is set, but the store cannot list and delete objects")
		}
	}
	p := pruner{deps: d, res: &res, rows: int32(r.DeleteRows), deleter: deleter}
	defer p.report(start)
	q := db.New(d.Pool)
	for {
		due, err := q.BatchListPrunable(ctx, db.BatchListPrunableParams{Cutoff: cutoff, Skip: res.Failed, Max: prunePage})
		if err != nil {
			return res, fmt.Errorf("listing batches to prune: %w", err)
		}
		for _, id := range due {
			if opts.Budget > 0 && time.Since(start) >= opts.Budget {
				res.More = true
				return res, nil
			}
			if err := p.batch(ctx, id, cutoff); err != nil {
				if ctx.Err() != nil {
					return res, err
				}
				d.Logger.Warn("pruning a finished batch failed; the next run tries again", "batch_id", id, "error", err)
				res.Failed = append(res.Failed, id)
			}
		}
		if len(due) < prunePage {
			return res, nil
		}
	}
}

// pruner removes one batch's processing state at a time for Prune.
type pruner struct {
	deps    Deps
	res     *PruneResult
	rows    int32
	deleter blob.Deleter // nil: staging objects stay
}

// batch prunes one batch. A batch that may no longer be pruned (an admin
// retry got to it first) is left alone.
func (p *pruner) batch(ctx context.Context, id string, cutoff time.Time) error {
	q := db.New(p.deps.Pool)
	progress, err := p.deps.Executors.Progress(ctx, q, []string{id})
	if err != nil {
		return err
	}
	snapshot, err := json.Marshal(map[string]any{"phases": orEmpty(progress[id])})
	if err != nil {
		return err
	}
	b, err := q.BatchPruneBegin(ctx, db.BatchPruneBeginParams{ID: id, Cutoff: cutoff, Snapshot: snapshot})
	if errors.Is(err, pgx.ErrNoRows) {
		return nil // retried, or pruned by another process, meanwhile
	}
	if err != nil {
		return fmt.Errorf("beginning to prune batch %s: %w", id, err)
	}
	removed := map[string]int64{}
	for _, e := range p.deps.Executors.All() {
		r, err := e.Prune(ctx, q, id, p.rows)
		for table, k := range r.Rows {
			removed[table] += k
		}
		p.res.Statements += r.Statements
		if err != nil {
			p.count(removed)
			return fmt.Errorf("pruning the %s work of batch %s: %w", e.Kind(), id, err)
		}
	}
	// A generation written ahead of a batch that then failed goes with the
	// files of the generations before the final one.
	if err := q.GenerationAheadDelete(ctx, id); err != nil {
		return fmt.Errorf("forgetting the generation written ahead of batch %s: %w", id, err)
	}
	steps := []struct {
		table string
		del   func() (int64, error)
	}{
		{TableFiles, func() (int64, error) {
			return q.FileDeleteOtherGenerations(ctx, db.FileDeleteOtherGenerationsParams{BatchID: id, Keep: b.Generation, Max: p.rows})
		}},
		{TableBatchEvents, func() (int64, error) {
			return q.BatchEventDeleteByBatch(ctx, db.BatchEventDeleteByBatchParams{BatchID: id, Max: p.rows})
		}},
	}
	for _, s := range steps {
		n, statements, err := DeleteInSteps(p.rows, s.del)
		p.res.Statements += statements
		removed[s.table] += n
		if err != nil {
			p.count(removed)
			return fmt.Errorf("pruning %s of batch %s: %w", s.table, id, err)
		}
	}
	if p.deleter != nil {
		n, err := p.staging(ctx, id)
		removed[StagingObjects] += n
		if err != nil {
			p.count(removed)
			return err
		}
	}
	err = pgx.BeginFunc(ctx, p.deps.Pool, func(tx pgx.Tx) error {
		q := db.New(tx)
		if err := q.BatchPruneEnd(ctx, id); err != nil {
			return err
		}
		return q.EventRecord(ctx, db.Event{BatchID: id, Type: db.EventBatchPruned, Data: map[string]any{
			"retention_days": p.deps.Settings.Retention.Days, "removed": removed, "status": b.Status,
		}})
	})
	p.count(removed)
	if err != nil {
		return fmt.Errorf("ending the pruning of batch %s: %w", id, err)
	}
	p.res.Batches = append(p.res.Batches, id)
	return nil
}

// staging deletes the batch's objects under staging/{batch_id}/ in
// R2_BUCKET, all but the processed manifest (the final manifest when there
// is no ingest service), and what attempts left in their staging areas in
// the other buckets (phases.AttemptsPrefix), and returns how many it
// deleted.
func (p *pruner) staging(ctx context.Context, id string) (int64, error) {
	bucket, prefix := p.deps.Settings.StagingBucket(), "staging/"+id+"/"
	keep := prefix + processedManifestName
	var deleted int64
	del := func(bucket, prefix string) error {
		return p.deleter.List(ctx, bucket, prefix, func(keys []string) error {
			doomed := make([]string, 0, len(keys))
			for _, k := range keys {
				if k != keep && strings.HasPrefix(k, prefix) {
					doomed = append(doomed, k)
				}
			}
			if err := p.deleter.Delete(ctx, bucket, doomed); err != nil {
				return err
			}
			deleted += int64(len(doomed))
			return nil
		})
	}
	if err := del(bucket, prefix); err != nil {
		return deleted, fmt.Errorf("deleting the staging objects of batch %s: %w", id, err)
	}
	for _, role := range []phases.Bucket{phases.ArchiveBucket, phases.CDNBucket} {
		b, area := p.deps.Settings.Buckets[role], phases.AttemptsPrefix(role, id)
		if b == "" || (b == bucket && strings.HasPrefix(area, prefix)) {
			continue // deleted above
		}
		if err := del(b, area); err != nil && !errors.Is(err, blob.ErrNotFound) {
			return deleted, fmt.Errorf("deleting what attempts staged for batch %s: %w", id, err)
		}
	}
	return deleted, nil
}

// count adds one batch's removals to the result and the metrics.
func (p *pruner) count(removed map[string]int64) {
	for table, n := range removed {
		p.res.Removed[table] += n
		p.deps.Metrics.RetentionRemoved(table, n)
	}
}

// report logs one line for the run, if it removed anything.
func (p *pruner) report(start time.Time) {
	if len(p.res.Batches) == 0 && len(p.res.Failed) == 0 && len(p.res.Removed) == 0 {
		return
	}
	attrs := []any{"batches", len(p.res.Batches), "failed", len(p.res.Failed), "statements", p.res.Statements, "more", p.res.More,
		"duration_ms", time.Since(start).Milliseconds(), "retention_days", p.deps.Settings.Retention.Days}
	tables := make([]string, 0, len(p.res.Removed))
	for t := range p.res.Removed {
		tables = append(tables, t)
	}
	slices.Sort(tables)
	for _, t := range tables {
		attrs = append(attrs, t, p.res.Removed[t])
	}
	p.deps.Logger.Info("retention pruned finished batches", attrs...)
}

// DeleteInSteps runs del, a delete of at most rows rows, until it deletes
// fewer, and returns how many rows it deleted in all and in how many
// statements: retention removes a batch's rows in short statements, each
// its own transaction.
func DeleteInSteps(rows int32, del func() (int64, error)) (total int64, statements int, err error) {
	for {
		n, err := del()
		total += n
		statements++
		if err != nil || n < int64(rows) {
			return total, statements, err
		}
	}
}

// orEmpty is ps, or an empty list for none (a snapshot says "no phases",
// not null).
func orEmpty(ps []PhaseProgress) []PhaseProgress {
	if ps == nil {
		return []PhaseProgress{}
	}
	return ps
}
