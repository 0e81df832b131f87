package service

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgerrcode"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

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
//
// Under steady load a group's COMMIT rides with the next group's
// statements (commitLoop, sendGroup), so each group costs one round trip.
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
//
// A group's transaction stays open after its statements have run while
// the next group is taken: if one is waiting, the COMMIT goes with its
// statements, in one round trip on the same connection (sendGroup);
// otherwise it is sent at once. So a lone callback still waits for nothing.
func (g *callbackGroups) commitLoop() {
	var open *openGroup
	for {
		group := g.take(open != nil)
		switch {
		case group != nil:
			open = g.run(open, group)
		case open != nil:
			g.commitOpen(open)
			open = nil
		default:
			return
		}
	}
}

// take takes the next group off the queue. When none is waiting it
// returns nil, and unless the caller still holds an open group, counts
// the caller's committer out.
func (g *callbackGroups) take(holding bool) []*callbackRequest {
	g.mu.Lock()
	defer g.mu.Unlock()
	if len(g.pending) == 0 {
		if !holding {
			g.active--
		}
		return nil
	}
	n := min(len(g.pending), maxGroup)
	group := make([]*callbackRequest, n)
	copy(group, g.pending)
	// Shift rather than reslice, so the queue's array does not grow
	// without bound under steady load.
	rest := copy(g.pending, g.pending[n:])
	clear(g.pending[rest:])
	g.pending = g.pending[:rest]
	return group
}

// openGroup is a group whose statements have run, and whose transaction is
// open on conn.
type openGroup struct {
	group    []*callbackRequest
	outcomes []outcome
	conn     *pgxpool.Conn
	tx       *pipelinedTx
	ctx      context.Context // bounds the group's work (groupTimeout)
	cancel   context.CancelFunc
}

// release returns the group's connection to the pool. It is released
// last: the pool closes a connection left inside a transaction rather
// than hand it out again.
func (o *openGroup) release() {
	o.conn.Release()
	o.cancel()
}

// commitOpen commits an open group alone, and answers it.
func (g *callbackGroups) commitOpen(o *openGroup) {
	g.answer(o.group, o.outcomes, o.tx.Commit(o.ctx))
	o.release()
}

// run applies group in a transaction of its own and returns it open, or
// returns nil once the group has been answered because it failed. When
// prev is not nil, its COMMIT is sent first, in the same round trip, on
// its connection, which the group then keeps; prev is answered as soon as
// its COMMIT is done.
//
// If the group fails as a whole, it is applied again one callback at a
// time, when that may help (retryAlone).
func (g *callbackGroups) run(prev *openGroup, group []*callbackRequest) *openGroup {
	ctx, cancel := context.WithTimeout(context.Background(), groupTimeout)
	o := &openGroup{group: group, ctx: ctx, cancel: cancel}
	var commitPrev func(error)
	inherited := prev != nil
	if inherited {
		o.conn = prev.conn
		commitPrev = func(err error) {
			// Cleared first, so that whatever happens while answering,
			// prev is answered once.
			p := prev
			prev = nil
			defer p.cancel()
			g.answer(p.group, p.outcomes, err)
		}
	} else {
		conn, err := g.svc.pool.Acquire(ctx)
		if err != nil {
			cancel()
			g.answer(group, nil, err)
			return nil
		}
		o.conn = conn
	}
	err := g.apply(o, commitPrev)
	if prev != nil {
		// Only a panic gets here: whether prev's COMMIT was sent is not
		// known, and its transaction rolls back with the group's. (%v: the
		// group's error is not prev's to unwrap.)
		commitPrev(fmt.Errorf("callbacks not committed: %v", err))
	}
	if err == nil {
		return o
	}
	o.tx.Rollback(ctx) //nolint:errcheck // the group's error is the one to report
	if badStatement(err) {
		// The connection's prepared statements are gone or stale (a
		// DISCARD, a schema change): a new connection prepares them anew.
		o.conn.Conn().Close(ctx) //nolint:errcheck // the pool drops it either way
	}
	closed := o.conn.Conn().IsClosed()
	o.release()
	if inherited && closed {
		// The connection the previous group left died under this one, or
		// was dropped for its statements. This group's transaction never
		// committed, so it runs again, on a connection of its own.
		return g.run(nil, group)
	}
	if len(group) > 1 && retryAlone(err) {
		for _, r := range group {
			if one := g.run(nil, []*callbackRequest{r}); one != nil {
				g.commitOpen(one)
			}
		}
		return nil
	}
	g.answer(group, nil, err)
	return nil
}

// apply runs applyCallbacks for o. A panic in it becomes the group's
// error: it runs on a goroutine of its own, where a panic would otherwise
// take the whole server down rather than one request.
func (g *callbackGroups) apply(o *openGroup, commitPrev func(error)) (err error) {
	o.tx = &pipelinedTx{conn: o.conn.Conn()}
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("applying callbacks: panic: %v", p)
		}
	}()
	o.tx, o.outcomes, err = g.svc.applyCallbacks(o.ctx, o.conn.Conn(), o.group, commitPrev)
	return err
}

// answer answers a group's requests, with their outcomes, or with err when
// the group failed (or its COMMIT did). Every request is answered before
// anything else is done.
func (g *callbackGroups) answer(group []*callbackRequest, outcomes []outcome, err error) {
	for i, r := range group {
		if err != nil {
			r.err = storageInputError(err)
		} else {
			r.out, r.err = outcomes[i].out, outcomes[i].err
		}
		close(r.done)
	}
	if err != nil {
		return
	}
	for i, o := range outcomes {
		if o.applied {
			// Committed: counted once, by the callback that ended the task.
			g.svc.metrics.TasksFinished(o.phase, taskOutcome(o.out.Status), 1)
			g.svc.logger.Debug("callback applied", "batch_id", group[i].batchID, "task_id", group[i].taskID, "phase", o.phase, "status", o.out.Status)
		}
	}
}

// taskOutcome is the metrics outcome of a task status a callback set.
func taskOutcome(status string) string {
	if status == string(phases.TaskCompleted) {
		return metrics.TaskCompleted
	}
	return metrics.TaskFailed
}

// badStatement tells whether err says that a prepared statement of the
// connection no longer exists or no longer fits its tables.
func badStatement(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && (pgErr.Code == pgerrcode.InvalidSQLStatementName || pgErr.Code == pgerrcode.FeatureNotSupported)
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
