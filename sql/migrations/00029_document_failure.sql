-- +goose Up

-- failure says why a failed document failed, as tasks.failure does:
-- 'permanent' (the document or its content: not UTF-8, too large, refused
-- by the provider) or 'infrastructure' (a provider or store that stayed
-- down or rate-limited past TRANSIENT_RETRY_WINDOW, a step job River gave
-- up on). POST /admin/retry?mode=infrastructure resumes the latter.
ALTER TABLE documents ADD COLUMN failure text CHECK (failure IN ('permanent', 'infrastructure'));

-- +goose Down
ALTER TABLE documents DROP COLUMN failure;
