-- +goose Up

-- pauses are the operators' pauses of work (POST /admin/pause): while a
-- row covers a batch's phase (the whole fleet's, the phase's everywhere, or
-- the batch's), nothing of it is launched, leased, sent to a provider or
-- stepped; callbacks, status and the sweep go on. Resuming deletes the row
-- and moves the covered work's clocks (failing_since, launch outages) later
-- by the time paused, so a pause is never charged to the work.
CREATE TABLE pauses (
    -- scope is global, phase or batch; target is '' for global, the
    -- phase's name or the batch's id.
    scope     text        NOT NULL CHECK (scope IN ('global', 'phase', 'batch')),
    target    text        NOT NULL DEFAULT '',
    reason    text        NOT NULL DEFAULT '',
    paused_at timestamptz NOT NULL DEFAULT clock_timestamp(),
    PRIMARY KEY (scope, target),
    CONSTRAINT pauses_target CHECK ((scope = 'global') = (target = ''))
);

-- Admission control counts the batches in flight (not DONE or ERROR), in
-- all and by uploader, at each intake.
CREATE INDEX batches_in_flight_idx ON batches (uploader) WHERE completed_at IS NULL;

-- +goose Down
DROP INDEX batches_in_flight_idx;
DROP TABLE pauses;
