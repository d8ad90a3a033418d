-- Herald's initial schema: media, posts, their publish jobs, per-media uploads, idempotency keys.
--
-- Conventions, so that SQL alone can keep the API's promises:
-- * Ids are UUIDv7 strings made by the application (time-ordered, opaque to clients).
-- * Timestamps are RFC 3339 UTC text with milliseconds, exactly `YYYY-MM-DDTHH:MM:SS.SSSZ`.
--   The CHECKs below reject any other spelling, because ordering, cursors, `run_at <= now`
--   and expiry all compare these strings as text: one fixed-width form makes text order time order.
-- * STRICT tables: a value of the wrong type is an error, not silently coerced.
-- * Booleans are INTEGER 0/1.
-- * Foreign keys are enforced (the connection enables them); a post and its job point at each
--   other, so posts.job_id is checked at commit to let either row be inserted first.

-- Uploaded bytes and their metadata. Staged media belong to no post until a post claims them.
CREATE TABLE media (
    id           TEXT    NOT NULL PRIMARY KEY,
    content_type TEXT    NOT NULL CHECK (content_type <> ''),
    -- Empty bodies are refused by the API, so a zero-byte medium is a bug.
    size         INTEGER NOT NULL CHECK (size > 0),
    sha256       TEXT    NOT NULL CHECK (length(sha256) = 64 AND sha256 NOT GLOB '*[^0-9a-f]*'),
    description  TEXT,
    state        TEXT    NOT NULL DEFAULT 'staged'
                         CHECK (state IN ('staged', 'uploading', 'uploaded', 'failed')),
    -- Set when the post is committed (published), not when the bytes reach the store.
    url          TEXT,
    post_id      TEXT    REFERENCES posts (id),
    -- Order within the post, as given in `media_ids`; present exactly when attached.
    position     INTEGER CHECK (position >= 0),
    -- Relative to the data directory, so the directory can move; never derived from client input.
    staging_path TEXT    NOT NULL
                         CHECK (staging_path <> '' AND substr(staging_path, 1, 1) <> '/' AND staging_path NOT LIKE '%..%'),
    -- Deterministic per medium so a resumed upload overwrites rather than duplicates.
    object_key   TEXT    UNIQUE,
    created_at   TEXT    NOT NULL CHECK (created_at = strftime('%Y-%m-%dT%H:%M:%fZ', created_at)),
    CHECK ((post_id IS NULL) = (position IS NULL)),
    -- One medium per slot: also the index that reads a post's media in order.
    UNIQUE (post_id, position)
) STRICT;

CREATE TABLE posts (
    id           TEXT NOT NULL PRIMARY KEY,
    -- No length CHECK: the 5,000 limit counts Swift Characters, which SQLite cannot count.
    text         TEXT NOT NULL DEFAULT '',
    state        TEXT NOT NULL
                      CHECK (state IN ('queued', 'scheduled', 'publishing', 'published', 'failed', 'cancelled')),
    -- The API's spelling; jobs carry the same priority as a sortable rank.
    priority     TEXT NOT NULL DEFAULT 'normal' CHECK (priority IN ('low', 'normal', 'high')),
    scheduled_at TEXT CHECK (scheduled_at = strftime('%Y-%m-%dT%H:%M:%fZ', scheduled_at)),
    created_at   TEXT NOT NULL CHECK (created_at = strftime('%Y-%m-%dT%H:%M:%fZ', created_at)),
    published_at TEXT CHECK (published_at = strftime('%Y-%m-%dT%H:%M:%fZ', published_at)),
    -- The current (latest) job; older jobs of a re-published post stay in `jobs`.
    job_id       TEXT REFERENCES jobs (id) DEFERRABLE INITIALLY DEFERRED,
    -- A post is published once, in the same transaction that stamps it.
    CHECK ((state = 'published') = (published_at IS NOT NULL))
) STRICT;

