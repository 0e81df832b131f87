-- PhaseCheckPendingMany tells, for each (batch, phase) of the arrays
-- (duplicates allowed), whether an unfinished phase_check (a River job, in
-- a state of fanin.UniqueUnfinished) exists for it. It takes no lock;
-- fanin.EnsurePhaseChecks says why its answer can be trusted under the
-- batches' shared fan-in locks. The group committer sends it in its
-- pipeline (db.PhaseCheckPendingManySQL), in a statement of its own after
-- the one that took the locks, so that its snapshot is taken under them.
-- It looks by state first: finished checks (River keeps them for a day)
-- pile up by the thousand during a large phase, unfinished ones are few.
-- name: PhaseCheckPendingMany :many
SELECT p.batch_id, p.phase, EXISTS (
    SELECT 1 FROM river_job j
    WHERE j.state IN ('available', 'pending', 'retryable', 'running', 'scheduled')
      AND j.kind = 'phase_check' AND j.args @> jsonb_build_object('batch_id', p.batch_id, 'phase', p.phase)
) AS pending
FROM (SELECT DISTINCT unnest(@batch_ids::text[])::text AS batch_id, unnest(@phases::text[])::text AS phase) p;

-- RiverJobAge raises by one level (to at most River's first, 1) the
-- priority of every job that has been due for longer than after_seconds
-- without being worked: the aging rule (PRIORITY_AGING) that keeps jobs of
-- low-priority batches from waiting for ever behind higher ones. Run once
-- per PRIORITY_AGING, a job so climbs a level for each period it waits.
-- Served by River's index on (state, queue, priority, scheduled_at, id).
-- name: RiverJobAge :execrows
UPDATE river_job SET priority = priority - 1
WHERE state = 'available' AND priority > 1
    AND scheduled_at < clock_timestamp() - make_interval(secs => @after_seconds::float8);

-- RiverJobWakeKind makes the snoozed jobs of a kind due now (River's
-- scheduler then makes them available): a dispatcher idling until there
-- is work, told there may be.
-- name: RiverJobWakeKind :execrows
UPDATE river_job SET scheduled_at = clock_timestamp()
WHERE state = 'scheduled' AND kind = @kind::text AND scheduled_at > clock_timestamp();
