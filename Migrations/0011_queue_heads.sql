-- Each tenant's first queued job in claim order (priority, due time, age, id) and its running jobs, kept by triggers
-- as jobs enter and leave the queue and the running state: the fair-share claim reads the few best first jobs in its
-- order from an index (queue_heads_turn) rather than walking every tenant on every claim. A tenant without queued
-- jobs has no row.
CREATE TABLE queue_heads (
    tenant     TEXT    NOT NULL PRIMARY KEY,
    priority   INTEGER NOT NULL,
    running    INTEGER NOT NULL CHECK (running >= 0),
    run_at     TEXT    NOT NULL,
    created_at TEXT    NOT NULL,
    job_id     TEXT    NOT NULL
) STRICT, WITHOUT ROWID;

-- The claim's order of first jobs: priority, then turn (running + 1), then due time, age, id.
CREATE INDEX queue_heads_turn ON queue_heads (priority, running, run_at, created_at, job_id);

INSERT INTO queue_heads (tenant, priority, running, run_at, created_at, job_id)
SELECT tenant, priority, (SELECT count(*) FROM jobs AS r WHERE r.state = 'running' AND r.tenant = first.tenant),
       run_at, created_at, id
FROM (
    SELECT tenant, priority, run_at, created_at, id,
           row_number() OVER (PARTITION BY tenant ORDER BY priority, run_at, created_at, id) AS rank
    FROM jobs WHERE state = 'queued'
) AS first WHERE rank = 1;

-- One trigger a statement kind, its steps in order: the running count first, then the first job (a row made anew
-- counts the running jobs itself, so the order keeps a claim from being counted twice).

CREATE TRIGGER queue_heads_insert AFTER INSERT ON jobs WHEN new.state IN ('queued', 'running')
BEGIN
    UPDATE queue_heads SET running = running + 1 WHERE new.state = 'running' AND tenant = new.tenant;
    INSERT INTO queue_heads (tenant, priority, running, run_at, created_at, job_id)
    SELECT new.tenant, new.priority, (SELECT count(*) FROM jobs WHERE state = 'running' AND tenant = new.tenant),
           new.run_at, new.created_at, new.id
    WHERE new.state = 'queued'
    ON CONFLICT (tenant) DO UPDATE SET
        priority = excluded.priority, run_at = excluded.run_at, created_at = excluded.created_at, job_id = excluded.job_id
    WHERE (excluded.priority, excluded.run_at, excluded.created_at, excluded.job_id)
        < (queue_heads.priority, queue_heads.run_at, queue_heads.created_at, queue_heads.job_id);
END;

-- A first job that leaves the queue (claimed, cancelled) or moves gives its place to its tenant's next queued job; a
-- job that enters or moves within the queue comes first if it does. (Herald changes none of the order's columns after
-- the insert; the trigger watches them anyway, so that the table cannot drift.)
CREATE TRIGGER queue_heads_update AFTER UPDATE OF state, tenant, priority, run_at, created_at ON jobs
WHEN old.state IN ('queued', 'running') OR new.state IN ('queued', 'running')
BEGIN
    UPDATE queue_heads SET running = running - 1 WHERE old.state = 'running' AND tenant = old.tenant;
    UPDATE queue_heads SET running = running + 1 WHERE new.state = 'running' AND tenant = new.tenant;
    DELETE FROM queue_heads WHERE old.state = 'queued' AND tenant = old.tenant AND job_id = old.id;
    INSERT INTO queue_heads (tenant, priority, running, run_at, created_at, job_id)
    SELECT tenant, priority, (SELECT count(*) FROM jobs AS r WHERE r.state = 'running' AND r.tenant = old.tenant),
           run_at, created_at, id
    FROM jobs
    WHERE state = 'queued' AND tenant = old.tenant AND old.state = 'queued'
        AND NOT EXISTS (SELECT 1 FROM queue_heads WHERE tenant = old.tenant)
    ORDER BY priority, run_at, created_at, id LIMIT 1;
    INSERT INTO queue_heads (tenant, priority, running, run_at, created_at, job_id)
    SELECT new.tenant, new.priority, (SELECT count(*) FROM jobs WHERE state = 'running' AND tenant = new.tenant),
           new.run_at, new.created_at, new.id
    WHERE new.state = 'queued'
    ON CONFLICT (tenant) DO UPDATE SET
        priority = excluded.priority, run_at = excluded.run_at, created_at = excluded.created_at, job_id = excluded.job_id
    WHERE (excluded.priority, excluded.run_at, excluded.created_at, excluded.job_id)
        < (queue_heads.priority, queue_heads.run_at, queue_heads.created_at, queue_heads.job_id);
END;

CREATE TRIGGER queue_heads_delete AFTER DELETE ON jobs WHEN old.state IN ('queued', 'running')
BEGIN
    UPDATE queue_heads SET running = running - 1 WHERE old.state = 'running' AND tenant = old.tenant;
    DELETE FROM queue_heads WHERE old.state = 'queued' AND tenant = old.tenant AND job_id = old.id;
    INSERT INTO queue_heads (tenant, priority, running, run_at, created_at, job_id)
    SELECT tenant, priority, (SELECT count(*) FROM jobs AS r WHERE r.state = 'running' AND r.tenant = old.tenant),
           run_at, created_at, id
    FROM jobs
    WHERE state = 'queued' AND tenant = old.tenant AND old.state = 'queued'
        AND NOT EXISTS (SELECT 1 FROM queue_heads WHERE tenant = old.tenant)
    ORDER BY priority, run_at, created_at, id LIMIT 1;
END;

-- The claim reads queue_heads and jobs_tenant_due, not the queue in one global order: jobs_claim, which every state
-- change rewrote, gives way to partial indexes that only the states they serve touch.
DROP INDEX jobs_claim;
CREATE INDEX jobs_scheduled ON jobs (run_at) WHERE state = 'scheduled';
CREATE INDEX jobs_leases ON jobs (locked_until) WHERE state = 'running';
