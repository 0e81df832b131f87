-- +goose Up

-- The key of a batch's fan-in advisory lock (jobs/fanin.go), defined once:
-- every query that takes the lock, shared or exclusive, for one batch or
-- many, derives the key here. The expression is the one the queries used
-- before, so a process still running older code takes the same locks.
-- A one-expression IMMUTABLE SQL function is inlined by the planner: it
-- costs nothing per call.
-- +goose StatementBegin
CREATE FUNCTION batch_lock_key(batch_id text) RETURNS bigint
LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE
AS $$ SELECT hashtextextended('batch:' || batch_id, 0) $$;
-- +goose StatementEnd

-- +goose Down
DROP FUNCTION batch_lock_key(text);
