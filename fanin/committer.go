package fanin

// The group committer applies workers' callbacks to their tasks in groups,
// one transaction a group, and answers each callback only once its group
// has committed: the batch form of EndTasks, for many batches at once. It
// is the only place that batches callbacks: it owns the grouping, the
// group's pipelined round trip (the fan-in's lock and check statements
// around TaskCompleteMany), the COMMIT that rides with the next group, and
// each callback's outcome (callbacks.go).
//
// A callback is a tiny transaction, and at thousands a second the commit (a
// WAL flush) dominates its cost: a commit per callback would cap throughput
// well below what the database can do. So callbacks that arrive while
// others are being committed queue up and are applied together. An idle
// server commits a lone callback at once: there is no timer and no waiting
// for a group to fill.

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgerrcode"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgtype"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"

	"github.com/arke-institute/orchestrator/db"
	"github.com/arke-institute/orchestrator/metrics"
	"github.com/arke-institute/orchestrator/phases"
)

const (
	// maxGroup bounds a group, and so a transaction's size and the wait of
	// the first callback in it.
	maxGroup = 256
	// groupTimeout bounds one group's transaction. It is not the caller's
	// context: a group serves many callers, and one that hangs up must not
	// fail the others.
	groupTimeout = 30 * time.Second
)

// Config configures a Committer.
type Config struct {
	// Pool provides the connections groups commit on. Required.
	Pool *pgxpool.Pool
	// River inserts the phases' fan-in checks; it need not be started.
	// Required.
	River *river.Client[pgx.Tx]
	// Executors hear of what callbacks did to their work: tasks put back
	// to be retried, tasks an earlier attempt completed. nil: no one.
	Executors Executors
	// Committers bounds the groups in flight; DefaultCommitters when not
	// positive.
	Committers int
	// Logger logs each applied callback at debug level; nil logs nothing.
	Logger *slog.Logger
	// Metrics counts the tasks callbacks end; nil counts nothing.
	Metrics *metrics.Metrics
	// MaxQueued bounds the callbacks waiting for a group; one more is
	// refused with ErrBusy. DefaultMaxQueued when not positive.
	MaxQueued int
	// MaxOutputs caps the output files of one success's result
	// (MAX_OUTPUTS_PER_TASK); phases.DefaultMaxOutputs when not positive.
	MaxOutputs int
	// TaskMaxAttempts bounds a task's attempts (TASK_MAX_ATTEMPTS): an
	// error its worker calls retryable is retried until this many attempts
	// have failed. 1 when not positive: no retries.
	TaskMaxAttempts int
	// TaskRetireLimit bounds the wait for a retried attempt's machine to
	// be destroyed (TASK_RETIRE_LIMIT); DefaultTaskRetireLimit when not
	// positive.
	TaskRetireLimit time.Duration
	// TransientRetryWindow is how long errors a worker calls retryable
	// are retried beyond TaskMaxAttempts, from the first in a row
	// (TRANSIENT_RETRY_WINDOW); 0: not beyond.
	TransientRetryWindow time.Duration
}

// DefaultMaxQueued is Config.MaxQueued unless set: a few seconds of
// callbacks at the rates make bench measures (BENCHMARKS.md).
const DefaultMaxQueued = 50000

// DefaultCommitters is Config.Committers unless set (CALLBACK_COMMITTERS):
// one committer, whose groups grow while it commits, makes larger groups
// and fewer commits than several (docs/architecture.md, How fast, has the
// figures).
const DefaultCommitters = 1

// DefaultTaskRetireLimit is Config.TaskRetireLimit unless set
// (TASK_RETIRE_LIMIT).
const DefaultTaskRetireLimit = 2 * time.Minute

