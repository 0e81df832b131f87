// Package sql embeds the orchestrator's SQL: the goose-format migrations that
// `orchestrator migrate` and `serve` apply, and the reports that
// `orchestrator report` runs. Queries live beside them in queries/ and are
// compiled into package db by sqlc (sqlc.yaml).
package sql

import "embed"

// Migrations holds migrations/*.sql, applied in file-name order.
//
//go:embed migrations/*.sql
var Migrations embed.FS

// Reports holds reports/*.sql, one read-only query per report (package
// reports runs them): the file name is the report's name, the first comment
// line its description, and @since (and, where used, @limit) its parameters.
//
//go:embed reports/*.sql
var Reports embed.FS
