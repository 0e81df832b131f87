package db

import (
	"context"
	"errors"
	"fmt"
	"io"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/stretchr/testify/require"
)

func TestUnavailable(t *testing.T) {
	for _, tc := range []struct {
		name string
		err  error
		want bool
	}{
		{"Nil", nil, false},
		{"NoRows", pgx.ErrNoRows, false},
		{"UniqueViolation", &pgconn.PgError{Code: "23505"}, false},
		{"BadData", fmt.Errorf("inserting: %w", &pgconn.PgError{Code: "22P02"}), false},
		{"Canceled", context.Canceled, false},
		{"AdminShutdown", fmt.Errorf("query: %w", &pgconn.PgError{Code: "57P01"}), true},
		{"StartingUp", &pgconn.PgError{Code: "57P03"}, true},
		{"ConnectionFailure", &pgconn.PgError{Code: "08006"}, true},
		{"TooManyConnections", &pgconn.PgError{Code: "53300"}, true},
		{"UnexpectedEOF", fmt.Errorf("receiving: %w", io.ErrUnexpectedEOF), true},
		{"ConnClosed", fmt.Errorf("x: %w", pgconn.ErrConnClosed), true},
		{"Other", errors.New("something else"), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			require.Equal(t, tc.want, Unavailable(tc.err))
		})
	}
}

// TestUnavailableConnectError: a server that is not there is unavailable.
func TestUnavailableConnectError(t *testing.T) {
	_, err := pgx.Connect(context.Background(), "postgres://postgres@/postgres?host=/nonexistent-socket-dir&port=1&connect_timeout=1")
	require.Error(t, err)
	require.True(t, Unavailable(err), "%v", err)
}