// Executors are the phases' executors, which hear in a callback group's
// transaction of what the group did to their work.
type Executors interface {
	// Requeued: the phases whose tasks the group put back to be retried
	// (a launcher to enqueue).
	Requeued(ctx context.Context, tx pgx.Tx, client *river.Client[pgx.Tx], refs []PhaseRef) error
	// Overtaken: tasks that a success of an earlier attempt completed
	// after they were launched again (a later machine to stop).
	Overtaken(ctx context.Context, tx pgx.Tx, client *river.Client[pgx.Tx], tasks []Overtaken) error
}

// Overtaken is a task that a success of an earlier attempt completed
// after it was launched again: MachineID is the machine it had then (the
// later attempt's, or the timed-out one waiting to be destroyed), to be
// stopped; "" for none or a pool's.
type Overtaken struct {
	PhaseRef
	TaskID    string
	MachineID string
}

// ErrBusy refuses a callback while MaxQueued callbacks wait: the caller
// answers 503 and the worker tries again a moment later.
var ErrBusy = errors.New("too many callbacks are waiting to be applied")

// Committer applies callbacks in groups. Its goroutines live only while
// there is work, so there is nothing to start or stop.
type Committer struct {
	pool        *pgxpool.Pool
	river       *river.Client[pgx.Tx]
	executors   Executors
	committers  int
	maxQueued   int
	maxOutputs  int
	maxTries    int // TaskMaxAttempts
	retireLimit time.Duration
	// transientWindow is Config.TransientRetryWindow.
	transientWindow time.Duration
	logger          *slog.Logger
	metrics         *metrics.Metrics

	mu      sync.Mutex
	pending []*request
	active  int // committer goroutines running
}

