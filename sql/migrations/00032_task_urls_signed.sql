-- +goose Up

-- urls_signed counts the URLs the current attempt of a task has been
-- presigned on request (POST .../urls): a worker may ask for only so many.
ALTER TABLE tasks ADD COLUMN urls_signed integer NOT NULL DEFAULT 0;

-- +goose Down
ALTER TABLE tasks DROP COLUMN urls_signed;
