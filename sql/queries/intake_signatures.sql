-- name: IntakeSignaturePrune :exec
-- Forgets signatures older than the window: their timestamps are refused
-- anyway.
DELETE FROM intake_signatures WHERE seen_at < now() - make_interval(secs => @older_than_secs::float8);

-- name: IntakeSignatureRecord :execrows
-- Records a signature once: 0 rows means it was seen before (a replay).
INSERT INTO intake_signatures (signature) VALUES (@signature)
ON CONFLICT (signature) DO NOTHING;
