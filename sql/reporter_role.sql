-- A read-only role for `orchestrator report` and ad-hoc queries: it reads
-- every table of the orchestrator's database and can change none.
--
-- Run it once, in the orchestrator's database, as the role that owns the
-- tables (the one `orchestrator migrate` connects as), which also needs the
-- CREATEROLE attribute. (As a superuser, the default privileges below would
-- cover the superuser's future tables, not the owner's: add
-- `FOR ROLE <owner>` to that line.)
--
--   psql "$DATABASE_URL" -f sql/reporter_role.sql
--   psql "$DATABASE_URL" -c '\password reporter'
--
-- Roles belong to the whole cluster; the grants below cover this database
-- only. On PostgreSQL 14 and later, `GRANT pg_read_all_data TO reporter;`
-- instead of the three GRANT lines reads every table of every database.
CREATE ROLE reporter LOGIN;
GRANT USAGE ON SCHEMA public TO reporter;
GRANT SELECT ON ALL TABLES IN SCHEMA public TO reporter;
-- Tables that later migrations create: readable too (this applies to tables
-- created by the role running this script, hence "as the owner" above).
ALTER DEFAULT PRIVILEGES IN SCHEMA public GRANT SELECT ON TABLES TO reporter;
-- Its sessions start read only (a session could turn that off: what keeps
-- the role from writing is that it is granted nothing but SELECT).
ALTER ROLE reporter SET default_transaction_read_only = on;
