-- +goose Up

-- The next generation written ahead (jobs' phase check, writeAhead): while
-- a phase's last tasks run, the files at the head of the batch's
-- generation whose work has completed are transformed and written as the
-- next generation, so that the transition writes only the rest. At most
-- one row per batch, valid while the batch is in phase at generation - 1;
-- the transition that uses it deletes it.
CREATE TABLE generation_ahead (
    batch_id   text        PRIMARY KEY REFERENCES batches (id) ON DELETE CASCADE,
    -- The phase whose transform made the files (the batch's phase).
    phase      text        NOT NULL,
    -- The generation written: files of it with ordinals 0 .. files - 1.
    generation integer     NOT NULL,
    files      integer     NOT NULL,
    -- The ordinal of the last input file (of generation - 1) covered.
    last_input integer     NOT NULL,
    -- The later phases some file written may be work of
    -- (phases.MayHaveWork): with none, the transition needs none of them
    -- back to choose the next phase.
    wants      text[]      NOT NULL DEFAULT '{}',
    updated_at timestamptz NOT NULL DEFAULT clock_timestamp()
);

-- The newest migration each process knows. A generation is written ahead
-- only while every process heard from knows this one: an older
-- orchestrator's transition would write the whole next generation over
-- the rows written ahead (docs/operations.md, Upgrades).
ALTER TABLE listeners ADD COLUMN schema_version bigint;

-- +goose Down
ALTER TABLE listeners DROP COLUMN schema_version;
DELETE FROM files f USING generation_ahead a WHERE f.batch_id = a.batch_id AND f.generation = a.generation;
DROP TABLE generation_ahead;
