-- Top failure reasons per phase, most frequent first (-limit rows).
--
-- Counted from the task.failed and task.timed_out events since @since (see
-- task-failures), grouped by phase and reason. The reason is the error
-- message with durations written as "Ns" ("Task timed out after Ns") and
-- s3:// URLs as "s3://...", so that failures of different files and lengths
-- group together; example is one message as it was recorded. Ties are
-- broken by phase and reason, so the order is stable.
WITH failures AS (
    SELECT
        e.phase, e.task_id, e.batch_id, e.created_at,
        coalesce(e.data->>'error', '(no message)') AS error
    FROM batch_events e
    WHERE e.type IN ('task.failed', 'task.timed_out')
        AND e.created_at >= @since
)
SELECT
    f.phase,
    regexp_replace(regexp_replace(f.error, 's3://\S+', 's3://...', 'g'), '\m[0-9]+(\.[0-9]+)?s\M', 'Ns', 'g') AS reason,
    count(*) AS failures,
    count(DISTINCT f.task_id) AS tasks,
    count(DISTINCT f.batch_id) AS batches,
    max(f.created_at) AS last_seen,
    min(f.error) AS example
FROM failures f
GROUP BY 1, 2
ORDER BY failures DESC, f.phase, reason
LIMIT @limit;
