-- Batch duration (acceptance to DONE) per day: p50, p95 and the longest.
--
-- One row per UTC day on which batches ended (completed_at >= since). A
-- batch's duration runs from its acceptance (batches.started_at, set by
-- POST /batches) to its completion, so it includes waiting for machines,
-- every phase and any time spent in ERROR before an admin retry finished it.
-- The percentiles (percentile_cont, interpolated) and the maximum cover DONE
-- batches only; batches that ended in ERROR that day are counted apart, and
-- their durations are left out. Seconds, rounded to the millisecond.
SELECT
    (b.completed_at AT TIME ZONE 'UTC')::date AS day,
    count(*) FILTER (WHERE b.status = 'DONE') AS batches_done,
    count(*) FILTER (WHERE b.status = 'ERROR') AS batches_error,
    round((percentile_cont(0.5) WITHIN GROUP (ORDER BY extract(epoch FROM b.completed_at - b.started_at))
        FILTER (WHERE b.status = 'DONE'))::numeric, 3)::float8 AS p50_seconds,
    round((percentile_cont(0.95) WITHIN GROUP (ORDER BY extract(epoch FROM b.completed_at - b.started_at))
        FILTER (WHERE b.status = 'DONE'))::numeric, 3)::float8 AS p95_seconds,
    round((max(extract(epoch FROM b.completed_at - b.started_at)) FILTER (WHERE b.status = 'DONE'))::numeric, 3)::float8 AS max_seconds
FROM batches b
WHERE b.completed_at >= @since
GROUP BY 1
ORDER BY 1;
