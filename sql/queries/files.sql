-- FileInsertMany writes a whole generation with COPY: a generation can hold
-- 100,000 rows.
-- name: FileInsertMany :copyfrom
INSERT INTO files (
    batch_id, generation, ordinal, parent_id, phase, directory_path, r2_key,
    logical_path, file_name, file_size, content_type, cid, processing_config,
    preprocessor_tags
) VALUES (
    @batch_id, @generation, @ordinal, @parent_id, @phase, @directory_path, @r2_key,
    @logical_path, @file_name, @file_size, @content_type, @cid, @processing_config,
    @preprocessor_tags
);

-- FileCountByBatchGeneration is the number of files of a generation.
-- name: FileCountByBatchGeneration :one
SELECT count(*)::bigint FROM files
WHERE batch_id = @batch_id AND generation = @generation;

-- name: FileListByBatchGeneration :many
SELECT * FROM files
WHERE batch_id = @batch_id AND generation = @generation
ORDER BY ordinal;

-- FileListIDsByBatchGeneration returns the row IDs of a generation in list
-- order, from ordinal min_ordinal on: after writing a generation (or a chunk
-- of one) with COPY, this is all that is missing from the values written
-- (reading 100,000 whole rows back took seconds).
-- name: FileListIDsByBatchGeneration :many
SELECT id FROM files
WHERE batch_id = @batch_id AND generation = @generation AND ordinal >= @min_ordinal::integer
ORDER BY ordinal;
