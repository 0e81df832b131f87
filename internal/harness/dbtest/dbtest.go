// Package dbtest gives each test its own PostgreSQL database, migrated to the
// latest schema, so tests that touch data run in parallel against real
// Postgres without seeing each other's rows.
//
// The server comes from TEST_DATABASE_URL (or DATABASE_URL); `make test` sets
// it, starting a throwaway cluster when neither is set. A template database
// is migrated once per schema version and every test clones it, which costs
// far less than migrating each database.
package dbtest

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io/fs"
	"log/slog"
	"net/url"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/arke-institute/orchestrator/db"
	sqlfiles "github.com/arke-institute/orchestrator/sql"
)

// templateLockKey serialises template creation across the test binaries that
// `go test ./...` runs in parallel.
const templateLockKey = 0x6f726368746d706c // "orchtmpl"

// URL returns the server URL tests use, failing the test with directions
// when none is configured.
func URL(tb testing.TB) string {
	tb.Helper()
	for _, name := range []string{"TEST_DATABASE_URL", "DATABASE_URL"} {
		if v := os.Getenv(name); v != "" {
			return v
		}
	}
	tb.Fatal("no database: set TEST_DATABASE_URL (or DATABASE_URL), or run the tests with `make test`, which starts a throwaway PostgreSQL cluster")
	return ""
}

// New creates a fresh migrated database for the test, returns a pool on it,
// and drops it when the test ends.
func New(tb testing.TB) *pgxpool.Pool {
	tb.Helper()
	pool, _ := NewWithURL(tb)
	return pool
}

// Exec is a function that runs a statement on pool, failing the test if it
// fails: a test's setup in SQL.
func Exec(tb testing.TB, pool *pgxpool.Pool) func(sql string, args ...any) {
	return func(sql string, args ...any) {
		tb.Helper()
		if _, err := pool.Exec(context.Background(), sql, args...); err != nil {
			tb.Fatalf("%s: %v", sql, err)
		}
	}
}

// NewWithURL is New that also returns the database's URL, for code under test
// that opens its own connections (a server started from configuration).
func NewWithURL(tb testing.TB) (*pgxpool.Pool, string) {
	tb.Helper()
	return create(tb, URL(tb), true)
}

// NewOnServer is NewWithURL on the server at base rather than the tests'
// one: a cluster the test controls (internal/harness/pgcluster), which it may
// stop or restart without disturbing other tests.
func NewOnServer(tb testing.TB, base string) (*pgxpool.Pool, string) {
	tb.Helper()
	return create(tb, base, true)
}

// NewEmpty creates a database with no schema at all, for testing migrations.
func NewEmpty(tb testing.TB) (*pgxpool.Pool, string) {
	tb.Helper()
	return create(tb, URL(tb), false)
}

func create(tb testing.TB, base string, migrated bool) (*pgxpool.Pool, string) {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	admin, err := pgx.Connect(ctx, base)
	if err != nil {
		tb.Fatalf("connecting to the test server: %v", err)
	}
	defer admin.Close(context.Background())

	name := "test_" + randomHex(8)
	stmt := "CREATE DATABASE " + name
	if migrated {
		tmpl, err := ensureTemplate(ctx, admin, base)
		if err != nil {
			tb.Fatalf("preparing template database: %v", err)
		}
		stmt += " TEMPLATE " + tmpl
	}
	if _, err := admin.Exec(ctx, stmt); err != nil {
		tb.Fatalf("creating test database: %v", err)
	}
	url, err := withDatabase(base, name)
	if err != nil {
		tb.Fatal(err)
	}
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		tb.Fatal(err)
	}
	cfg.MaxConns = 20
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		tb.Fatalf("connecting to test database: %v", err)
	}
	tb.Cleanup(func() {
		pool.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		conn, err := pgx.Connect(ctx, base)
		if err != nil {
			tb.Errorf("dropping test database %s: %v", name, err)
			return
		}
		defer conn.Close(ctx)
		if _, err := conn.Exec(ctx, fmt.Sprintf("DROP DATABASE IF EXISTS %s WITH (FORCE)", name)); err != nil {
			tb.Errorf("dropping test database %s: %v", name, err)
		}
	})
	return pool, url
}

// ensureTemplate returns the name of a template database holding the current
// schema, building it when missing. The name carries a hash of the migration
// files, so a schema change makes a new template instead of reusing a stale
// one; a template is only renamed into place once fully migrated, so a crash
// half-way leaves nothing that looks ready.
func ensureTemplate(ctx context.Context, admin *pgx.Conn, base string) (string, error) {
	hash, err := schemaHash()
	if err != nil {
		return "", err
	}
	name := "orch_tmpl_" + hash
	if _, err := admin.Exec(ctx, "SELECT pg_advisory_lock($1)", int64(templateLockKey)); err != nil {
		return "", err
	}
	defer admin.Exec(context.WithoutCancel(ctx), "SELECT pg_advisory_unlock($1)", int64(templateLockKey)) //nolint:errcheck // the lock also ends with the session

	var exists bool
	if err := admin.QueryRow(ctx, "SELECT EXISTS (SELECT 1 FROM pg_database WHERE datname = $1)", name).Scan(&exists); err != nil {
		return "", err
	}
	if exists {
		return name, nil
	}

	building := name + "_building"
	if _, err := admin.Exec(ctx, fmt.Sprintf("DROP DATABASE IF EXISTS %s WITH (FORCE)", building)); err != nil {
		return "", err
	}
	if _, err := admin.Exec(ctx, fmt.Sprintf("CREATE DATABASE %s", building)); err != nil {
		return "", err
	}
	url, err := withDatabase(base, building)
	if err != nil {
		return "", err
	}
	pool, err := pgxpool.New(ctx, url)
	if err != nil {
		return "", err
	}
	err = db.Migrate(ctx, pool, slog.New(slog.DiscardHandler))
	pool.Close()
	if err != nil {
		return "", fmt.Errorf("migrating template: %w", err)
	}
	if _, err := admin.Exec(ctx, fmt.Sprintf("ALTER DATABASE %s RENAME TO %s", building, name)); err != nil {
		return "", err
	}
	return name, nil
}

// schemaHash fingerprints the embedded migrations.
func schemaHash() (string, error) {
	h := sha256.New()
	err := fs.WalkDir(sqlfiles.Migrations, ".", func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := fs.ReadFile(sqlfiles.Migrations, path)
		if err != nil {
			return err
		}
		fmt.Fprintf(h, "%s\x00%s\x00", path, b)
		return nil
	})
	if err != nil {
		return "", err
	}
	return hex.EncodeToString(h.Sum(nil))[:16], nil
}

// withDatabase returns base (a URL or a key=value DSN) pointing at another
// database on the same server.
func withDatabase(base, name string) (string, error) {
	if strings.HasPrefix(base, "postgres://") || strings.HasPrefix(base, "postgresql://") {
		u, err := url.Parse(base)
		if err != nil {
			return "", fmt.Errorf("parsing database URL: %w", err)
		}
		u.Path = "/" + name
		return u.String(), nil
	}
	return base + " dbname=" + name, nil
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}
