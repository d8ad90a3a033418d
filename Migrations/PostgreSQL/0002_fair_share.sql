-- Fair share between tenants: the claim finds the tenants with queued jobs (a skip scan of this index) and reads each
-- one's first due jobs in its own order (priority, due time, age).
CREATE INDEX jobs_tenant_due ON jobs (tenant, priority, run_at, created_at, id) WHERE state = 'queued';