// New returns a Committer.
func New(cfg Config) *Committer {
	if cfg.Committers <= 0 {
		cfg.Committers = DefaultCommitters
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	if cfg.MaxQueued <= 0 {
		cfg.MaxQueued = DefaultMaxQueued
	}
	if cfg.TaskRetireLimit <= 0 {
		cfg.TaskRetireLimit = DefaultTaskRetireLimit
	}
	if cfg.MaxOutputs <= 0 {
		cfg.MaxOutputs = phases.DefaultMaxOutputs
	}
	return &Committer{pool: cfg.Pool, river: cfg.River, executors: cfg.Executors, committers: cfg.Committers, maxQueued: cfg.MaxQueued, maxOutputs: cfg.MaxOutputs,
		maxTries: max(1, cfg.TaskMaxAttempts), retireLimit: cfg.TaskRetireLimit, transientWindow: cfg.TransientRetryWindow, logger: cfg.Logger, metrics: cfg.Metrics}
}

// Callback is a worker's callback as far as it can be checked without the
// database: its token hashed, its body parsed.
type Callback struct {
	BatchID, TaskID string
	// TokenHash is the SHA-256 of the bearer token; nil when none was
	// presented.
	TokenHash []byte
	// Status is the status the worker reports: completed or failed.
	Status phases.TaskStatus
	// Result is the body, kept as the task's result. A success's is checked
	// here against its task's phase.
	Result []byte
	// Error is the worker's message, for an error callback.
	Error string
	// Retryable is true for an error the worker calls transient: the task
	// is retried on a fresh machine while it has attempts left.
	Retryable bool
	// Invalid says what is wrong with the body, or is empty. It is reported
	// only after the task and token have been checked, so that an
	// unauthenticated caller learns nothing from it.
	Invalid string
}

// Refusal is why a callback was not applied.
type Refusal int

const (
	// NotRefused is a callback that was applied, or repeats the one that was.
	NotRefused Refusal = iota
	// UnknownTask is a callback naming a task its batch does not have.
	UnknownTask
	// BadToken is a callback whose token is missing, or not the task's.
	BadToken
	// InvalidBody is a callback whose body is malformed, does not fit the
	// task's phase, or cannot be stored.
	InvalidBody
	// TaskEnded is a callback for a task that had ended some other way (it
	// timed out, or its batch was reset or failed). The refusal is recorded
	// as a callback.rejected event, and the task does not change.
	TaskEnded
)

// Outcome is what became of a callback, once its group has committed.
type Outcome struct {
	Refusal Refusal
	// Reason says why a callback was refused, e.g. "task X already timed
	// out".
	Reason string
	// Status is the task's status after a callback that was not refused.
	Status phases.TaskStatus
	// Duplicate is true when the task had already been ended by a callback:
	// nothing changed.
	Duplicate bool
}

// Apply queues cb with the next group and returns its outcome once that
// group has committed. Callbacks are checked in the order a caller is
// answered: the task, the token, the body, then how the task ended.
//
// An error means the callback's group failed, or ctx ended. A caller that
// gives up still has its callback applied (or not) with its group; only
// the answer is lost, and the worker's retry is then a harmless repeat.
func (c *Committer) Apply(ctx context.Context, cb Callback) (Outcome, error) {
	r := c.newRequest(cb)
	c.mu.Lock()
	if len(c.pending) >= c.maxQueued {
		c.mu.Unlock()
		return Outcome{}, ErrBusy
	}
	c.pending = append(c.pending, r)
	if c.active < c.committers {
		c.active++
		go c.commitLoop()
	}
	c.mu.Unlock()
	select {
	case <-r.done:
		return r.out, r.err
	case <-ctx.Done():
		return Outcome{}, ctx.Err()
	}
}

// request is one callback waiting for its group's commit.
type request struct {
	Callback
	plausible bool // see plausible

	// Set by the group before done is closed.
	out  Outcome
	err  error
	done chan struct{}
}

// newRequest prepares cb for a group on the caller's goroutine: the less a
// committer does, the sooner it sends the next group.
func (c *Committer) newRequest(cb Callback) *request {
	r := &request{Callback: cb, done: make(chan struct{})}
	r.plausible = c.plausible(r)
	return r
}

// commitLoop commits groups until none is waiting, then exits.
//
// A group's transaction stays open after its statements have run while
// the next group is taken: if one is waiting, the COMMIT goes with its
// statements, in one round trip on the same connection (sendGroup);
// otherwise it is sent at once. So a lone callback still waits for nothing.
func (c *Committer) commitLoop() {
	var open *openGroup
	for {
		group := c.take(open != nil)
		switch {
		case group != nil:
			open = c.run(open, group)
		case open != nil:
			c.commitOpen(open)
			open = nil
		default:
			return
		}
	}
}

// take takes the next group off the queue. When none is waiting it
// returns nil, and unless the caller still holds an open group, counts
// the caller's committer out.
func (c *Committer) take(holding bool) []*request {
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.pending) == 0 {
		if !holding {
			c.active--
		}
		return nil
	}
	n := min(len(c.pending), maxGroup)
	group := make([]*request, n)
	copy(group, c.pending)
	// Shift rather than reslice, so the queue's array does not grow
	// without bound under steady load.
	rest := copy(c.pending, c.pending[n:])
	clear(c.pending[rest:])
	c.pending = c.pending[:rest]
	return group
}

// openGroup is a group whose statements have run, and whose transaction is
// open on conn.
type openGroup struct {
	group     []*request
	decisions []decision
	conn      *pgxpool.Conn
	tx        *pipelinedTx
	ctx       context.Context // bounds the group's work (groupTimeout)
	cancel    context.CancelFunc
}

// release returns the group's connection to the pool. It is released
// last: the pool closes a connection left inside a transaction rather
// than hand it out again.
func (o *openGroup) release() {
	o.conn.Release()
	o.cancel()
}

// commitOpen commits an open group alone, and answers it.
func (c *Committer) commitOpen(o *openGroup) {
	c.answer(o.group, o.decisions, o.tx.Commit(o.ctx))
	o.release()
}

