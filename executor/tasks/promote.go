package tasks

import (
	"context"
	"errors"
	"fmt"
	"strings"
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
// promoteParallel how many copies run at once.
const (
	promoteBatch    = 512
	promoteParallel = 32
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
		attempts := make(map[string]bool, len(rows))
		for _, r := range rows {
			attempts[phases.AttemptID(r.TokenHash)] = true
		}
		if err := t.promote(ctx, store, lister, at.BatchID, attempts); err != nil {
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

// promote copies what the attempts staged, in every role's bucket, to
// their final keys, then deletes it. Each bucket's staging areas of the
// batch are listed once for all of them: a round costs a few requests
// besides one copy and a share of a delete per object. Run again after a
// failure midway, it copies what is left (what it deleted was copied
// first).
func (t Table) promote(ctx context.Context, store blob.Store, lister blob.Deleter, batchID string, attempts map[string]bool) error {
	for _, a := range t.areas() {
		prefix := phases.AttemptsPrefix(a.role, batchID)
		var staged []string
		err := lister.List(ctx, a.bucket, prefix, func(keys []string) error {
			for _, k := range keys {
				attempt, _, _ := strings.Cut(strings.TrimPrefix(k, prefix), "/")
				if attempts[attempt] {
					staged = append(staged, k)
				}
			}
			return nil
		})
		if errors.Is(err, blob.ErrNotFound) {
			continue
		}
		if err != nil {
			return fmt.Errorf("listing the staged outputs of batch %s: %w", batchID, err)
		}
		g, gctx := errgroup.WithContext(ctx)
		g.SetLimit(promoteParallel)
		for _, k := range staged {
			attempt, _, _ := strings.Cut(strings.TrimPrefix(k, prefix), "/")
			final, ok := phases.FinalKey(a.role, batchID, attempt, k)
			if !ok {
				continue
			}
			g.Go(func() error {
				if err := store.Copy(gctx, a.bucket, k, a.bucket, final); err != nil && !errors.Is(err, blob.ErrNotFound) {
					return fmt.Errorf("promoting a staged output: %w", err)
				}
				return nil
			})
		}
		if err := g.Wait(); err != nil {
			return err
		}
		for len(staged) > 0 {
			n := min(len(staged), blob.MaxDeleteKeys)
			if err := lister.Delete(ctx, a.bucket, staged[:n]); err != nil {
				return fmt.Errorf("deleting promoted outputs of batch %s: %w", batchID, err)
			}
			staged = staged[n:]
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
