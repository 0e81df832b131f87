-- +goose Up

-- A chunk item's outcome as its engine made it (the OCR engine's
-- {"text_length", "ref_r2_key", "ref_size"}): the chunked executor keeps
-- it for the phase's transform without knowing what is in it. Done items
-- of earlier releases get theirs from the OCR columns they have.
ALTER TABLE chunk_items ADD COLUMN result jsonb;
UPDATE chunk_items SET result = jsonb_build_object('text_length', text_length, 'ref_r2_key', published_key, 'ref_size', published_size)
WHERE status = 'done' AND result IS NULL;

-- A pruned batch keeps each phase's progress as its executor reports it
-- ({"phases": [...]}, the shape of GET /status's phases) instead of the
-- task counts and the OCR summary of earlier releases, which become that.
UPDATE batches b SET pruned_counts = jsonb_build_object('phases', coalesce((
    SELECT jsonb_agg(p ORDER BY p ->> 'phase') FROM (
        SELECT jsonb_build_object('phase', t.phase, 'executor', 'machine', 'unit', 'tasks',
            'tasks_total', sum(t.n),
            'tasks_pending', coalesce(sum(t.n) FILTER (WHERE t.status = 'pending'), 0),
            'tasks_processing', coalesce(sum(t.n) FILTER (WHERE t.status = 'processing'), 0),
            'tasks_completed', coalesce(sum(t.n) FILTER (WHERE t.status = 'completed'), 0),
            'tasks_failed', coalesce(sum(t.n) FILTER (WHERE t.status = 'failed'), 0)) AS p
        FROM jsonb_to_recordset(b.pruned_counts -> 'tasks') AS t(phase text, status text, n bigint)
        GROUP BY t.phase
        UNION ALL
        SELECT jsonb_build_object('phase', 'OCR', 'executor', 'chunked', 'unit', 'refs',
            'tasks_total', (o ->> 'refs_total')::bigint,
            'tasks_pending', (o ->> 'refs_total')::bigint - (o ->> 'refs_done')::bigint - (o ->> 'refs_failed')::bigint - (o ->> 'refs_skipped')::bigint,
            'tasks_processing', 0,
            'tasks_completed', (o ->> 'refs_done')::bigint + (o ->> 'refs_skipped')::bigint,
            'tasks_failed', (o ->> 'refs_failed')::bigint,
            'tasks_skipped', (o ->> 'refs_skipped')::bigint,
            'detail', jsonb_build_object('chunks_total', (o ->> 'chunks_total')::bigint,
                'chunks_done', (o ->> 'chunks_done')::bigint, 'chunks_error', (o ->> 'chunks_error')::bigint))
        FROM (SELECT b.pruned_counts -> 'ocr' AS o) x
        WHERE jsonb_typeof(o) = 'object'
    ) phases), '[]'::jsonb))
WHERE b.pruned_counts IS NOT NULL AND NOT b.pruned_counts ? 'phases';

-- +goose Down
UPDATE batches SET pruned_counts = jsonb_build_object('tasks', '[]'::jsonb) WHERE pruned_counts ? 'phases';
ALTER TABLE chunk_items DROP COLUMN result;
