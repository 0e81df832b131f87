-- UsageAddProvider adds provider answers to a batch's phase (an empty
-- batch id for a document posted alone): per model, the requests answered
-- and the tokens the answers reported, under the caller's role (ocr,
-- embeddings, tags). The caller sums per model first: a model once.
-- name: UsageAddProvider :exec
INSERT INTO usage AS u (batch_id, phase, kind, role, resource, requests, prompt_tokens, completion_tokens)
SELECT @batch_id::text, @phase::text, 'provider', @role::text, m.model, m.requests, m.prompt_tokens, m.completion_tokens
FROM (
    SELECT unnest(@models::text[]) AS model, unnest(@requests::bigint[]) AS requests,
        unnest(@prompt_tokens::bigint[]) AS prompt_tokens, unnest(@completion_tokens::bigint[]) AS completion_tokens
) m
ORDER BY m.model
ON CONFLICT (batch_id, phase, kind, role, resource) DO UPDATE
SET requests = u.requests + excluded.requests, prompt_tokens = u.prompt_tokens + excluded.prompt_tokens,
    completion_tokens = u.completion_tokens + excluded.completion_tokens, updated_at = clock_timestamp();

-- UsageListByBatch is what a batch consumed: its usage rows, by phase.
-- name: UsageListByBatch :many
SELECT phase, kind, role, resource, attempts, seconds, requests, prompt_tokens, completion_tokens
FROM usage
WHERE batch_id = @batch_id
ORDER BY phase, kind, role, resource;
