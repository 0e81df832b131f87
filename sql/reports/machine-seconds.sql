-- Machine-seconds, provider usage and estimated cost per batch and phase.
--
-- One row per batch accepted at or after @since and phase it consumed
-- something in (a batch that consumed nothing yet: one row, phase empty),
-- oldest batch first, from the usage table (migration 00039), which the
-- statements that end the work add to:
--   attempts           task attempts ended on machines (every attempt,
--                      retried ones included) and pool machines ended
--   machine_seconds    each attempt's machine time: from its launch (or
--                      its lease, on a pool's machine) to its end by
--                      callback, timeout, lost lease or reset
--   pool_idle_seconds  the batch's pool machines' start-up and idle time
--                      (a shared pool's belongs to no batch)
--   provider_requests, prompt_tokens, completion_tokens
--                      OCR, embeddings and tags answers, committed with
--                      the item or document step they did
--   estimated_usd      at PRICE_MACHINE_SECOND and PRICE_TOKENS_PER_1K
--                      (@machine_prices, @token_prices); unpriced names the
--                      guests and models without a price, left out of it
--   running            the phase's tasks still processing, whose attempts
--                      are not counted yet
-- Figures from before migration 00039 are each task's latest attempt only,
-- of unknown guest.
WITH priced AS (
    SELECT u.*,
        CASE WHEN u.kind = 'provider' THEN
            CASE WHEN u.prompt_tokens = 0 AND u.completion_tokens = 0 THEN 0::float8
                ELSE (u.prompt_tokens * (@token_prices::jsonb -> u.resource ->> 'prompt')::float8
                    + u.completion_tokens * (@token_prices::jsonb -> u.resource ->> 'completion')::float8) / 1000 END
        ELSE CASE WHEN u.seconds = 0 THEN 0::float8
            ELSE u.seconds * (@machine_prices::jsonb ->> u.resource)::float8 END
        END AS usd
    FROM usage u
    JOIN batches b ON b.id = u.batch_id
    WHERE b.started_at >= @since
), per_phase AS (
    SELECT batch_id, phase,
        sum(attempts) FILTER (WHERE kind <> 'provider') AS attempts,
        coalesce(sum(seconds) FILTER (WHERE kind IN ('task', 'pool_busy')), 0) AS machine_seconds,
        coalesce(sum(seconds) FILTER (WHERE kind = 'pool_idle'), 0) AS pool_idle_seconds,
        sum(requests) AS provider_requests, sum(prompt_tokens) AS prompt_tokens, sum(completion_tokens) AS completion_tokens,
        coalesce(sum(usd), 0) AS usd,
        string_agg(DISTINCT CASE WHEN usd IS NULL THEN
            CASE WHEN kind = 'provider' THEN 'model ' || resource WHEN resource = '' THEN 'guest unknown' ELSE 'guest ' || resource END
            END, ', ') AS unpriced
    FROM priced
    GROUP BY batch_id, phase
)
SELECT
    b.id AS batch_id,
    b.status,
    b.uploader,
    b.started_at,
    coalesce(p.phase, '') AS phase,
    coalesce(p.attempts, 0)::bigint AS attempts,
    round(coalesce(p.machine_seconds, 0)::numeric, 3)::float8 AS machine_seconds,
    round(coalesce(p.pool_idle_seconds, 0)::numeric, 3)::float8 AS pool_idle_seconds,
    coalesce(p.provider_requests, 0)::bigint AS provider_requests,
    coalesce(p.prompt_tokens, 0)::bigint AS prompt_tokens,
    coalesce(p.completion_tokens, 0)::bigint AS completion_tokens,
    round(coalesce(p.usd, 0)::numeric, 6)::float8 AS estimated_usd,
    coalesce(p.unpriced, '') AS unpriced,
    coalesce((SELECT sum(c.n) FROM task_counts c
        WHERE c.batch_id = b.id AND c.phase = p.phase AND c.status = 'processing'), 0)::bigint AS running
FROM batches b
LEFT JOIN per_phase p ON p.batch_id = b.id
WHERE b.started_at >= @since
ORDER BY b.started_at, b.id, p.phase;
