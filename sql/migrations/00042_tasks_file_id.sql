-- +goose Up

-- A file's tasks: writing a generation ahead (migration 00041) reads a
-- stretch of a few thousand files with their tasks, which without it took
-- a scan of every task of the batch's phase each time. (Built in the
-- migration's transaction, as every index here is: the tasks' writes wait
-- for it, about a second a million tasks. CONCURRENTLY would wait for the
-- transactions of the other processes, among them those waiting to
-- migrate.)
CREATE INDEX tasks_file_id_idx ON tasks (file_id);

-- +goose Down
DROP INDEX tasks_file_id_idx;
