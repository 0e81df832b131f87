// Package sql embeds the orchestrator's SQL: the goose-format migrations that
// `orchestrator migrate` and `serve` apply. Queries live beside them in
// queries/ and are compiled into package db by sqlc (sqlc.yaml).
package sql

import "embed"

// Migrations holds migrations/*.sql, applied in file-name order.
//
//go:embed migrations/*.sql
var Migrations embed.FS
