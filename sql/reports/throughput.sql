-- Throughput per hour: tasks ended and batches finished.
--
-- One row per UTC hour since @since in which anything ended, from the event
-- log: tasks completed (task.completed), tasks failed (task.failed and
-- task.timed_out, as in task-failures), batches DONE (batch.done) and
-- batches put in ERROR by a failure (batch.error; admin resets are not
-- counted). Hours with nothing are left out.
SELECT
    date_trunc('hour', e.created_at, 'UTC') AS hour,
    count(*) FILTER (WHERE e.type = 'task.completed') AS tasks_completed,
    count(*) FILTER (WHERE e.type IN ('task.failed', 'task.timed_out')) AS tasks_failed,
    count(*) FILTER (WHERE e.type = 'batch.done') AS batches_done,
    count(*) FILTER (WHERE e.type = 'batch.error') AS batches_error
FROM batch_events e
WHERE e.type IN ('task.completed', 'task.failed', 'task.timed_out', 'batch.done', 'batch.error')
    AND e.created_at >= @since
GROUP BY 1
ORDER BY 1;
