-- FileCountByBatchGeneration is the number of files of a generation.
-- name: FileCountByBatchGeneration :one
SELECT count(*)::bigint FROM files
WHERE batch_id = @batch_id AND generation = @generation;

-- FileDeleteOtherGenerations deletes up to max files of a batch that are
-- not of generation keep (retention: the final generation stays).
-- name: FileDeleteOtherGenerations :execrows
DELETE FROM files
WHERE id IN (SELECT f.id FROM files f WHERE f.batch_id = @batch_id AND f.generation <> @keep LIMIT @max);

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

-- FileListWithThumbnail is a page of a generation for the dashboard, with
-- whether each file has a thumbnail (FileThumbnailURL) and the
-- generation's size. A file's lineage (parent_id, up to the upload) is
-- walked for the thumbnail: the ref OCR published or the document
-- indexing passed on shows the image an earlier phase made.
-- name: FileListWithThumbnail :many
WITH RECURSIVE page AS (
    SELECT f.id, f.parent_id, f.ordinal, f.logical_path, f.file_size, f.content_type, f.preprocessor_tags, count(*) OVER () AS total
    FROM files f
    WHERE f.batch_id = @batch_id AND f.generation = @generation
    ORDER BY f.ordinal
    LIMIT @max
), lineage AS (
    SELECT p.id AS file_id, p.id AS ancestor, 0 AS depth FROM page p
    UNION ALL
    SELECT l.file_id, a.parent_id, l.depth + 1 FROM lineage l JOIN files a ON a.id = l.ancestor
    WHERE a.parent_id IS NOT NULL AND l.depth < 32
), thumbs AS (
    SELECT DISTINCT l.file_id FROM lineage l JOIN tasks t ON t.file_id = l.ancestor
    WHERE t.batch_id = @batch_id AND t.status = 'completed'
        AND t.result -> 'ref_data' -> 'variants' ->> 'thumbnail' IS NOT NULL
)
SELECT p.id, p.logical_path, p.file_size, p.content_type, p.preprocessor_tags,
    (p.id IN (SELECT thumbs.file_id FROM thumbs))::bool AS has_thumbnail, p.total
FROM page p
ORDER BY p.ordinal;

-- FileMarkKept marks the files of a DONE batch's final generation for
-- an admin retry (jobs.ResumeBatch): a file whose key is among the keys
-- whose work failed in some phase (as the executors name them) is to be
-- rerun, every other file is kept. Failures name their file by its key,
-- which the final generation still has (a file whose work failed passes
-- through its phase unchanged). It returns how many files are to rerun.
-- name: FileMarkKept :one
WITH marked AS (
    -- A join, not a lookup of the failures per file.
    UPDATE files f SET kept = m.kept
    FROM (
        SELECT g.id, r.r2_key IS NULL AS kept FROM files g
        LEFT JOIN (SELECT DISTINCT unnest(@failed_keys::text[]) AS r2_key) r ON r.r2_key = g.r2_key
        WHERE g.batch_id = @batch_id::text AND g.generation = @generation
    ) m
    WHERE f.id = m.id
    RETURNING f.kept
)
SELECT count(*) FILTER (WHERE NOT marked.kept)::int AS rerun FROM marked;

-- FileThumbnailURL is the URL of a file's thumbnail variant: the one the
-- completed task on the nearest file of its lineage (itself, the file it
-- was made from, and so on up to the upload) reported.
-- name: FileThumbnailURL :one
WITH RECURSIVE lineage AS (
    SELECT f.id AS ancestor, 0 AS depth FROM files f WHERE f.id = @id AND f.batch_id = @batch_id
    UNION ALL
    SELECT a.parent_id, l.depth + 1 FROM lineage l JOIN files a ON a.id = l.ancestor
    WHERE a.parent_id IS NOT NULL AND l.depth < 32
)
SELECT (t.result -> 'ref_data' -> 'variants' ->> 'thumbnail')::text AS thumbnail_url
FROM lineage l JOIN tasks t ON t.file_id = l.ancestor
WHERE t.batch_id = @batch_id AND t.status = 'completed'
    AND t.result -> 'ref_data' -> 'variants' ->> 'thumbnail' IS NOT NULL
ORDER BY l.depth
LIMIT 1;