CREATE TABLE jobs (
    id               TEXT    NOT NULL PRIMARY KEY,
    post_id          TEXT    NOT NULL REFERENCES posts (id),
    state            TEXT    NOT NULL
                             CHECK (state IN ('queued', 'scheduled', 'running', 'succeeded', 'failed', 'cancelled')),
    -- Rank, not name, so ORDER BY priority claims high first: 0 = high, 1 = normal, 2 = low.
    priority         INTEGER NOT NULL DEFAULT 1 CHECK (priority IN (0, 1, 2)),
    attempt          INTEGER NOT NULL DEFAULT 0 CHECK (attempt >= 0),
    -- When the job may be claimed: created_at for an immediate post, scheduled_at otherwise.
    run_at           TEXT    NOT NULL CHECK (run_at = strftime('%Y-%m-%dT%H:%M:%fZ', run_at)),
    cancel_requested INTEGER NOT NULL DEFAULT 0 CHECK (cancel_requested IN (0, 1)),
    -- Lease of a running job: a runner that died leaves an expired lease, and the job is reclaimed.
    locked_until     TEXT    CHECK (locked_until = strftime('%Y-%m-%dT%H:%M:%fZ', locked_until)),
    locked_by        TEXT,
    error_code       TEXT    CHECK (error_code IN ('upload_failed', 'cancelled', 'media_missing', 'internal')),
    error_message    TEXT,
    error_media_id   TEXT    REFERENCES media (id),
    created_at       TEXT    NOT NULL CHECK (created_at = strftime('%Y-%m-%dT%H:%M:%fZ', created_at)),
    started_at       TEXT    CHECK (started_at = strftime('%Y-%m-%dT%H:%M:%fZ', started_at)),
    finished_at      TEXT    CHECK (finished_at = strftime('%Y-%m-%dT%H:%M:%fZ', finished_at)),
    CHECK ((locked_until IS NULL) = (locked_by IS NULL)),
    -- The API's `error` object is all or nothing: no message or media without a code.
    CHECK (error_code IS NOT NULL OR (error_message IS NULL AND error_media_id IS NULL)),
    -- `done` is exactly "has finished": a terminal state and a finish time go together.
    CHECK ((state IN ('succeeded', 'failed', 'cancelled')) = (finished_at IS NOT NULL))
) STRICT;

-- One row per (job, medium): the job's `uploads` and `progress`. A re-publish gets fresh rows.
CREATE TABLE uploads (
    job_id   TEXT    NOT NULL REFERENCES jobs (id) ON DELETE CASCADE,
    media_id TEXT    NOT NULL REFERENCES media (id),
    state    TEXT    NOT NULL DEFAULT 'pending'
                     CHECK (state IN ('pending', 'uploading', 'uploaded', 'failed', 'cancelled')),
    attempts INTEGER NOT NULL DEFAULT 0 CHECK (attempts >= 0),
    error    TEXT,
    PRIMARY KEY (job_id, media_id)
) STRICT, WITHOUT ROWID;

-- Idempotency-Key records (IETF draft): replay the same post and job for the same key and payload.
CREATE TABLE idempotency_keys (
    key          TEXT NOT NULL PRIMARY KEY,
    -- Hash of the request (method, path, canonical body): a different payload under the same key is a 422.
    request_hash TEXT NOT NULL,
    post_id      TEXT REFERENCES posts (id),
    job_id       TEXT REFERENCES jobs (id),
    -- in_progress answers a concurrent retry with 409 until the first request completes.
    state        TEXT NOT NULL DEFAULT 'in_progress' CHECK (state IN ('in_progress', 'completed')),
    created_at   TEXT NOT NULL CHECK (created_at = strftime('%Y-%m-%dT%H:%M:%fZ', created_at)),
    expires_at   TEXT NOT NULL CHECK (expires_at = strftime('%Y-%m-%dT%H:%M:%fZ', expires_at)),
    CHECK (expires_at > created_at)
) STRICT;

-- Claiming: `WHERE state = 'queued' AND run_at <= :now ORDER BY priority, run_at, created_at, id`
-- walks this index in claim order and stops at the first due job, with no sort of the queue.
-- Due `scheduled` jobs are promoted to `queued` first (same index, state = 'scheduled'): an
-- `IN ('queued', 'scheduled')` on the leading column would force a sort. Running jobs with an
-- expired lease are found through it too (state = 'running', a handful of rows).
CREATE INDEX jobs_claim ON jobs (state, priority, run_at, created_at, id);

-- At most one active job per post: "409 if a job is active" holds even under concurrent requests.
CREATE UNIQUE INDEX jobs_one_active_per_post ON jobs (post_id) WHERE state IN ('queued', 'scheduled', 'running');

-- A post's jobs (history), and the child side of jobs.post_id for foreign-key checks.
CREATE INDEX jobs_post ON jobs (post_id, created_at);

-- Lists, newest first, with a (created_at, id) cursor; with and without ?state=.
CREATE INDEX posts_list ON posts (created_at DESC, id DESC);
CREATE INDEX posts_state_list ON posts (state, created_at DESC, id DESC);
CREATE INDEX jobs_list ON jobs (created_at DESC, id DESC);
CREATE INDEX jobs_state_list ON jobs (state, created_at DESC, id DESC);

-- Media by post in order is served by UNIQUE (post_id, position) above.
-- Child sides of the references to media, so deleting a staged medium checks them without a scan.
CREATE INDEX uploads_media ON uploads (media_id);
CREATE INDEX jobs_error_media ON jobs (error_media_id) WHERE error_media_id IS NOT NULL;

-- Purging expired idempotency keys.
CREATE INDEX idempotency_keys_expiry ON idempotency_keys (expires_at);
