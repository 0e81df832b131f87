-- LaunchBoundClear records that a (batch, phase)'s launches are no
-- longer held back: it launched.
-- name: LaunchBoundClear :exec
UPDATE launch_bounds SET held = false WHERE batch_id = @batch_id AND phase = @phase AND held;

-- LaunchBoundDeleteByBatch removes a batch's launch bounds (retention).
-- name: LaunchBoundDeleteByBatch :execrows
DELETE FROM launch_bounds WHERE batch_id = @batch_id;

-- LaunchBoundList are the batches' phases that a bound holds back now.
-- name: LaunchBoundList :many
SELECT batch_id, phase, bound, held_since FROM launch_bounds WHERE batch_id = ANY(@batch_ids::text[]) AND held;

-- LaunchBoundSet records that bound holds a (batch, phase)'s launches
-- back. first is true the first time a bound does for the phase, or when
-- another bound does than last time: the occasion of a
-- phase.launch_bounded event.
-- name: LaunchBoundSet :one
WITH old AS (SELECT bound FROM launch_bounds WHERE batch_id = @batch_id AND phase = @phase)
INSERT INTO launch_bounds AS b (batch_id, phase, bound) VALUES (@batch_id, @phase, @bound)
ON CONFLICT (batch_id, phase) DO UPDATE SET bound = excluded.bound, held = true,
    held_since = CASE WHEN b.held THEN b.held_since ELSE clock_timestamp() END
RETURNING (coalesce((SELECT bound FROM old), '') <> @bound::text)::bool AS first;
