package callbackcommit

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/arke-institute/orchestrator/db"
	"github.com/arke-institute/orchestrator/jobs"
)

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
// order they are sent after BEGIN. PhaseCheckPendingByTasksSQL must be a
// statement of its own after the locks (its snapshot is taken under them)
// and after the update (it looks at the phases of the tasks ended).
var groupStatements = [...]string{db.BatchLockSharedManySQL, db.TaskCompleteManySQL, db.PhaseCheckPendingByTasksSQL}

// groupApplied is what a group's pipeline read: the tasks it ended, and
// whether each phase concerned has an unfinished fan-in check.
type groupApplied struct {
	ended   []db.TaskCompleteManyRow
	pending map[jobs.PhaseRef]bool
}

// sendGroup runs a group's first round trip on conn, which it leaves in
// the group's open transaction, and reads its results. When commitPrev is
// not nil, the transaction open on conn (the previous group's) is
// committed first, and commitPrev is called once with the outcome of that
// COMMIT, as soon as it is known: on every path but a panic. When the
// group fails before anything was sent, the previous group is committed
// alone.
func sendGroup(ctx context.Context, conn *pgx.Conn, params db.TaskCompleteManyParams, batchIDs []string, commitPrev func(error)) (applied groupApplied, err error) {
	unsent := func(err error) (groupApplied, error) {
		if commitPrev != nil {
			commitPrev((&pipelinedTx{conn: conn}).Commit(ctx))
		}
		return groupApplied{}, err
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
	args := [][]any{{batchIDs}, db.TaskCompleteManyArgs(params), {params.IDs}}
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
	applied.pending = make(map[jobs.PhaseRef]bool)
	var k jobs.PhaseRef
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
