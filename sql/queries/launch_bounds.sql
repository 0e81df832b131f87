-- LaunchBoundClear ends a (batch, phase)'s wait: it launched.
-- name: LaunchBoundClear :exec
DELETE FROM launch_bounds WHERE batch_id = @batch_id AND phase = @phase;

-- LaunchBoundList are the batches' waits.
-- name: LaunchBoundList :many
SELECT batch_id, phase, bound, since FROM launch_bounds WHERE batch_id = ANY(@batch_ids::text[]);

-- LaunchBoundSet records that a (batch, phase)'s launches wait for bound.
-- It returns a row only when the wait is new, or now for another bound:
-- the occasion of a phase.launch_bounded event.
-- name: LaunchBoundSet :many
INSERT INTO launch_bounds (batch_id, phase, bound) VALUES (@batch_id, @phase, @bound)
ON CONFLICT (batch_id, phase) DO UPDATE SET bound = excluded.bound, since = clock_timestamp()
    WHERE launch_bounds.bound <> excluded.bound
RETURNING batch_id, phase, bound, since;
