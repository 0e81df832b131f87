-- ListenerAllKnow reports whether every process heard within the last
-- @within_seconds knows migration @version (an older release beats
-- without one).
-- name: ListenerAllKnow :one
SELECT NOT EXISTS (
    SELECT 1 FROM listeners
    WHERE seen_at > clock_timestamp() - make_interval(secs => @within_seconds::float8)
        AND coalesce(schema_version, 0) < @version::bigint
) AS all_know;

-- ListenerBeat records that a process is heard now, and the newest
-- migration it knows.
-- name: ListenerBeat :exec
INSERT INTO listeners (process_id, seen_at, schema_version) VALUES (@process_id, clock_timestamp(), @schema_version)
ON CONFLICT (process_id) DO UPDATE SET seen_at = excluded.seen_at, schema_version = excluded.schema_version;

-- ListenerForget removes the rows of processes not heard for a day.
-- name: ListenerForget :exec
DELETE FROM listeners WHERE seen_at < clock_timestamp() - interval '1 day';

-- ListenerLock serializes the listeners' beats for the transaction, so
-- that one silence is made up for once.
-- name: ListenerLock :exec
SELECT pg_advisory_xact_lock(7263011);

-- ListenerSilence is how long no process has been heard, in seconds; 0
-- before the first is.
-- name: ListenerSilence :one
SELECT coalesce(extract(epoch FROM clock_timestamp() - max(seen_at)), 0)::float8 AS seconds FROM listeners;
