-- name: IntakeSignaturePrune :exec
-- Forgets signatures made more than older_than_secs ago (the window and a
-- margin for the replicas' clocks): their timestamps are refused anyway.
DELETE FROM intake_signatures WHERE signed_at < now() - make_interval(secs => @older_than_secs::float8);

-- name: IntakeSignatureRecord :execrows
-- Records a signature, made at signed_at, once: 0 rows means it was seen
-- before (a replay).
INSERT INTO intake_signatures (signature, signed_at) VALUES (@signature, @signed_at)
ON CONFLICT (signature) DO NOTHING;
