// Package db is the orchestrator's data layer: the queries of sql/queries
// compiled by sqlc (*.sql.go, *.gen.go), the migrations of sql/migrations
// with River's own (Migrate), batch events (EventRecord) and the
// statements the callback pipeline sends itself (pipeline.go). Every
// query sent to Postgres is written in sql/; no other package sends SQL
// it got from here but through these names.
package db
