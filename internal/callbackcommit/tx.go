package callbackcommit

import (
	"context"
	"errors"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

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
