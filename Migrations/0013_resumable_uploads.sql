-- Resumable uploads (tus, /v1/uploads): one row per upload under way. `received` is the offset a HEAD reports: it moves
-- only once the bytes up to it are durable, so a crash never reports bytes it then loses. When the last byte arrives the
-- row is deleted and the media row it becomes is inserted, in one transaction (same id).
CREATE TABLE resumable_uploads (
    id           TEXT    NOT NULL PRIMARY KEY,
    tenant       TEXT    NOT NULL CHECK (tenant <> ''),
    content_type TEXT    NOT NULL CHECK (content_type <> ''),
    description  TEXT,
    length       INTEGER NOT NULL CHECK (length > 0),
    received     INTEGER NOT NULL DEFAULT 0 CHECK (received >= 0 AND received <= length),
    -- Relative to the data directory (or a key in the store); never derived from client input.
    bytes_path   TEXT    NOT NULL CHECK (bytes_path <> '' AND substr(bytes_path, 1, 1) <> '/' AND bytes_path NOT LIKE '%..%'),
    created_at   TEXT    NOT NULL CHECK (created_at = strftime('%Y-%m-%dT%H:%M:%fZ', created_at)),
    expires_at   TEXT    NOT NULL CHECK (expires_at = strftime('%Y-%m-%dT%H:%M:%fZ', expires_at)),
    -- The PATCH taking bytes now (one at a time, on whichever replica), and until when its hold lasts unless renewed:
    -- the offset moves only for the holder (fencing).
    holder       TEXT,
    held_until   TEXT,
    CHECK ((holder IS NULL) = (held_until IS NULL))
) STRICT;

-- The sweep's expiry pass reads nothing when nothing has expired.
CREATE INDEX resumable_uploads_expiry ON resumable_uploads (expires_at);
