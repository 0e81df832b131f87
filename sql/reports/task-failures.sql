-- Task failure rate per phase: outcomes, failures, timeouts.
--
-- One row per phase, counted from the event log (batch_events) since
-- @since: every ended launch records one task.completed, task.failed (an
-- error callback, or no machine could be launched) or task.timed_out event.
-- The log keeps outcomes that an admin retry later cleared from the tasks
-- table, so a task that failed twice then succeeded counts three outcomes,
-- two of them failures. Tasks ended by an admin reset record no event and
-- are not counted: a reset is not the task's failure.
-- failure_rate = (failed + timed_out) / outcomes, rounded to 4 places.
SELECT
    e.phase,
    count(*) AS outcomes,
    count(DISTINCT e.task_id) AS tasks,
    count(*) FILTER (WHERE e.type = 'task.completed') AS completed,
    count(*) FILTER (WHERE e.type = 'task.failed') AS failed,
    count(*) FILTER (WHERE e.type = 'task.timed_out') AS timed_out,
    round(count(*) FILTER (WHERE e.type <> 'task.completed')::numeric / count(*), 4)::float8 AS failure_rate
FROM batch_events e
WHERE e.type IN ('task.completed', 'task.failed', 'task.timed_out')
    AND e.created_at >= @since
GROUP BY e.phase
ORDER BY e.phase;
