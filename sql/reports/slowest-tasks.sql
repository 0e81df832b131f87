-- The slowest tasks: launch to callback, longest first (-limit rows).
--
-- Tasks that ended by their worker's callback (success or error) at or
-- after @since, ranked by finished_at - launched_at: the time from claiming
-- the task for launch (just before the machine is created) to applying its
-- callback. Timed-out and reset tasks are left out (their duration is the
-- timeout or the reset, not the work; see task-failures). Only a task's
-- latest launch is known. Seconds, rounded to the millisecond.
SELECT
    t.id AS task_id,
    t.batch_id,
    t.phase,
    t.status,
    f.file_name,
    f.file_size,
    round(extract(epoch FROM t.finished_at - t.launched_at)::numeric, 3)::float8 AS seconds,
    t.launched_at,
    t.finished_at
FROM tasks t
JOIN files f ON f.id = t.file_id
WHERE t.ended_by = 'callback'
    AND t.launched_at IS NOT NULL
    AND t.finished_at >= @since
ORDER BY seconds DESC, t.id
LIMIT @limit;
