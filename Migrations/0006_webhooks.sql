-- Webhooks (Standard Webhooks 1.0): endpoints, the events a job's end makes, and one delivery per event and endpoint.
--
-- The event and its deliveries are inserted in the transaction that ends the job (a transactional outbox): a crash
-- right after the commit still delivers, since the dispatcher finds the pending rows at its next start.
CREATE TABLE webhooks (
    id         TEXT    NOT NULL PRIMARY KEY,
    tenant     TEXT    NOT NULL CHECK (tenant <> ''),
    url        TEXT    NOT NULL CHECK (url <> '' AND length(url) <= 2048),
    -- A JSON array of event types, in the order given.
    events     TEXT    NOT NULL CHECK (json_valid(events) AND json_type(events) = 'array'),
    -- `whsec_` + base64: kept in clear, since every delivery is signed with it; shown to the client once.
    secret     TEXT    NOT NULL CHECK (secret LIKE 'whsec_%'),
    disabled   INTEGER NOT NULL DEFAULT 0 CHECK (disabled IN (0, 1)),
    created_at TEXT    NOT NULL CHECK (created_at = strftime('%Y-%m-%dT%H:%M:%fZ', created_at))
) STRICT;

-- `GET /v1/webhooks`, newest first per tenant; also the lookup of a tenant's endpoints when a job ends.
CREATE INDEX webhooks_list ON webhooks (tenant, created_at DESC, id DESC);

-- What was sent: the body is fixed when the job ends, so every attempt signs and sends the same bytes.
CREATE TABLE webhook_events (
    id         TEXT NOT NULL PRIMARY KEY,
    type       TEXT NOT NULL CHECK (type IN ('job.succeeded', 'job.failed', 'job.cancelled')),
    body       BLOB NOT NULL,
    created_at TEXT NOT NULL CHECK (created_at = strftime('%Y-%m-%dT%H:%M:%fZ', created_at))
) STRICT;

CREATE TABLE webhook_deliveries (
    id               TEXT    NOT NULL PRIMARY KEY,
    webhook_id       TEXT    NOT NULL REFERENCES webhooks (id) ON DELETE CASCADE,
    event_id         TEXT    NOT NULL REFERENCES webhook_events (id),
    attempts         INTEGER NOT NULL DEFAULT 0 CHECK (attempts >= 0),
    status           TEXT    NOT NULL DEFAULT 'pending' CHECK (status IN ('pending', 'delivered', 'failed')),
    last_status_code INTEGER,
    last_error       TEXT,
    -- Due time of the next attempt: set exactly while pending.
    next_attempt_at  TEXT    CHECK (next_attempt_at = strftime('%Y-%m-%dT%H:%M:%fZ', next_attempt_at)),
    delivered_at     TEXT    CHECK (delivered_at = strftime('%Y-%m-%dT%H:%M:%fZ', delivered_at)),
    created_at       TEXT    NOT NULL CHECK (created_at = strftime('%Y-%m-%dT%H:%M:%fZ', created_at)),
    CHECK ((status = 'pending') = (next_attempt_at IS NOT NULL)),
    CHECK ((status = 'delivered') = (delivered_at IS NOT NULL))
) STRICT;

-- The dispatcher's question, "what is due next?": only pending rows, in due order.
CREATE INDEX webhook_deliveries_due ON webhook_deliveries (next_attempt_at) WHERE status = 'pending';
-- `GET /v1/webhooks/{id}/deliveries`, newest first.
CREATE INDEX webhook_deliveries_list ON webhook_deliveries (webhook_id, created_at DESC, id DESC);
-- The 7-day expiry, and the events no delivery refers to any more.
CREATE INDEX webhook_deliveries_age ON webhook_deliveries (created_at);
CREATE INDEX webhook_deliveries_event ON webhook_deliveries (event_id);
