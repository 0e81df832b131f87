-- Top failure reasons per phase, most frequent first (-limit rows).
--
-- Counted from the task.failed and task.timed_out events since @since (see
-- task-failures), grouped by phase and reason. The reason is the error
-- message with what differs from one file or run to the next written as a
-- placeholder, by the rules below in order: URLs, object keys, the leading
-- bytes of a file, task, machine and request ids, and numbers (sizes, pages,
-- durations; HTTP status codes after "StatusCode: " are kept). So "input
-- s3://arke-staging/staging/01K.../a.tiff does not exist" and the same for
-- any other file are one reason, "input s3://<key> does not exist". A key
-- with a space in it is only partly replaced. example is one message as it
-- was recorded. Ties are broken by phase and reason, so the order is stable.
WITH RECURSIVE rules (step, pattern, replacement) AS (
    VALUES
        -- http(s) URLs, e.g. a callback's.
        (1, 'https?://[^[:space:]"]*[^[:space:]":,;)]', '<url>'),
        -- s3://bucket/key, but not the colon, comma... that follows it.
        (2, 's3://[^[:space:]"]*[^[:space:]":,;)]', 's3://<key>'),
        -- A bare key: a word with two slashes or more ("decoding TIFF
        -- staging/01K.../a.tiff: ..."); "i/o" is not one.
        (3, '(?<![[:graph:]])[[:alnum:]_.-]+/[^[:space:]]*/[^[:space:]]*[^[:space:]":,;)]', '<key>'),
        -- The first bytes of a file that is not what it claims to be.
        (4, 'starts with "([^"\\]|\\.)*"', 'starts with "<bytes>"'),
        -- Pixel dimensions, before the ids rule takes them for one.
        (5, '(?<![[:alnum:]_])[0-9]+x[0-9]+', '<n>x<n>'),
        -- Ids: words of 10 characters or more with 3 digits or more
        -- (ULIDs, task ids such as tiff_01k..., Fly machine ids, S3
        -- request ids); words such as tiff2vips are kept.
        (6, '(?<![[:alnum:]_-])(?=([[:alpha:]_-]*[0-9]){3})[[:alnum:]_-]{10,}(?![[:alnum:]_-])', '<id>'),
        -- Numbers that start a word: "after 60.2s", "page 3 of 12",
        -- "PDF_MAX_PAGES (2)".
        (7, '(?<![[:alnum:]_])(?<!StatusCode: )[0-9]+(\.[0-9]+)?', '<n>')
),
failures AS (
    SELECT
        e.id, e.phase, e.task_id, e.batch_id, e.created_at,
        coalesce(e.data->>'error', '(no message)') AS error
    FROM batch_events e
    WHERE e.type IN ('task.failed', 'task.timed_out')
        AND e.created_at >= @since
),
-- Each failure's message after 0, 1, 2... rules.
normalised (id, step, reason) AS (
    SELECT f.id, 0, f.error FROM failures f
    UNION ALL
    SELECT n.id, r.step, regexp_replace(n.reason, r.pattern, r.replacement, 'g')
    FROM normalised n
    JOIN rules r ON r.step = n.step + 1
)
SELECT
    f.phase,
    n.reason,
    count(*) AS failures,
    count(DISTINCT f.task_id) AS tasks,
    count(DISTINCT f.batch_id) AS batches,
    max(f.created_at) AS last_seen,
    min(f.error) AS example
FROM failures f
JOIN normalised n ON n.id = f.id AND n.step = (SELECT max(step) FROM rules)
GROUP BY 1, 2
ORDER BY failures DESC, f.phase, n.reason
LIMIT @limit;
