package db

import (
	"errors"
	"io"
	"net"
	"strings"

	"github.com/jackc/pgx/v5/pgconn"
)

// Unavailable tells whether err says the database could not be reached or
// went away (a restart, a failover, a dropped connection) rather than
// refusing what was asked, so that the same request is worth sending again
// shortly. The API answers such errors 503 with Retry-After instead of 500:
// workers and ingest retry them, and nothing is lost while Postgres restarts.
func Unavailable(err error) bool {
	if err == nil {
		return false
	}
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		// Class 08: connection exception. 57P01-57P03: the server is
		// shutting down, crashed, or not accepting connections yet. 53300:
		// too many connections (all slots taken by reconnecting clients).
		return strings.HasPrefix(pgErr.Code, "08") ||
			pgErr.Code == "57P01" || pgErr.Code == "57P02" || pgErr.Code == "57P03" || pgErr.Code == "53300"
	}
	var connectErr *pgconn.ConnectError
	var netErr net.Error
	return errors.As(err, &connectErr) ||
		errors.Is(err, pgconn.ErrConnClosed) ||
		pgconn.SafeToRetry(err) ||
		pgconn.Timeout(err) ||
		errors.Is(err, io.ErrUnexpectedEOF) ||
		errors.Is(err, io.EOF) ||
		errors.As(err, &netErr)
}