// run applies group in a transaction of its own and returns it open, or
// returns nil once the group has been answered because it failed. When
// prev is not nil, its COMMIT is sent first, in the same round trip, on
// its connection, which the group then keeps; prev is answered as soon as
// its COMMIT is done.
//
// A group that fails as a whole because of its data or a deadlock is
// applied again one callback at a time (retryAlone), so that one bad
// callback fails alone.
func (c *Committer) run(prev *openGroup, group []*request) *openGroup {
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
			c.answer(p.group, p.decisions, err)
		}
	} else {
		conn, err := c.pool.Acquire(ctx)
		if err != nil {
			cancel()
			c.answer(group, nil, err)
			return nil
		}
		o.conn = conn
	}
	err := c.apply(o, commitPrev)
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
		o.conn.Conn().Close(ctx) // the pool drops it either way
	}
	closed := o.conn.Conn().IsClosed()
	o.release()
	if inherited && closed {
		// The connection the previous group left died under this one, or
		// was dropped for its statements. This group's transaction never
		// committed, so it runs again, on a connection of its own.
		return c.run(nil, group)
	}
	if len(group) > 1 && retryAlone(err) {
		for _, r := range group {
			if one := c.run(nil, []*request{r}); one != nil {
				c.commitOpen(one)
			}
		}
		return nil
	}
	c.answer(group, nil, err)
	return nil
}

// apply runs applyGroup for o. A panic in it becomes the group's error: it
// runs on a goroutine of its own, where a panic would otherwise take the
// whole server down rather than one request.
func (c *Committer) apply(o *openGroup, commitPrev func(error)) (err error) {
	o.tx = &pipelinedTx{conn: o.conn.Conn()}
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("applying callbacks: panic: %v", p)
		}
	}()
	o.tx, o.decisions, err = c.applyGroup(o.ctx, o.conn.Conn(), o.group, commitPrev)
	return err
}

// answer answers a group's requests, with their decisions, or with err
// when the group failed (or its COMMIT did). Every request is answered
// before anything else is done.
func (c *Committer) answer(group []*request, decisions []decision, err error) {
	refused := storageRefusal(err)
	for i, r := range group {
		switch {
		case refused != nil:
			r.out = *refused
		case err != nil:
			r.err = err
		default:
			r.out = decisions[i].Outcome
		}
		close(r.done)
	}
	if err != nil {
		return
	}
	for i, d := range decisions {
		if d.applied && d.Status == phases.TaskPending {
			c.metrics.TasksRetried(d.phase, metrics.RetryTransientError, 1)
		}
		if d.applied && d.Status != phases.TaskPending {
			// Committed: counted once, by the callback that ended the task
			// (a retried task has not ended).
			c.metrics.TasksFinished(d.phase, taskOutcome(d.Status), 1)
			c.logger.Debug("callback applied", "batch_id", group[i].BatchID, "task_id", group[i].TaskID, "phase", d.phase, "status", d.Status)
		}
	}
}

// storageRefusal turns the database's refusal of a body it cannot store
// (jsonb rejects some escapes Go's JSON accepts, such as a lone surrogate
// "\ud800") into the refusal of the callback that carried it, or returns
// nil for any other error.
func storageRefusal(err error) *Outcome {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && (pgErr.Code == pgerrcode.UntranslatableCharacter || pgErr.Code == pgerrcode.InvalidTextRepresentation) {
		return &Outcome{Refusal: InvalidBody, Reason: "the body cannot be stored: " + pgErr.Message}
	}
	return nil
}

