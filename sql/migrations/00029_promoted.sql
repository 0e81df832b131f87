-- +goose Up

-- promoted_token_hash is the token of the attempt whose staged outputs
-- were promoted to their final keys (phases.AttemptKey): a completed task
-- of a phase that stages its outputs whose token_hash differs has outputs
-- still to promote, and its phase does not end until they are.
ALTER TABLE tasks ADD COLUMN promoted_token_hash bytea;

-- +goose Down
ALTER TABLE tasks DROP COLUMN promoted_token_hash;
