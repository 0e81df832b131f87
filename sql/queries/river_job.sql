-- PhaseCheckPending tells whether an unfinished phase_check (a River job, in
-- a state of jobs.uniqueUnfinished) exists for the phase of a batch. It
-- takes no lock; jobs.EnsurePhaseCheck says why its answer can be trusted
-- under the batch's shared fan-in lock.
-- name: PhaseCheckPending :one
SELECT EXISTS (
    SELECT 1 FROM river_job
    WHERE state IN ('available', 'pending', 'retryable', 'running', 'scheduled')
      AND kind = 'phase_check' AND args @> jsonb_build_object('batch_id', @batch_id::text, 'phase', @phase::text)
) AS pending;

-- PhaseCheckPendingByTasks is PhaseCheckPending for the phases of a group
-- of tasks (by id): each distinct (batch_id, phase) with whether an
-- unfinished phase_check exists for it. The callback path sends it in its
-- pipeline (db.PhaseCheckPendingByTasksSQL), in a statement of its own
-- after the one that took the batches' shared locks, so that its snapshot
-- is taken under them. It looks once per (batch, phase), not once per
-- task, and by state first: finished checks (River keeps them for a day)
-- pile up by the thousand during a large phase, unfinished ones are few.
-- name: PhaseCheckPendingByTasks :many
SELECT p.batch_id, p.phase, EXISTS (
    SELECT 1 FROM river_job j
    WHERE j.state IN ('available', 'pending', 'retryable', 'running', 'scheduled')
      AND j.kind = 'phase_check' AND j.args @> jsonb_build_object('batch_id', p.batch_id, 'phase', p.phase)
) AS pending
FROM (SELECT DISTINCT batch_id, phase FROM tasks WHERE id = ANY(@ids::text[])) p;
