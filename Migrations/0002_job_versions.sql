-- Change events: every committed change to a job or to one of its uploads bumps the job's `version`, and the
-- repository that made the change announces (job id, version) once the transaction has committed. Long-polls,
-- and later Server-Sent Events (whose event ids they are) and webhooks, are woken by these events.
--
-- Priority keeps two encodings on purpose: `posts.priority` is the API's word ('low', 'normal', 'high'), what a
-- person reading the table expects; `jobs.priority` is a rank (0 = high) because the claim query's index
-- (`jobs_claim`) must order by it, and text would sort 'high' < 'low' < 'normal'. The one mapping between them is
-- `Priority.rank` in HeraldCore; both are written from the same `Priority` value in one transaction.
ALTER TABLE jobs ADD COLUMN version INTEGER NOT NULL DEFAULT 0 CHECK (version >= 0);
