-- ServerKeyEnsure stores the key given under its name unless one is
-- stored, and returns the stored one. No row comes back only when another process
-- stored it after this statement began: read again.
-- name: ServerKeyEnsure :many
WITH made AS (
    INSERT INTO server_keys (name, key) VALUES (@name, @key)
    ON CONFLICT (name) DO NOTHING
    RETURNING server_keys.key
)
SELECT made.key FROM made
UNION ALL
SELECT k.key FROM server_keys k WHERE k.name = @name;
