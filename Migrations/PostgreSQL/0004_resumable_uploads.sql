-- Resumable uploads (tus, /v1/uploads): one row per upload under way. `received` is the offset a HEAD reports: it moves
-- only once the bytes up to it are durable, so a crash never reports bytes it then loses. When the last byte arrives the
-- row is deleted and the media row it becomes is inserted, in one transaction (same id).
CREATE TABLE resumable_uploads (
    id           text        NOT NULL PRIMARY KEY,
    tenant       text        NOT NULL CHECK (tenant <> ''),
    content_type text        NOT NULL CHECK (content_type <> ''),
    description  text,
    length       bigint      NOT NULL CHECK (length > 0),
    received     bigint      NOT NULL DEFAULT 0 CHECK (received >= 0 AND received <= length),
    -- Relative to the staging area (a key in the store); never derived from client input.
    bytes_path   text        NOT NULL CHECK (bytes_path <> '' AND left(bytes_path, 1) <> '/' AND bytes_path NOT LIKE '%..%'),
    created_at   timestamptz NOT NULL,
    expires_at   timestamptz NOT NULL,
    -- The PATCH taking bytes now (one at a time, on whichever replica), and until when its hold lasts unless renewed:
    -- the offset moves only for the holder (fencing).
    holder       text,
    held_until   timestamptz,
    CHECK ((holder IS NULL) = (held_until IS NULL))
);

-- The sweep's expiry pass reads nothing when nothing has expired.
CREATE INDEX resumable_uploads_expiry ON resumable_uploads (expires_at);
