-- Fair share between tenants: the claim ranks each tenant's due jobs in its own order (priority, due time, age), so
-- it reads them tenant by tenant from this index rather than sorting every queued job.
CREATE INDEX jobs_tenant_due ON jobs (tenant, priority, run_at, created_at, id) WHERE state = 'queued';
