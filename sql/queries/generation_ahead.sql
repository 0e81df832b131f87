-- GenerationAheadDelete forgets the batch's generation written ahead (its
-- transition took it over).
-- name: GenerationAheadDelete :exec
DELETE FROM generation_ahead WHERE batch_id = @batch_id;

-- GenerationAheadGet is the batch's generation written ahead, if any.
-- name: GenerationAheadGet :one
SELECT * FROM generation_ahead WHERE batch_id = @batch_id;

-- GenerationAheadSave records how far the batch's next generation is
-- written ahead.
-- name: GenerationAheadSave :exec
INSERT INTO generation_ahead (batch_id, phase, generation, files, last_input, wants)
VALUES (@batch_id, @phase, @generation, @files, @last_input, @wants::text[])
ON CONFLICT (batch_id) DO UPDATE SET phase = excluded.phase, generation = excluded.generation, files = excluded.files,
    last_input = excluded.last_input, wants = excluded.wants, updated_at = clock_timestamp();