// taskOutcome is the metrics outcome of a task status a callback set.
func taskOutcome(status phases.TaskStatus) string {
	if status == phases.TaskCompleted {
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

// A group's first round trip.
//
// A group's statements (BEGIN, the shared batch locks, the update, the look
// for pending fan-in checks) go to the server in one pipeline. Under steady
// load the previous group's COMMIT, on the same connection, goes first in
// the same pipeline, followed by a sync point: the server flushes the
// COMMIT's answer at once, so the previous group is answered while this
// group's statements run, and an error of the COMMIT does not affect them.
// A group then costs one round trip instead of two (its own and its
// COMMIT's).
//
// pgx's Batch cannot place a sync point inside a pipeline, so this uses
// pgconn's pipeline directly: the statements are prepared once per
// connection, their arguments encoded with the connection's type map.

// groupStatements are the prepared statements of a group's pipeline, in the
// order they are sent after BEGIN: the fan-in's shared locks (LockShared's
// statement), the tasks' ends, and the fan-in's look for pending checks
// (pendingChecks's statement), which must be a statement of its own after
// the locks, so that its snapshot is taken under them.
var groupStatements = [...]string{db.BatchLockSharedManySQL, db.TaskCompleteManySQL, db.PhaseCheckPendingManySQL}

// groupResult is what a group's pipeline read: the tasks it ended, and
// whether each phase concerned has an unfinished fan-in check.
type groupResult struct {
	ended   []db.TaskCompleteManyRow
	pending map[PhaseRef]bool
}

// sendGroup runs a group's first round trip on conn, which it leaves in
// the group's open transaction, and reads its results. When commitPrev is
// not nil, the transaction open on conn (the previous group's) is
// committed first, and commitPrev is called once with the outcome of that
// COMMIT, as soon as it is known: on every path but a panic. When the
// group fails before anything was sent, the previous group is committed
// alone.
func sendGroup(ctx context.Context, conn *pgx.Conn, params db.TaskCompleteManyParams, refs []PhaseRef, commitPrev func(error)) (applied groupResult, err error) {
	unsent := func(err error) (groupResult, error) {
		if commitPrev != nil {
			commitPrev((&pipelinedTx{conn: conn}).Commit(ctx))
		}
		return groupResult{}, err
	}
	var stmts [len(groupStatements)]*pgconn.StatementDescription
	for i, sql := range groupStatements {
		// pgx keeps a connection's prepared statements by their SQL, so
		// only a connection's first group prepares them.
		if stmts[i], err = conn.Prepare(ctx, sql, sql); err != nil {
			return unsent(fmt.Errorf("preparing the callback statements: %w", err))
		}
	}
	m := conn.TypeMap()
	batchIDs, phaseNames := make([]string, len(refs)), make([]string, len(refs))
	for i, r := range refs {
		batchIDs[i], phaseNames[i] = r.BatchID, r.Phase
	}
	args := [][]any{{batchIDs}, db.TaskCompleteManyArgs(params), {batchIDs, phaseNames}}
	bound := make([]boundStatement, len(stmts))
	for i, sd := range stmts {
		if bound[i], err = bind(m, sd, args[i]); err != nil {
			return unsent(err)
		}
	}

	p := conn.PgConn().StartPipeline(ctx)
	defer func() {
		if cerr := p.Close(); err == nil && cerr != nil {
			err = cerr
		}
	}()
	if commitPrev != nil {
		p.SendQueryParams("COMMIT", nil, nil, nil, nil)
		p.SendPipelineSync()
	}
	p.SendQueryParams("BEGIN", nil, nil, nil, nil)
	for _, b := range bound {
		p.SendQueryStatement(b.sd, b.values, b.formats, binaryResults)
	}
	p.SendPipelineSync()
	if err := p.Flush(); err != nil {
		// Perhaps partly sent: whether the COMMIT ran is not known.
		if commitPrev != nil {
			commitPrev(err)
		}
		return applied, err
	}

	if commitPrev != nil {
		commitPrev(readCommit(p))
	}
	if err := readDone(p); err != nil {
		return applied, fmt.Errorf("beginning: %w", err)
	}
	if err := readDone(p); err != nil {
		return applied, fmt.Errorf("locking batches: %w", err)
	}
	var row db.TaskCompleteManyRow
	if err := readRows(p, m, []any{&row.ID, &row.BatchID, &row.Phase, &row.TokenHash, &row.Status}, func() {
		applied.ended = append(applied.ended, row) // Scan copies a bytea
	}); err != nil {
		return applied, fmt.Errorf("ending tasks: %w", err)
	}
	applied.pending = make(map[PhaseRef]bool)
	var k PhaseRef
	var pending bool
	if err := readRows(p, m, []any{&k.BatchID, &k.Phase, &pending}, func() { applied.pending[k] = pending }); err != nil {
		return applied, fmt.Errorf("looking for pending phase checks: %w", err)
	}
	return applied, readSync(p)
}

// binaryResults asks for every result column in binary.
var binaryResults = []int16{pgtype.BinaryFormatCode}

// boundStatement is a prepared statement with its arguments encoded.
type boundStatement struct {
	sd      *pgconn.StatementDescription
	values  [][]byte
	formats []int16
}

// bind encodes args as the parameters of sd, in the types the server
// expects.
func bind(m *pgtype.Map, sd *pgconn.StatementDescription, args []any) (boundStatement, error) {
	b := boundStatement{sd: sd, values: make([][]byte, len(args)), formats: make([]int16, len(args))}
	if len(args) != len(sd.ParamOIDs) {
		return b, fmt.Errorf("statement takes %d arguments, got %d", len(sd.ParamOIDs), len(args))
	}
	for i, a := range args {
		oid := sd.ParamOIDs[i]
		b.formats[i] = m.FormatCodeForOID(oid)
		v, err := m.Encode(oid, b.formats[i], a, nil)
		if err != nil {
			return b, fmt.Errorf("encoding argument %d: %w", i+1, err)
		}
		b.values[i] = v
	}
	return b, nil
}

// readCommit reads the answer to a COMMIT and the sync point after it. A
// COMMIT of a transaction that had failed answers ROLLBACK, which is
// reported as pgx does.
func readCommit(p *pgconn.Pipeline) error {
	res, err := p.GetResults()
	if err == nil {
		rr, ok := res.(*pgconn.ResultReader)
		if !ok {
			return fmt.Errorf("committing: expected a result, got %T", res)
		}
		var tag pgconn.CommandTag
		if tag, err = rr.Close(); err == nil && tag.String() == "ROLLBACK" {
			err = pgx.ErrTxCommitRollback
		}
	}
	// The sync point comes whatever the COMMIT's outcome: the server
	// skips nothing after it.
	if serr := readSync(p); err == nil {
		err = serr
	}
	return err
}

// readDone reads the result of a statement whose rows are not needed.
func readDone(p *pgconn.Pipeline) error {
	return readRows(p, nil, nil, nil)
}

// readRows reads the next statement's rows, scanning each into dest and
// then calling each.
func readRows(p *pgconn.Pipeline, m *pgtype.Map, dest []any, each func()) error {
	res, err := p.GetResults()
	if err != nil {
		return err
	}
	rr, ok := res.(*pgconn.ResultReader)
	if !ok {
		return fmt.Errorf("expected a result, got %T", res)
	}
	for each != nil && rr.NextRow() {
		fields, values := rr.FieldDescriptions(), rr.Values()
		if len(values) != len(dest) {
			rr.Close() // the mismatch is the error
			return fmt.Errorf("expected %d columns, got %d", len(dest), len(values))
		}
		for i, v := range values {
			if err := m.Scan(fields[i].DataTypeOID, fields[i].Format, v, dest[i]); err != nil {
				rr.Close() // the scan's error is the one to report
				return fmt.Errorf("column %s: %w", fields[i].Name, err)
			}
		}
		each()
	}
	_, err = rr.Close()
	return err
}

// readSync reads a sync point.
func readSync(p *pgconn.Pipeline) error {
	res, err := p.GetResults()
	if err != nil {
		return err
	}
	if _, ok := res.(*pgconn.PipelineSync); !ok {
		return fmt.Errorf("expected the end of the pipeline, got %T", res)
	}
	return nil
}

// pipelinedTx is a transaction whose BEGIN was sent in a pipeline with its
// first statements (sendGroup), saving the round trip pgx's Begin
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
