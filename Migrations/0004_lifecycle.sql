-- The lifecycle of data: what the sweep expires and what deleting a post removes, each found through an index.
--
-- Unattached media older than `--staged-media-ttl` are deleted by the minute's sweep: this partial index holds only
-- the unattached ones, in age order, so the sweep reads nothing when nothing has expired.
CREATE INDEX media_unattached ON media (created_at) WHERE post_id IS NULL;

-- Deleting a post deletes the idempotency keys that name it or its jobs; these are also the child sides of those
-- references, so SQLite's foreign-key checks on deleting a post or a job need no scan of the table.
CREATE INDEX idempotency_keys_post ON idempotency_keys (post_id) WHERE post_id IS NOT NULL;
CREATE INDEX idempotency_keys_job ON idempotency_keys (job_id) WHERE job_id IS NOT NULL;
