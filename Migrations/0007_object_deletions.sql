-- Objects to delete from the store: those a failed or cancelled job may have left (an outbox, like the webhooks').
--
-- The transaction that ends a job failed or cancelled inserts one row per medium of its post (keys are
-- deterministic, and deleting a missing object is fine). The runner deletes the objects at once as well; these
-- rows are the durable second pass: after `due_at` (a few seconds later, so that a PUT whose body was already
-- sent when its upload was cancelled has landed), again after a restart, and again after a failed DELETE.
-- Re-publishing the post removes its rows in the transaction that makes the new job.
CREATE TABLE object_deletions (
    media_id     TEXT    NOT NULL PRIMARY KEY,
    content_type TEXT    NOT NULL,
    due_at       TEXT    NOT NULL CHECK (due_at = strftime('%Y-%m-%dT%H:%M:%fZ', due_at)),
    attempts     INTEGER NOT NULL DEFAULT 0 CHECK (attempts >= 0),
    last_error   TEXT
) STRICT;

-- The cleaner reads what is due, soonest first.
CREATE INDEX object_deletions_due ON object_deletions (due_at);
