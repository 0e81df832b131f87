-- Document versions by status: how many, their chunks, how long they took.
--
-- One row per status (not_started, processing, completed, failed) of the
-- document versions asked for at or after @since (documents.created_at).
-- chunks sums their chunks (0 until a version is downloaded); with_errors
-- counts versions with at least one failure in their history (retried, or
-- failed). The durations run from a version's first step to its end
-- (completed_at or failed_at), for versions that ended; the percentiles
-- are percentile_cont (interpolated). A version whose content was the
-- current version's takes over its chunks at download and counts as
-- completed. Seconds, rounded to the millisecond.
SELECT
    d.status,
    count(*) AS documents,
    coalesce(sum(d.total_chunks), 0) AS chunks,
    count(*) FILTER (WHERE jsonb_array_length(d.errors) > 0) AS with_errors,
    round((percentile_cont(0.5) WITHIN GROUP (ORDER BY extract(epoch FROM coalesce(d.completed_at, d.failed_at) - d.started_at)))::numeric, 3)::float8 AS p50_seconds,
    round((percentile_cont(0.95) WITHIN GROUP (ORDER BY extract(epoch FROM coalesce(d.completed_at, d.failed_at) - d.started_at)))::numeric, 3)::float8 AS p95_seconds,
    round(max(extract(epoch FROM coalesce(d.completed_at, d.failed_at) - d.started_at))::numeric, 3)::float8 AS max_seconds
FROM documents d
WHERE d.created_at >= @since
GROUP BY d.status
ORDER BY array_position(ARRAY['not_started', 'processing', 'completed', 'failed'], d.status);
