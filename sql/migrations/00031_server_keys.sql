-- +goose Up

-- server_keys holds the orchestrator's own keys: made by the first process
-- that needs one, shared by every replica and kept across restarts, so no
-- key is configured and none has a default. callback_token signs the
-- credentials handed to workers (package tasktoken).
CREATE TABLE server_keys (
    name       text        PRIMARY KEY,
    key        bytea       NOT NULL CHECK (length(key) >= 32),
    created_at timestamptz NOT NULL DEFAULT now()
);

-- +goose Down
DROP TABLE server_keys;
