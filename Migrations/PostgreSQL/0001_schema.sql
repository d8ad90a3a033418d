-- Herald's schema on PostgreSQL: the SQLite schema (Migrations/*.sql) as it stands after its migrations, in
-- PostgreSQL's own types, with the same invariants.
--
-- Conventions:
-- * Ids are UUIDv7 strings made by the application, kept as text: opaque to clients, as on SQLite.
-- * Times are timestamptz, written by the application at millisecond precision.
-- * Every CHECK of the SQLite schema holds here too; a post and its job point at each other, so
--   posts.job_id is checked at commit, letting either row be inserted first.
-- Applied under an advisory transaction lock and recorded in herald_migrations, so replicas started together
-- apply it exactly once.

CREATE TABLE posts (
    id           text        NOT NULL PRIMARY KEY,
    tenant       text        NOT NULL DEFAULT 'default' CHECK (tenant <> ''),
    -- No length CHECK: the 5,000 limit counts Swift Characters.
    text         text        NOT NULL DEFAULT '',
    state        text        NOT NULL
                             CHECK (state IN ('queued', 'scheduled', 'publishing', 'published', 'failed', 'cancelled')),
    -- The API's spelling; jobs carry the same priority as a sortable rank.
    priority     text        NOT NULL DEFAULT 'normal' CHECK (priority IN ('low', 'normal', 'high')),
    scheduled_at timestamptz,
    created_at   timestamptz NOT NULL,
    published_at timestamptz,
    -- The current (latest) job; older jobs of a re-published post stay in `jobs`.
    job_id       text,
    -- A post is published once, in the same transaction that stamps it.
    CHECK ((state = 'published') = (published_at IS NOT NULL))
);

-- Uploaded bytes and their metadata. Staged media belong to no post until a post claims them.
CREATE TABLE media (
    id           text        NOT NULL PRIMARY KEY,
    tenant       text        NOT NULL DEFAULT 'default' CHECK (tenant <> ''),
    content_type text        NOT NULL CHECK (content_type <> ''),
    -- Empty bodies are refused by the API, so a zero-byte medium is a bug.
    size         bigint      NOT NULL CHECK (size > 0),
    sha256       text        NOT NULL CHECK (sha256 ~ '^[0-9a-f]{64}$'),
    description  text,
    state        text        NOT NULL DEFAULT 'staged' CHECK (state IN ('staged', 'uploading', 'uploaded', 'failed')),
    -- Set when the post is committed (published), not when the bytes reach the store.
    url          text,
    post_id      text        REFERENCES posts (id),
    -- Order within the post, as given in `media_ids`; present exactly when attached.
    position     integer     CHECK (position >= 0),
    -- Where the staged bytes are, relative to the staging area; never derived from client input.
    staging_path text        NOT NULL CHECK (staging_path <> '' AND left(staging_path, 1) <> '/' AND staging_path NOT LIKE '%..%'),
    -- Deterministic per medium so a resumed upload overwrites rather than duplicates.
    object_key   text        UNIQUE,
    created_at   timestamptz NOT NULL,
    CHECK ((post_id IS NULL) = (position IS NULL)),
    -- One medium per slot: also the index that reads a post's media in order.
    UNIQUE (post_id, position)
);

CREATE TABLE jobs (
    id               text        NOT NULL PRIMARY KEY,
    tenant           text        NOT NULL DEFAULT 'default' CHECK (tenant <> ''),
    post_id          text        NOT NULL REFERENCES posts (id),
    state            text        NOT NULL
                                 CHECK (state IN ('queued', 'scheduled', 'running', 'succeeded', 'failed', 'cancelled')),
    -- Rank, not name, so ORDER BY priority claims high first: 0 = high, 1 = normal, 2 = low.
    priority         smallint    NOT NULL DEFAULT 1 CHECK (priority IN (0, 1, 2)),
    -- The fencing token: every write of a runner names the attempt it claimed, and is refused once it moved on.
    attempt          integer     NOT NULL DEFAULT 0 CHECK (attempt >= 0),
    -- When the job may be claimed: created_at for an immediate post, scheduled_at otherwise.
    run_at           timestamptz NOT NULL,
    cancel_requested boolean     NOT NULL DEFAULT false,
    -- Lease of a running job: a replica that died leaves an expired lease, and the job is claimed again.
    locked_until     timestamptz,
    locked_by        text,
    error_code       text        CHECK (error_code IN ('upload_failed', 'cancelled', 'media_missing', 'internal')),
    error_message    text,
    error_media_id   text        REFERENCES media (id),
    created_at       timestamptz NOT NULL,
    started_at       timestamptz,
    finished_at      timestamptz,
    -- Bumped by every committed change to the job or its uploads: the event id of its change feed.
    version          bigint      NOT NULL DEFAULT 0 CHECK (version >= 0),
    CHECK ((locked_until IS NULL) = (locked_by IS NULL)),
    -- The API's `error` object is all or nothing: no message or media without a code.
    CHECK (error_code IS NOT NULL OR (error_message IS NULL AND error_media_id IS NULL)),
    -- `done` is exactly "has finished": a terminal state and a finish time go together.
    CHECK ((state IN ('succeeded', 'failed', 'cancelled')) = (finished_at IS NOT NULL))
);

