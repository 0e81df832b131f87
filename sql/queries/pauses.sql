-- PauseDelete resumes a pause, returning it.
-- name: PauseDelete :one
DELETE FROM pauses WHERE scope = @scope AND target = @target
RETURNING scope, target, reason, paused_at, (extract(epoch FROM clock_timestamp() - paused_at))::float8 AS paused_seconds;

-- PauseList is every pause, oldest first.
-- name: PauseList :many
SELECT scope, target, reason, paused_at FROM pauses ORDER BY paused_at, scope, target;

-- PauseSet pauses a scope; pausing again keeps the first time and takes the
-- new reason.
-- name: PauseSet :one
INSERT INTO pauses (scope, target, reason) VALUES (@scope, @target, @reason)
ON CONFLICT (scope, target) DO UPDATE SET reason = excluded.reason
RETURNING scope, target, reason, paused_at;

-- PauseShiftChunkItems moves the failing clocks of the chunk items a
-- resumed pause covered (batch and phase '' match any) later by the time
-- paused.
-- name: PauseShiftChunkItems :execrows
UPDATE chunk_items SET failing_since = failing_since + make_interval(secs => @seconds::float8)
WHERE failing_since IS NOT NULL AND status = 'pending'
  AND (@batch_id::text = '' OR batch_id = @batch_id::text) AND (@phase::text = '' OR phase = @phase::text);

-- PauseShiftDocuments moves the failing clocks of the open documents a
-- resumed pause covered later by the time paused.
-- name: PauseShiftDocuments :execrows
UPDATE documents SET failing_since = failing_since + make_interval(secs => @seconds::float8)
WHERE failing_since IS NOT NULL AND status IN ('not_started', 'processing')
  AND (@batch_id::text = '' OR batch_id = @batch_id::text) AND (@phase::text = '' OR @phase::text = 'DOCUMENT_INDEXING');

-- PauseShiftLaunchOutages moves the launch outages of the batches a resumed
-- pause covered later by the time paused.
-- name: PauseShiftLaunchOutages :execrows
UPDATE batches SET launch_outage_since = launch_outage_since + make_interval(secs => @seconds::float8)
WHERE launch_outage_since IS NOT NULL
  AND (@batch_id::text = '' OR id = @batch_id::text) AND (@phase::text = '' OR status = @phase::text);

-- PauseShiftTasks moves the failing clocks of the pending tasks a resumed
-- pause covered later by the time paused.
-- name: PauseShiftTasks :execrows
UPDATE tasks SET failing_since = failing_since + make_interval(secs => @seconds::float8)
WHERE failing_since IS NOT NULL AND status = 'pending'
  AND (@batch_id::text = '' OR batch_id = @batch_id::text) AND (@phase::text = '' OR phase = @phase::text);

-- PauseWake makes the paused work's snoozed jobs due now, so that a resume
-- takes effect at once rather than at their next look (batch and phase ''
-- match any; a document step's job names no batch and is woken by kind).
-- name: PauseWake :execrows
UPDATE river_job SET scheduled_at = clock_timestamp()
WHERE state = 'scheduled' AND kind = ANY(@kinds::text[]) AND scheduled_at > clock_timestamp()
  AND (@batch_id::text = '' OR NOT args ? 'batch_id' OR args->>'batch_id' = @batch_id::text)
  AND (@phase::text = '' OR NOT args ? 'phase' OR args->>'phase' = @phase::text);
