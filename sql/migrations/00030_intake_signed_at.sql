-- +goose Up

-- signed_at is when an intake signature says it was made (its t=): a
-- signature is refused more than the window from the server's clock, so it
-- is kept until then plus a margin for the clocks of other replicas, by
-- when it signed, not by when one replica saw it.
ALTER TABLE intake_signatures ADD COLUMN signed_at timestamptz NOT NULL DEFAULT now();
CREATE INDEX intake_signatures_signed_at ON intake_signatures (signed_at);

-- +goose Down
DROP INDEX intake_signatures_signed_at;
ALTER TABLE intake_signatures DROP COLUMN signed_at;
