package db

import (
	"context"
	"fmt"
	"io/fs"
	"log/slog"
	"strconv"
	"strings"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jackc/pgx/v5/stdlib"
	"github.com/pressly/goose/v3"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/riverqueue/river/rivermigrate"

	sqlfiles "github.com/arke-institute/orchestrator/sql"
)

// SchemaVersion is the newest of the migrations this build embeds (the
// number its file name starts with). Each process beats with it
// (listeners.schema_version), so that a change older releases cannot live
// beside waits until none of them is heard.
var SchemaVersion = newestMigration()

func newestMigration() int64 {
	entries, err := fs.ReadDir(sqlfiles.Migrations, "migrations")
	if err != nil {
		panic(fmt.Sprintf("reading the embedded migrations: %v", err))
	}
	var newest int64
	for _, e := range entries {
		n, err := strconv.ParseInt(strings.SplitN(e.Name(), "_", 2)[0], 10, 64)
		if err == nil && n > newest {
			newest = n
		}
	}
	return newest
}

// migrationLockKey serialises migrations across processes: two orchestrators
// starting at once must not both apply the same migration.
const migrationLockKey = 0x6f7263686d6967 // "orchmig"

// Migrate brings the database to the latest schema: River's tables through
// rivermigrate, then ours from the embedded goose-format files in sql/. It is
// safe to call from several processes at once and a no-op when up to date.
func Migrate(ctx context.Context, pool *pgxpool.Pool, logger *slog.Logger) error {
	conn, err := pool.Acquire(ctx)
	if err != nil {
		return fmt.Errorf("acquiring connection for migrations: %w", err)
	}
	defer conn.Release()
	if _, err := conn.Exec(ctx, "SELECT pg_advisory_lock($1)", int64(migrationLockKey)); err != nil {
		return fmt.Errorf("taking migration lock: %w", err)
	}
	defer conn.Exec(context.WithoutCancel(ctx), "SELECT pg_advisory_unlock($1)", int64(migrationLockKey)) //nolint:errcheck // the lock also ends with the session

	migrator, err := rivermigrate.New(riverpgxv5.New(pool), &rivermigrate.Config{Logger: logger})
	if err != nil {
		return fmt.Errorf("creating river migrator: %w", err)
	}
	// The migrator logs each migration it applies itself.
	if _, err := migrator.Migrate(ctx, rivermigrate.DirectionUp, nil); err != nil {
		return fmt.Errorf("applying river migrations: %w", err)
	}

	fsys, err := fs.Sub(sqlfiles.Migrations, "migrations")
	if err != nil {
		return fmt.Errorf("opening embedded migrations: %w", err)
	}
	sqlDB := stdlib.OpenDBFromPool(pool)
	defer sqlDB.Close()
	provider, err := goose.NewProvider(goose.DialectPostgres, sqlDB, fsys, goose.WithDisableGlobalRegistry(true))
	if err != nil {
		return fmt.Errorf("loading migrations: %w", err)
	}
	results, err := provider.Up(ctx)
	if err != nil {
		return fmt.Errorf("applying migrations: %w", err)
	}
	for _, r := range results {
		logger.Info("applied migration", "version", r.Source.Version, "file", r.Source.Path, "duration", r.Duration)
	}
	return nil
}