ALTER TABLE posts ADD FOREIGN KEY (job_id) REFERENCES jobs (id) DEFERRABLE INITIALLY DEFERRED;

-- One row per (job, medium): the job's `uploads` and `progress`. A re-publish gets fresh rows.
CREATE TABLE uploads (
    job_id     text    NOT NULL REFERENCES jobs (id) ON DELETE CASCADE,
    media_id   text    NOT NULL REFERENCES media (id),
    state      text    NOT NULL DEFAULT 'pending' CHECK (state IN ('pending', 'uploading', 'uploaded', 'failed', 'cancelled')),
    attempts   integer NOT NULL DEFAULT 0 CHECK (attempts >= 0),
    error      text,
    -- Bytes the store has taken, written at the upload's state changes (the live count is in memory).
    bytes_sent bigint  NOT NULL DEFAULT 0 CHECK (bytes_sent >= 0),
    PRIMARY KEY (job_id, media_id)
);

-- Idempotency-Key records (IETF draft), per tenant: replay the same post and job for the same key and payload.
CREATE TABLE idempotency_keys (
    tenant       text        NOT NULL DEFAULT 'default' CHECK (tenant <> ''),
    key          text        NOT NULL,
    -- Hash of the request (method, path, canonical body): a different payload under the same key is a 422.
    request_hash text        NOT NULL,
    post_id      text        REFERENCES posts (id),
    job_id       text        REFERENCES jobs (id),
    -- in_progress answers a concurrent retry with 409 until the first request completes.
    state        text        NOT NULL DEFAULT 'in_progress' CHECK (state IN ('in_progress', 'completed')),
    created_at   timestamptz NOT NULL,
    expires_at   timestamptz NOT NULL,
    CHECK (expires_at > created_at),
    PRIMARY KEY (tenant, key)
);

-- API keys, stored as the SHA-256 of their text only. A tenant is the string its keys carry.
CREATE TABLE keys (
    id           text        NOT NULL PRIMARY KEY,
    name         text        NOT NULL CHECK (name <> '' AND char_length(name) <= 100),
    tenant       text        NOT NULL DEFAULT 'default' CHECK (tenant <> '' AND char_length(tenant) <= 64),
    scope        text        NOT NULL DEFAULT 'publish' CHECK (scope IN ('read', 'publish', 'admin')),
    hash         text        NOT NULL UNIQUE CHECK (hash ~ '^[0-9a-f]{64}$'),
    created_at   timestamptz NOT NULL,
    -- Written in batches, at most a minute behind.
    last_used_at timestamptz,
    revoked_at   timestamptz
);

-- Webhooks (Standard Webhooks 1.0): endpoints, the events a job's end makes, one delivery per event and endpoint,
-- inserted in the transaction that ends the job (a transactional outbox).
CREATE TABLE webhooks (
    id         text        NOT NULL PRIMARY KEY,
    tenant     text        NOT NULL CHECK (tenant <> ''),
    url        text        NOT NULL CHECK (url <> '' AND char_length(url) <= 2048),
    -- The event types, in the order given.
    events     jsonb       NOT NULL CHECK (jsonb_typeof(events) = 'array'),
    secret     text        NOT NULL CHECK (secret LIKE 'whsec_%'),
    disabled   boolean     NOT NULL DEFAULT false,
    created_at timestamptz NOT NULL
);

-- What was sent: the body is fixed when the job ends, so every attempt signs and sends the same bytes.
CREATE TABLE webhook_events (
    id         text        NOT NULL PRIMARY KEY,
    type       text        NOT NULL CHECK (type IN ('job.succeeded', 'job.failed', 'job.cancelled')),
    body       bytea       NOT NULL,
    created_at timestamptz NOT NULL
);

CREATE TABLE webhook_deliveries (
    id               text        NOT NULL PRIMARY KEY,
    webhook_id       text        NOT NULL REFERENCES webhooks (id) ON DELETE CASCADE,
    event_id         text        NOT NULL REFERENCES webhook_events (id),
    attempts         integer     NOT NULL DEFAULT 0 CHECK (attempts >= 0),
    status           text        NOT NULL DEFAULT 'pending' CHECK (status IN ('pending', 'delivered', 'failed')),
    last_status_code integer,
    last_error       text,
    -- Due time of the next attempt: set exactly while pending. A claim pushes it to the claim's end.
    next_attempt_at  timestamptz,
    -- The replica whose attempt has claimed it, until the attempt is recorded.
    claimed_by       text,
    delivered_at     timestamptz,
    created_at       timestamptz NOT NULL,
    CHECK ((status = 'pending') = (next_attempt_at IS NOT NULL)),
    CHECK ((status = 'delivered') = (delivered_at IS NOT NULL))
);

