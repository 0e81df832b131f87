-- River's job table, as far as the queries in queries/river_job.sql read
-- it: sqlc needs its columns to compile them. River creates and migrates
-- the real table (rivermigrate, run by db.Migrate before our migrations);
-- nothing applies this file. (River's state is an enum, river_job_state;
-- text here keeps sqlc from generating a Go type for it.)
CREATE TABLE river_job (
    id    bigint NOT NULL,
    state text   NOT NULL,
    kind  text   NOT NULL,
    args  jsonb  NOT NULL
);
