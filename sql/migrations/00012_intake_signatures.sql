-- +goose Up

-- Signatures of intake requests (X-Signature) seen within the signature
-- window: a signature seen twice is a replay and refused. Rows older than
-- the window can no longer match a fresh request and are deleted as new
-- ones come in.
CREATE TABLE intake_signatures (
    signature bytea PRIMARY KEY,
    seen_at timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX intake_signatures_seen_at ON intake_signatures (seen_at);

-- +goose Down
DROP TABLE intake_signatures;
