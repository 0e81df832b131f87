-- +goose Up

-- The documents posted through the API (no batch) that have not ended: the
-- sweep fails those whose step job River gave up on, as it does for a
-- batch's (DocumentListAbandoned).
CREATE INDEX documents_open_api_idx ON documents (id)
    WHERE batch_id IS NULL AND status IN ('not_started', 'processing');

-- +goose Down
DROP INDEX documents_open_api_idx;