-- Objects to delete from the store, those a failed or cancelled job may have left (an outbox, like the webhooks').
CREATE TABLE object_deletions (
    media_id     text        NOT NULL PRIMARY KEY,
    content_type text        NOT NULL,
    due_at       timestamptz NOT NULL,
    attempts     integer     NOT NULL DEFAULT 0 CHECK (attempts >= 0),
    last_error   text
);

-- The queue's pause switch, one row, for every replica.
CREATE TABLE queue_control (
    id     smallint NOT NULL PRIMARY KEY CHECK (id = 1),
    paused boolean  NOT NULL DEFAULT false
);
INSERT INTO queue_control (id, paused) VALUES (1, false);

-- The replicas alive: each renews its row every --lease-renew; one whose row is past alive_until is gone.
CREATE TABLE replicas (
    id          text        NOT NULL PRIMARY KEY CHECK (id <> ''),
    workers     integer     NOT NULL CHECK (workers > 0),
    alive_until timestamptz NOT NULL,
    started_at  timestamptz NOT NULL
);

-- Claiming walks the due jobs only, in claim order.
CREATE INDEX jobs_due ON jobs (priority, run_at, created_at, id) WHERE state = 'queued';
-- Scheduled jobs by due time, promoted when due; running jobs by lease, for the reaper.
CREATE INDEX jobs_scheduled ON jobs (run_at) WHERE state = 'scheduled';
CREATE INDEX jobs_leases ON jobs (locked_until) WHERE state = 'running';
-- At most one active job per post: "409 if a job is active" holds even under concurrent requests.
CREATE UNIQUE INDEX jobs_one_active_per_post ON jobs (post_id) WHERE state IN ('queued', 'scheduled', 'running');
-- A post's jobs (history), and the child side of jobs.post_id.
CREATE INDEX jobs_post ON jobs (post_id, created_at);
-- Lists, newest first per tenant, with a (created_at, id) cursor; with and without ?state=.
CREATE INDEX posts_list ON posts (tenant, created_at DESC, id DESC);
CREATE INDEX posts_state_list ON posts (tenant, state, created_at DESC, id DESC);
CREATE INDEX jobs_list ON jobs (tenant, created_at DESC, id DESC);
CREATE INDEX jobs_state_list ON jobs (tenant, state, created_at DESC, id DESC);
CREATE INDEX keys_list ON keys (created_at DESC, id DESC);
CREATE INDEX webhooks_list ON webhooks (tenant, created_at DESC, id DESC);
-- Child sides of references, so deletes check them without a scan.
CREATE INDEX uploads_media ON uploads (media_id);
CREATE INDEX jobs_error_media ON jobs (error_media_id) WHERE error_media_id IS NOT NULL;
CREATE INDEX idempotency_keys_post ON idempotency_keys (post_id) WHERE post_id IS NOT NULL;
CREATE INDEX idempotency_keys_job ON idempotency_keys (job_id) WHERE job_id IS NOT NULL;
CREATE INDEX webhook_deliveries_event ON webhook_deliveries (event_id);
-- The sweeps: expired idempotency keys, unattached media in age order, old deliveries.
CREATE INDEX idempotency_keys_expiry ON idempotency_keys (expires_at);
CREATE INDEX media_unattached ON media (created_at) WHERE post_id IS NULL;
CREATE INDEX webhook_deliveries_age ON webhook_deliveries (created_at);
-- The dispatcher's and the cleaner's "what is due next?".
CREATE INDEX webhook_deliveries_due ON webhook_deliveries (next_attempt_at) WHERE status = 'pending';
CREATE INDEX webhook_deliveries_list ON webhook_deliveries (webhook_id, created_at DESC, id DESC);
CREATE INDEX object_deletions_due ON object_deletions (due_at);

-- The change feed of every replica (LISTEN herald_changes): each committed change of a job, as `j <id> <version>
-- <state> <cancel_requested>`, `d` when webhook deliveries were queued, `q <paused>` when the queue was paused or
-- resumed. Notifications are sent at commit, in commit
-- order; a rolled-back transaction sends none.
CREATE FUNCTION herald_job_changed() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_notify('herald_changes', 'j ' || NEW.id || ' ' || NEW.version || ' ' || NEW.state || ' ' || NEW.cancel_requested::int);
    RETURN NULL;
END
$$;
CREATE TRIGGER jobs_changed AFTER INSERT OR UPDATE OF version ON jobs FOR EACH ROW EXECUTE FUNCTION herald_job_changed();

CREATE FUNCTION herald_deliveries_queued() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_notify('herald_changes', 'd');
    RETURN NULL;
END
$$;
CREATE TRIGGER deliveries_queued AFTER INSERT ON webhook_deliveries FOR EACH STATEMENT EXECUTE FUNCTION herald_deliveries_queued();

-- A pause or resume reaches every replica at once: `q <paused>`.
CREATE FUNCTION herald_queue_changed() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_notify('herald_changes', 'q ' || NEW.paused::int);
    RETURN NULL;
END
$$;
CREATE TRIGGER queue_changed AFTER UPDATE ON queue_control FOR EACH ROW EXECUTE FUNCTION herald_queue_changed();
