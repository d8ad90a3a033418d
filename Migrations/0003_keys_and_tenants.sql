-- The trust boundary: API keys, and the tenant that owns every medium, post, job and idempotency key.
--
-- A key is stored as the SHA-256 of its text only: whoever reads this file cannot call the API with what is here.
-- Tenants have no table of their own: a tenant is the string its keys carry, and `default` the one of `--auth off`
-- and of every row made before this migration.
CREATE TABLE keys (
    id           TEXT NOT NULL PRIMARY KEY,
    name         TEXT NOT NULL CHECK (name <> '' AND length(name) <= 100),
    tenant       TEXT NOT NULL DEFAULT 'default' CHECK (tenant <> '' AND length(tenant) <= 64),
    scope        TEXT NOT NULL DEFAULT 'publish' CHECK (scope IN ('read', 'publish', 'admin')),
    -- Lowercase hex SHA-256 of the whole key (`hrld_…`); what a request's key is looked up by.
    hash         TEXT NOT NULL UNIQUE CHECK (length(hash) = 64 AND hash NOT GLOB '*[^0-9a-f]*'),
    created_at   TEXT NOT NULL CHECK (created_at = strftime('%Y-%m-%dT%H:%M:%fZ', created_at)),
    -- Written in batches, at most a minute behind.
    last_used_at TEXT CHECK (last_used_at = strftime('%Y-%m-%dT%H:%M:%fZ', last_used_at)),
    revoked_at   TEXT CHECK (revoked_at = strftime('%Y-%m-%dT%H:%M:%fZ', revoked_at))
) STRICT;

-- `GET /v1/keys` and `herald keys list`, newest first with a (created_at, id) cursor.
CREATE INDEX keys_list ON keys (created_at DESC, id DESC);

ALTER TABLE media ADD COLUMN tenant TEXT NOT NULL DEFAULT 'default' CHECK (tenant <> '');
ALTER TABLE posts ADD COLUMN tenant TEXT NOT NULL DEFAULT 'default' CHECK (tenant <> '');
ALTER TABLE jobs ADD COLUMN tenant TEXT NOT NULL DEFAULT 'default' CHECK (tenant <> '');

-- Idempotency keys are per tenant: two tenants may use the same key. SQLite cannot change a primary key in place,
-- so the table is made anew and its rows copied (nothing references it).
CREATE TABLE idempotency_keys_by_tenant (
    tenant       TEXT NOT NULL DEFAULT 'default' CHECK (tenant <> ''),
    key          TEXT NOT NULL,
    request_hash TEXT NOT NULL,
    post_id      TEXT REFERENCES posts (id),
    job_id       TEXT REFERENCES jobs (id),
    state        TEXT NOT NULL DEFAULT 'in_progress' CHECK (state IN ('in_progress', 'completed')),
    created_at   TEXT NOT NULL CHECK (created_at = strftime('%Y-%m-%dT%H:%M:%fZ', created_at)),
    expires_at   TEXT NOT NULL CHECK (expires_at = strftime('%Y-%m-%dT%H:%M:%fZ', expires_at)),
    CHECK (expires_at > created_at),
    PRIMARY KEY (tenant, key)
) STRICT;
INSERT INTO idempotency_keys_by_tenant (tenant, key, request_hash, post_id, job_id, state, created_at, expires_at)
    SELECT 'default', key, request_hash, post_id, job_id, state, created_at, expires_at FROM idempotency_keys;
DROP TABLE idempotency_keys;
ALTER TABLE idempotency_keys_by_tenant RENAME TO idempotency_keys;
CREATE INDEX idempotency_keys_expiry ON idempotency_keys (expires_at);

-- Lists are per tenant: the tenant leads each list index, so a tenant's page walks only its own rows.
DROP INDEX posts_list;
DROP INDEX posts_state_list;
DROP INDEX jobs_list;
DROP INDEX jobs_state_list;
CREATE INDEX posts_list ON posts (tenant, created_at DESC, id DESC);
CREATE INDEX posts_state_list ON posts (tenant, state, created_at DESC, id DESC);
CREATE INDEX jobs_list ON jobs (tenant, created_at DESC, id DESC);
CREATE INDEX jobs_state_list ON jobs (tenant, state, created_at DESC, id DESC);
