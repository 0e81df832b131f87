package tasks

import (
	"context"
	"errors"
	"fmt"
	"time"

	"golang.org/x/sync/errgroup"

	"github.com/arke-institute/orchestrator/blob"
	"github.com/arke-institute/orchestrator/db"
	"github.com/arke-institute/orchestrator/jobs"
	"github.com/arke-institute/orchestrator/phases"
)

// Promoting staged outputs.
//
// A worker of a phase that stages its outputs (phases.Spec.StagesOutputs)
// writes what replaces under its attempt's staging area
// (phases.AttemptKey). Once an attempt's success is applied, Settle copies
// what it staged to the final keys and deletes the staged objects; the
// phase does not end before every completed task's outputs are promoted
// (Unsettled), and once it has ended the staging areas of the attempts
// whose success was not the one applied are deleted (Settled; retention
// deletes what a failure there, or a worker that wrote on, left).

// promoteBatch is how many tasks one round of Settle promotes, and
// promoteParallel how many at once.
const (
	promoteBatch    = 256
	promoteParallel = 16
)

// settleBudget bounds one Settle, well within a fan-in check's timeout
// (jobs.ShortTimeout): a check that stops at it looks again soon.
const settleBudget = 20 * time.Second

// area is where staged objects of one bucket role lie, and the role.
type area struct {
	role   phases.Bucket
	bucket string
}

// areas are the buckets of the roles, each bucket and prefix once.
func (t Table) areas() []area {
	var out []area
	seen := map[string]bool{}
	for _, role := range phases.Buckets {
		b := t.deps.Settings.Buckets[role]
		k := b + "\x00" + phases.BatchPrefix(role, "")
		if b == "" || seen[k] {
			continue
		}
		seen[k] = true
		out = append(out, area{role: role, bucket: b})
	}
	return out
}

// store is the store staged objects are listed, copied and deleted in.
func (t Table) store() (blob.Store, blob.Deleter, error) {
	d, ok := t.deps.Store.(blob.Deleter)
	if !ok {
		return nil, nil, fmt.Errorf("the store cannot list or delete objects, which promoting staged outputs needs")
	}
	return t.deps.Store, d, nil
}

// Settle promotes the staged outputs of phase at's completed tasks
// (jobs.Settler), a round of promoteBatch at a time. A phase that stages
// nothing has nothing to settle. It returns jobs.ErrUnsettled when it stopped
// at its budget.
func (t Table) Settle(ctx context.Context, at jobs.PhaseAt) error {
	if !at.Phase.Spec().StagesOutputs {
		return nil
	}
	store, lister, err := t.store()
	if err != nil {
		return err
	}
	q := db.New(t.deps.Pool)
	stop := time.Now().Add(settleBudget)
	for {
		rows, err := q.TaskListUnpromoted(ctx, db.TaskListUnpromotedParams{BatchID: at.BatchID, Phase: at.Name(), Max: promoteBatch})
		if err != nil {
			return fmt.Errorf("listing tasks to promote: %w", err)
		}
		if len(rows) == 0 {
			break
		}
		g, gctx := errgroup.WithContext(ctx)
		g.SetLimit(promoteParallel)
		for _, r := range rows {
			g.Go(func() error {
				return t.promote(gctx, store, lister, at.BatchID, phases.AttemptID(r.TokenHash))
			})
		}
		if err := g.Wait(); err != nil {
			return err
		}
		ids, hashes := make([]string, len(rows)), make([][]byte, len(rows))
		for i, r := range rows {
			ids[i], hashes[i] = r.ID, r.TokenHash
		}
		if _, err := q.TaskMarkPromoted(ctx, db.TaskMarkPromotedParams{IDs: ids, TokenHashes: hashes}); err != nil {
			return fmt.Errorf("recording promoted outputs: %w", err)
		}
		t.deps.Logger.Debug("promoted staged outputs", "batch_id", at.BatchID, "phase", at.Name(), "tasks", len(rows))
		if time.Now().After(stop) {
			return jobs.ErrUnsettled
		}
	}
	return nil
}

// Unsettled reports whether a completed task of phase at has outputs still
// to promote (jobs.Settler).
func (t Table) Unsettled(ctx context.Context, q *db.Queries, at jobs.PhaseAt) (bool, error) {
	if !at.Phase.Spec().StagesOutputs {
		return false, nil
	}
	rows, err := q.TaskListUnpromoted(ctx, db.TaskListUnpromotedParams{BatchID: at.BatchID, Phase: at.Name(), Max: 1})
	return len(rows) > 0, err
}

// promote copies what attempt staged, in every role's bucket, to its final
// keys, then deletes it. Run again after a failure midway, it copies what
// is left (what it deleted was copied first).
func (t Table) promote(ctx context.Context, store blob.Store, lister blob.Deleter, batchID, attempt string) error {
	for _, a := range t.areas() {
		prefix := phases.AttemptPrefix(a.role, batchID, attempt)
		err := lister.List(ctx, a.bucket, prefix, func(keys []string) error {
			for _, k := range keys {
				final, ok := phases.FinalKey(a.role, batchID, attempt, k)
				if !ok {
					continue
				}
				if err := store.Copy(ctx, a.bucket, k, a.bucket, final); err != nil {
					return fmt.Errorf("promoting a staged output: %w", err)
				}
			}
			return lister.Delete(ctx, a.bucket, keys)
		})
		if err != nil && !errors.Is(err, blob.ErrNotFound) {
			return fmt.Errorf("promoting the outputs of attempt %s of batch %s: %w", attempt, batchID, err)
		}
	}
	return nil
}

// Settled deletes what is left in the staging areas of phase at's batch
// once the phase has ended (jobs.Settler): the outputs of attempts whose
// success was not the one applied, which none can be any more.
func (t Table) Settled(ctx context.Context, at jobs.PhaseAt) error {
	if !at.Phase.Spec().StagesOutputs {
		return nil
	}
	_, lister, err := t.store()
	if err != nil {
		return err
	}
	batchID := at.BatchID
	for _, a := range t.areas() {
		err := lister.List(ctx, a.bucket, phases.AttemptsPrefix(a.role, batchID), func(keys []string) error {
			return lister.Delete(ctx, a.bucket, keys)
		})
		if err != nil && !errors.Is(err, blob.ErrNotFound) {
			return fmt.Errorf("deleting the staging areas of batch %s: %w", batchID, err)
		}
	}
	return nil
}
