-- +goose Up

-- promoted_token_hash is the token of the attempt whose staged outputs
-- were promoted to their final keys (phases.AttemptKey): a completed task
-- of a phase that stages its outputs whose token_hash differs has outputs
-- still to promote, and its phase does not end until they are.
ALTER TABLE tasks ADD COLUMN promoted_token_hash bytea;
-- The completed tasks whose outputs are still to promote, for the fan-in
-- check that promotes them and then, under the batch's lock, makes sure
-- none is left: in a phase that stages its outputs, a few rows, however
-- many tasks it has.
CREATE INDEX tasks_unpromoted_idx ON tasks (batch_id, phase, finished_at)
    WHERE status = 'completed' AND promoted_token_hash IS DISTINCT FROM token_hash;

-- +goose Down
DROP INDEX tasks_unpromoted_idx;
ALTER TABLE tasks DROP COLUMN promoted_token_hash;
