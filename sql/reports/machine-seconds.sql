-- Machine-seconds per batch (launch to end of each task): the basis of cost.
--
-- One row per batch accepted at or after @since, oldest first. For each
-- task, the seconds from its launch (launched_at, when it was claimed, just
-- before its machine was created) to its end (finished_at): its callback,
-- its timeout (the machine ran until the sweep failed it and queued its
-- destruction) or an admin reset. Counted: tasks that ended with a machine,
-- i.e. by a callback, or by a timeout or reset once a machine was recorded.
-- Not counted: tasks still running (shown in running), tasks that never got
-- a machine ("no machine could be launched"), and launches whose outcome an
-- admin retry cleared (the tasks table keeps each task's latest launch
-- only). launches is the number of tasks counted.
SELECT
    b.id AS batch_id,
    b.status,
    b.uploader,
    b.started_at,
    count(t.id) FILTER (WHERE m.counted) AS launches,
    coalesce(round((sum(extract(epoch FROM t.finished_at - t.launched_at)) FILTER (WHERE m.counted))::numeric, 3), 0)::float8
        AS machine_seconds,
    count(t.id) FILTER (WHERE t.status = 'processing') AS running
FROM batches b
LEFT JOIN tasks t ON t.batch_id = b.id
LEFT JOIN LATERAL (
    SELECT t.launched_at IS NOT NULL AND t.finished_at IS NOT NULL
        AND (t.ended_by = 'callback' OR t.machine_id IS NOT NULL) AS counted
) m ON true
WHERE b.started_at >= @since
GROUP BY b.id
ORDER BY b.started_at, b.id;
