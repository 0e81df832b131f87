package service

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/arke-institute/orchestrator/metrics"
	"github.com/arke-institute/orchestrator/phases"
)

// Group commit of callbacks.
//
// A callback is a tiny transaction, and at thousands a second the commit
// (a WAL flush) dominates its cost. So callbacks that arrive while others are
// being committed queue up and are applied together, in one transaction, by
// one of at most CALLBACK_COMMITTERS goroutines; each request is answered only
// after its group has committed. An idle server commits a lone callback at
// once: there is no timer and no waiting for a group to fill.
//
// A group that fails as a whole because of its data or a deadlock (a body
// the database refuses, a deadlock with the launcher) is applied again one
// callback at a time, so one bad callback never fails the others.
const (
	// maxGroup bounds a group, and so a transaction's size and the wait of
	// the first callback in it.
	maxGroup = 256
	// groupTimeout bounds one group's transaction. It is not the caller's
	// context: a group serves many callers, and one that hangs up must not
	// fail the others.
	groupTimeout = 30 * time.Second
)

// callbackGroups queues callbacks and commits them in groups.
type callbackGroups struct {
	svc        *Service
	committers int // at most this many groups in flight

	mu      sync.Mutex
	pending []*callbackRequest
	active  int // committer goroutines running
}

// submit queues r and waits for its outcome. A caller that gives up still
// has its callback applied (or not) with its group; only the answer is lost,
// and the worker's retry is then a harmless repeat.
func (g *callbackGroups) submit(ctx context.Context, r *callbackRequest) (CallbackResult, error) {
	g.mu.Lock()
	g.pending = append(g.pending, r)
	if g.active < g.committers {
		g.active++
		go g.commitLoop()
	}
	g.mu.Unlock()
	select {
	case <-r.done:
		return r.out, r.err
	case <-ctx.Done():
		return CallbackResult{}, ctx.Err()
	}
}

// commitLoop commits groups until none is waiting, then exits: committers
// live only while there is work, so there is nothing to start or stop.
func (g *callbackGroups) commitLoop() {
	for {
		g.mu.Lock()
		if len(g.pending) == 0 {
			g.active--
			g.mu.Unlock()
			return
		}
		n := min(len(g.pending), maxGroup)
		group := make([]*callbackRequest, n)
		copy(group, g.pending)
		// Shift rather than reslice, so the queue's array does not grow
		// without bound under steady load.
		rest := copy(g.pending, g.pending[n:])
		clear(g.pending[rest:])
		g.pending = g.pending[:rest]
		g.mu.Unlock()

		g.commit(group)
	}
}

// commit applies a group in one transaction and answers its requests; if
// the group fails as a whole, it retries each request alone.
func (g *callbackGroups) commit(group []*callbackRequest) {
	outcomes, err := g.apply(group)
	if err != nil && len(group) > 1 && retryAlone(err) {
		for _, r := range group {
			g.commit([]*callbackRequest{r})
		}
		return
	}
	for i, r := range group {
		if err != nil {
			r.err = storageInputError(err)
		} else {
			r.out, r.err = outcomes[i].out, outcomes[i].err
			if o := outcomes[i]; o.applied {
				// Committed: counted once, by the callback that ended the task.
				g.svc.metrics.TasksFinished(o.phase, taskOutcome(o.out.Status), 1)
				g.svc.logger.Debug("callback applied", "batch_id", r.batchID, "task_id", r.taskID, "phase", o.phase, "status", o.out.Status)
			}
		}
		close(r.done)
	}
}

// taskOutcome is the metrics outcome of a task status a callback set.
func taskOutcome(status string) string {
	if status == string(phases.TaskCompleted) {
		return metrics.TaskCompleted
	}
	return metrics.TaskFailed
}

// retryAlone tells whether a group's failure may be one member's doing, or
// chance, so that applying the members one by one is worth it: data the
// database refused (class 22) or a deadlock or serialization failure
// (class 40). Anything else (the database unreachable, a timeout) would
// only fail again, once per member, so the whole group fails at once.
func retryAlone(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && (strings.HasPrefix(pgErr.Code, "22") || strings.HasPrefix(pgErr.Code, "40"))
}

