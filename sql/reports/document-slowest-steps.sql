-- The slowest document steps: first run's start to the end of the last, longest first (-limit rows).
--
-- One row per step of a document version that finished at or after @since,
-- read from documents.step_timing (migration 00015: versions indexed before
-- it have none). seconds runs from the step's first run's start to the end
-- of the run that finished it, waits between runs included: spec 003's
-- 100 ms between runs, the back-off after a failure, the provider's rate
-- limit, the rescue of a crashed process's job; work_seconds is the time of
-- the runs themselves, and runs how many there were (those that committed
-- work or failed). Steps that never finished (of a version still
-- processing, or the step that failed one) are left out. Seconds, rounded
-- to the millisecond.
SELECT
    d.id AS document_id,
    d.r2_key,
    d.version,
    s.key AS step,
    (s.value ->> 'runs')::integer AS runs,
    d.total_chunks AS chunks,
    round(extract(epoch FROM (s.value ->> 'completedAt')::timestamptz - (s.value ->> 'startedAt')::timestamptz)::numeric, 3)::float8 AS seconds,
    round((s.value ->> 'workMs')::numeric / 1000, 3)::float8 AS work_seconds,
    (s.value ->> 'startedAt')::timestamptz AS started_at,
    (s.value ->> 'completedAt')::timestamptz AS completed_at
FROM documents d
CROSS JOIN LATERAL jsonb_each(d.step_timing) s
WHERE s.value ->> 'completedAt' IS NOT NULL
    AND (s.value ->> 'completedAt')::timestamptz >= @since
ORDER BY seconds DESC, d.id, s.key
LIMIT @limit;
