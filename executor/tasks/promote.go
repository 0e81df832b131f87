package tasks

import (
	"context"
	"errors"
	"fmt"
	"strings"

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
// (phases.AttemptKey), named after its task and token (phases.AttemptID).
// Settle, on every run of the phase's fan-in check, lists the batch's
// staging areas, copies what the attempts whose successes were applied
// staged to the final keys, and deletes it: the objects left staged are
// the whole record of what is still to promote, and nothing is written to
// the database. The phase does not end before every completed task's
// outputs are promoted: the check ends it only if no task completed since
// Settle began (its count of completed tasks, under the batch's lock).
// Once the phase has ended, the staging areas of the attempts whose
// success was not the one applied are deleted (Settled; retention deletes
// what a failure there, or a worker that wrote on, left).

// promoteMax bounds the objects one Settle promotes, and promoteParallel
// the copies that run at once: a check that stops at promoteMax comes back
// at once to go on.
const (
	promoteMax      = 5000
	promoteParallel = 32
)

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

// staged is an object in an attempt's staging area.
type staged struct {
	area    area
	key     string
	attempt string
}

// Settle promotes what the attempts of phase at's completed tasks staged
// (jobs.Settler), and returns the test, for the fan-in check to run under
// the batch's lock once nothing of the phase is open, of whether a task
// completed since Settle began, whose outputs may then still be staged. A
// phase that stages nothing has nothing to settle. It returns
// jobs.ErrUnsettled when it stopped at promoteMax objects.
func (t Table) Settle(ctx context.Context, at jobs.PhaseAt) (func(context.Context, *db.Queries) (bool, error), error) {
	if !at.Phase.Spec().StagesOutputs {
		return nil, nil
	}
	store, lister, err := t.store()
	if err != nil {
		return nil, err
	}
	q := db.New(t.deps.Pool)
	count := db.TaskCountCompletedParams{BatchID: at.BatchID, Phase: at.Name()}
	// Read before the listing: a success counted here was called back
	// after its worker's writes, which the listing then sees.
	before, err := q.TaskCountCompleted(ctx, count)
	if err != nil {
		return nil, fmt.Errorf("counting completed tasks: %w", err)
	}
	objs, err := t.listStaged(ctx, lister, at.BatchID)
	if err != nil {
		return nil, err
	}
	won, err := t.applied(ctx, q, at, objs)
	if err != nil {
		return nil, err
	}
	var promote []staged
	for _, o := range objs {
		if won[o.attempt] {
			promote = append(promote, o)
		}
	}
	more := len(promote) > promoteMax
	if more {
		promote = promote[:promoteMax]
	}
	if err := t.promote(ctx, store, lister, at.BatchID, promote); err != nil {
		return nil, err
	}
	if len(promote) > 0 {
		t.deps.Logger.Debug("promoted staged outputs", "batch_id", at.BatchID, "phase", at.Name(), "objects", len(promote))
	}
	if more {
		return nil, jobs.ErrUnsettled
	}
	return func(ctx context.Context, q *db.Queries) (bool, error) {
		now, err := q.TaskCountCompleted(ctx, count)
		return now != before, err
	}, nil
}

// listStaged lists every object of the batch's staging areas, in every
// role's bucket.
func (t Table) listStaged(ctx context.Context, lister blob.Deleter, batchID string) ([]staged, error) {
	var out []staged
	for _, a := range t.areas() {
		prefix := phases.AttemptsPrefix(a.role, batchID)
		err := lister.List(ctx, a.bucket, prefix, func(keys []string) error {
			for _, k := range keys {
				attempt, _, _ := strings.Cut(strings.TrimPrefix(k, prefix), "/")
				out = append(out, staged{area: a, key: k, attempt: attempt})
			}
			return nil
		})
		if err != nil && !errors.Is(err, blob.ErrNotFound) {
			return nil, fmt.Errorf("listing the staged outputs of batch %s: %w", batchID, err)
		}
	}
	return out, nil
}

// applied names, of the attempts that staged objs, those whose success
// was applied: their task completed with their token.
func (t Table) applied(ctx context.Context, q *db.Queries, at jobs.PhaseAt, objs []staged) (map[string]bool, error) {
	seen := map[string]bool{}
	var ids []string
	for _, o := range objs {
		if id, ok := phases.AttemptTask(o.attempt); ok && !seen[id] {
			seen[id] = true
			ids = append(ids, id)
		}
	}
	won := map[string]bool{}
	if len(ids) == 0 {
		return won, nil
	}
	rows, err := q.TaskListCompletedBy(ctx, db.TaskListCompletedByParams{IDs: ids, BatchID: at.BatchID, Phase: at.Name()})
	if err != nil {
		return nil, fmt.Errorf("reading the tasks of staged outputs: %w", err)
	}
	for _, r := range rows {
		won[phases.AttemptID(r.ID, r.TokenHash)] = true
	}
	return won, nil
}

// promote copies objs to their final keys, then deletes them. Run again
// after a failure midway, it copies what is left (what it deleted was
// copied first).
func (t Table) promote(ctx context.Context, store blob.Store, lister blob.Deleter, batchID string, objs []staged) error {
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(promoteParallel)
	byBucket := map[string][]string{}
	for _, o := range objs {
		final, ok := phases.FinalKey(o.area.role, batchID, o.attempt, o.key)
		if !ok {
			continue
		}
		byBucket[o.area.bucket] = append(byBucket[o.area.bucket], o.key)
		g.Go(func() error {
			if err := store.Copy(gctx, o.area.bucket, o.key, o.area.bucket, final); err != nil && !errors.Is(err, blob.ErrNotFound) {
				return fmt.Errorf("promoting a staged output: %w", err)
			}
			return nil
		})
	}
	if err := g.Wait(); err != nil {
		return err
	}
	for bucket, keys := range byBucket {
		for len(keys) > 0 {
			n := min(len(keys), blob.MaxDeleteKeys)
			if err := lister.Delete(ctx, bucket, keys[:n]); err != nil {
				return fmt.Errorf("deleting promoted outputs of batch %s: %w", batchID, err)
			}
			keys = keys[n:]
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