// apply runs applyCallbacks in a transaction of its own. A panic in it
// becomes the group's error: it runs on a goroutine of its own, where a
// panic would otherwise take the whole server down rather than one request.
func (g *callbackGroups) apply(group []*callbackRequest) (outcomes []outcome, err error) {
	ctx, cancel := context.WithTimeout(context.Background(), groupTimeout)
	defer cancel()
	conn, err := g.svc.pool.Acquire(ctx)
	if err != nil {
		return nil, err
	}
	// Released last: the pool closes a connection left inside a
	// transaction rather than hand it out again.
	defer conn.Release()
	var tx *pipelinedTx
	defer func() {
		if p := recover(); p != nil {
			outcomes, err = nil, fmt.Errorf("applying callbacks: panic: %v", p)
		}
		if err != nil && tx != nil {
			tx.Rollback(ctx) //nolint:errcheck // the group's error is the one to report
		}
	}()
	tx, outcomes, err = g.svc.applyCallbacks(ctx, conn.Conn(), group)
	if err != nil {
		return nil, err
	}
	return outcomes, tx.Commit(ctx)
}

// pipelinedTx is a transaction whose BEGIN was sent in a pipeline with its
// first statements (applyCallbacks), saving the round trip pgx's Begin
// takes. It is a pgx.Tx so that River can insert jobs in it; it cannot
// nest transactions.
type pipelinedTx struct{ conn *pgx.Conn }

var _ pgx.Tx = (*pipelinedTx)(nil)

var errNoNesting = errors.New("a pipelined transaction cannot begin a nested one")

// Begin implements pgx.Tx: not supported.
func (t *pipelinedTx) Begin(context.Context) (pgx.Tx, error) { return nil, errNoNesting }

// Commit commits, and reports a transaction that could only roll back (it
// failed earlier) as pgx does.
func (t *pipelinedTx) Commit(ctx context.Context) error {
	tag, err := t.conn.Exec(ctx, "COMMIT")
	if err == nil && tag.String() == "ROLLBACK" {
		return pgx.ErrTxCommitRollback
	}
	return err
}

// Rollback rolls back.
func (t *pipelinedTx) Rollback(ctx context.Context) error {
	_, err := t.conn.Exec(ctx, "ROLLBACK")
	return err
}

// CopyFrom implements pgx.Tx.
func (t *pipelinedTx) CopyFrom(ctx context.Context, table pgx.Identifier, columns []string, src pgx.CopyFromSource) (int64, error) {
	return t.conn.CopyFrom(ctx, table, columns, src)
}

// SendBatch implements pgx.Tx.
func (t *pipelinedTx) SendBatch(ctx context.Context, b *pgx.Batch) pgx.BatchResults {
	return t.conn.SendBatch(ctx, b)
}

// LargeObjects implements pgx.Tx: not supported (the zero value).
func (t *pipelinedTx) LargeObjects() pgx.LargeObjects { return pgx.LargeObjects{} }

// Prepare implements pgx.Tx.
func (t *pipelinedTx) Prepare(ctx context.Context, name, sql string) (*pgconn.StatementDescription, error) {
	return t.conn.Prepare(ctx, name, sql)
}

// Exec implements pgx.Tx.
func (t *pipelinedTx) Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error) {
	return t.conn.Exec(ctx, sql, args...)
}

// Query implements pgx.Tx.
func (t *pipelinedTx) Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error) {
	return t.conn.Query(ctx, sql, args...)
}

// QueryRow implements pgx.Tx.
func (t *pipelinedTx) QueryRow(ctx context.Context, sql string, args ...any) pgx.Row {
	return t.conn.QueryRow(ctx, sql, args...)
}

// Conn implements pgx.Tx.
func (t *pipelinedTx) Conn() *pgx.Conn { return t.conn }
