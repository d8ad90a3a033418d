import HeraldCore
import HeraldStorage
import PostgresNIO

/// The SQL of every step of the publish state machine (``Transition``) on PostgreSQL, in one place: the twin of the
/// SQLite backend's `Transitions`, set-based so that a claim, a promotion or a reclaim of many jobs is one statement
/// per table.
///
/// Each function moves jobs together with their posts, the posts' media and the jobs' uploads, binding the states the
/// domain names; every job it moves gets a new `version`, recorded for the announcement at commit (and notified to
/// the other replicas by the `jobs` trigger). Callers check leases and outcomes first, under `FOR UPDATE`.
enum PostgresTransitions {
    // MARK: New jobs

    /// A post to create: its new ids, its tenant, what was asked and when.
    struct NewPost: Sendable {
        let postID: PostID
        let jobID: JobID
        let tenant: Tenant
        let request: PostRequest
        let now: Timestamp
    }

    /// A job as a statement left it, with its version and tenant: what a status poll would read of it then.
    struct WrittenJob: Sendable {
        let job: Job
        let version: Int
        let tenant: Tenant
    }

    /// A post as its creation left it, and its job's version.
    struct Created: Sendable {
        let postAndJob: PostAndJob
        let version: Int
    }

    /// New posts (queued, or scheduled while `scheduledAt > now`), each with its first job and its uploads, its media
    /// attached in order, in ONE statement (its own transaction when run alone: ``PostgresStorage/autocommit(_:)``);
    /// the posts and jobs as created, by post. A post is left out, writing nothing of it, when a medium it lists is
    /// unknown, another tenant's, attached already or listed by another post of `posts` (each is locked first: two
    /// posts listing one medium take turns, and the second finds it attached).
    static func create(_ transaction: Transaction, _ posts: [NewPost]) async throws -> [PostID: Created] {
        guard !posts.isEmpty else { return [:] }
        let schedules = posts.map { $0.request.initialSchedule(now: $0.now) }
        let listed = posts.flatMap { post in
            post.request.mediaIDs.enumerated().map { (post: post.postID.rawValue, id: $0.element.rawValue, position: $0.offset) }
        }
        // The sub-statements share one snapshot: each names the values it needs, none reads another's rows but through
        // RETURNING; the foreign keys are checked once the whole statement has run.
        let rows = try await transaction.rows(
            Create.self,
            """
            WITH given AS (
                SELECT * FROM unnest(
                    \(posts.map(\.postID.rawValue))::text[], \(posts.map(\.jobID.rawValue))::text[], \(posts.map(\.tenant.rawValue))::text[],
                    \(posts.map(\.request.text))::text[], \(schedules.map(\.step.post.rawValue))::text[],
                    \(posts.map(\.request.priority.rawValue))::text[], \(posts.map(\.request.priority.rank))::bigint[],
                    \(posts.map { $0.request.scheduledAt != nil })::boolean[], \(posts.map { $0.request.scheduledAt ?? $0.now })::timestamptz[],
                    \(schedules.map(\.step.job.rawValue))::text[], \(schedules.map(\.runAt))::timestamptz[], \(posts.map(\.now))::timestamptz[],
                    \(posts.map(\.request.mediaIDs.count))::bigint[], \(schedules.map { ($0.step.uploads?.to ?? .pending).rawValue })::text[],
                    \(posts.map { $0.request.traceparent ?? "" })::text[])
                    AS given (post_id, job_id, tenant, text, post_state, priority, rank, has_scheduled_at, scheduled_at, job_state, run_at,
                              created_at, media_count, upload_state, traceparent)
            ), listed AS (
                SELECT * FROM unnest(\(listed.map(\.post))::text[], \(listed.map(\.id))::text[], \(listed.map(\.position))::bigint[])
                    AS listed (post_id, id, position)
            ), locked AS MATERIALIZED (
                -- Found by id (the primary key, whatever the table's size), free or not, in one order for every
                -- statement that locks media; a row locked meanwhile is read as its locker left it.
                SELECT id, post_id, tenant FROM media WHERE id = ANY(\(listed.map(\.id))::text[]) ORDER BY id FOR UPDATE
            ), ready AS MATERIALIZED (
                SELECT given.post_id FROM given
                LEFT JOIN listed ON listed.post_id = given.post_id
                LEFT JOIN locked ON locked.id = listed.id AND locked.post_id IS NULL AND locked.tenant = given.tenant
                    AND NOT EXISTS (SELECT 1 FROM listed AS other WHERE other.id = listed.id AND other.post_id <> listed.post_id)
                GROUP BY given.post_id, given.media_count
                HAVING count(locked.id) = given.media_count
            ), chosen AS MATERIALIZED (
                SELECT given.* FROM given JOIN ready ON ready.post_id = given.post_id
            ), post AS (
                INSERT INTO posts (id, tenant, text, state, priority, scheduled_at, created_at, job_id)
                SELECT post_id, tenant, text, post_state, priority, CASE WHEN has_scheduled_at THEN scheduled_at END, created_at, job_id
                FROM chosen
            ), attached AS (
                UPDATE media SET post_id = listed.post_id, position = listed.position
                FROM listed JOIN ready ON ready.post_id = listed.post_id WHERE media.id = listed.id
                RETURNING media.post_id AS media_post_id, media.id AS media_id, media.content_type, media.size, media.sha256,
                    media.description, media.state AS media_state, media.url, media.created_at AS media_created_at, media.position
            ), job AS (
                INSERT INTO jobs (id, tenant, post_id, state, priority, run_at, created_at, traceparent)
                SELECT job_id, tenant, post_id, job_state, rank, run_at, created_at, nullif(traceparent, '') FROM chosen
                RETURNING \(unescaped: PostgresRows.jobColumns)
            ), uploads AS (
                INSERT INTO uploads (job_id, media_id, state)
                SELECT chosen.job_id, listed.id, chosen.upload_state FROM listed JOIN chosen ON chosen.post_id = listed.post_id
            )
            SELECT job.*, attached.* FROM job LEFT JOIN attached ON attached.media_post_id = job.post_id ORDER BY job.post_id, attached.position
            """)
        var created: [PostID: Created] = [:]
        let asked = Dictionary(uniqueKeysWithValues: zip(posts, schedules).map { ($0.0.postID, (post: $0.0, step: $0.1.step)) })
        for group in try PostgresRows.runs(rows, by: "post_id") {
            let first = group[group.startIndex]
            let postID: PostID = try first("post_id")
            guard let (post, step) = asked[postID] else { throw UnreadableRow(table: "posts", id: postID.rawValue, reason: "was not asked for") }
            transaction.recorder.record(try Transaction.change(first))
            let uploadState = step.uploads?.to ?? .pending
            var media: [Media] = []
            var uploads: [Job.Upload] = []
            for row in group {
                guard let id: MediaID = try row("media_id") else { continue }  // a post without media: one row, its job's
                guard let type = MediaType(rawValue: try row("content_type")), let state = MediaState(rawValue: try row("media_state")) else {
                    throw UnreadableRow(table: "media", id: id.rawValue)
                }
                let size: Int64 = try row("size")
                media.append(
                    Media(
                        id: id, contentType: type, size: size, sha256: try row("sha256"), description: try row("description"), state: state,
                        url: try row("url"), postID: postID, createdAt: try row("media_created_at")))
                uploads.append(Job.Upload(mediaID: id, state: uploadState, size: Int(size)))
            }
            guard let job = Job(columns: JobRow(columns: first), uploads: uploads) else {
                throw UnreadableRow(table: "jobs", id: post.jobID.rawValue)
            }
            let postAndJob = PostAndJob(
                post: Post(
                    id: postID, text: post.request.text, state: step.post, media: media, jobID: post.jobID, priority: post.request.priority,
                    scheduledAt: post.request.scheduledAt, createdAt: post.now),
                job: job)
            created[postID] = Created(postAndJob: postAndJob, version: try first("version"))
        }
        return created
    }

    /// A failed or cancelled post gets a new job that runs now, with fresh uploads; the post points at it.
    static func republish(
        _ transaction: Transaction, postID: PostID, priority: Priority, jobID: JobID, traceparent: String?, now: Timestamp
    ) async throws {
        try await insertJob(
            transaction, .enqueue, jobID: jobID, postID: postID, priority: priority, runAt: now, traceparent: traceparent, now: now)
        try await transaction.run(
            "UPDATE posts SET state = \(Transition.enqueue.post.rawValue), published_at = NULL, job_id = \(jobID) WHERE id = \(postID)")
        // Its objects are wanted again (the new job waits for a DELETE already under way: see ObjectCleaner).
        try await transaction.run(
            "DELETE FROM object_deletions WHERE media_id IN (SELECT id FROM media WHERE post_id = \(postID))")
    }

    // MARK: The runner's steps

    /// Scheduled jobs whose `run_at <= now` become queued, with their posts. Returns how many.
    static func promoteDue(_ transaction: Transaction, now: Timestamp) async throws -> Int {
        let moved = try await transaction.changeJobs(
            """
            UPDATE jobs SET state = \(Transition.promote.job.rawValue), version = version + 1
            WHERE id IN (SELECT id FROM jobs WHERE state = '\(unescaped: JobState.scheduled.rawValue)' AND run_at <= \(now) FOR UPDATE SKIP LOCKED)
            RETURNING \(unescaped: Transaction.changed), post_id
            """)
        try await follow(transaction, .promote, moved)
        return moved.count
    }

    /// Up to `limit` due queued jobs, in fair-share order (``JobRepository/claim(upTo:runner:leaseUntil:now:tenantCap:)``),
    /// at most `tenantCap` of a tenant's running, run leased to `runner` until `leaseUntil`, with their posts, media
    /// and uploads moved as ``Transition/claim`` says, in ONE statement; their attempts count up; `started_at` is set
    /// once. Jobs another transaction holds are skipped, not waited for: replicas claiming at once take different jobs
    /// (the cap is exact only under ``claimLock``). Returns them in claim order with their new attempt and their media
    /// in order.
    static func claim(
        _ transaction: Transaction, upTo limit: Int, runner: String, leaseUntil: Timestamp, now: Timestamp, tenantCap: Int?
    ) async throws -> [(claimed: ClaimedJob, written: WrittenJob)] {
        let step = Transition.claim
        guard let mediaState = step.media, let uploads = step.uploads, uploads.from.isEmpty, uploads.to == .pending else {
            preconditionFailure("a claim moves the media, and starts every upload afresh")
        }
        // The states as literals where the partial indexes must match (a bound value cannot prove their predicate).
        // MATERIALIZED: the LIMIT and the locks apply to the chosen rows once, before the update (a plan that
        // re-ran the subquery per row could update more rows than the LIMIT).
        let queued = JobState.queued.rawValue
        let rows = try await transaction.rows(
            Claim.self,
            """
            WITH RECURSIVE queued AS (
                -- Each tenant's first queued job, one index probe each (a skip scan of jobs_tenant_due).
                (SELECT tenant, priority, run_at, created_at, id FROM jobs WHERE state = '\(unescaped: queued)'
                 ORDER BY tenant, priority, run_at, created_at, id LIMIT 1)
                UNION ALL
                SELECT following.* FROM queued CROSS JOIN LATERAL (
                    SELECT tenant, priority, run_at, created_at, id FROM jobs
                    WHERE state = '\(unescaped: queued)' AND tenant > queued.tenant
                    ORDER BY tenant, priority, run_at, created_at, id LIMIT 1
                ) AS following
            ), heads AS (
                -- Each tenant's first due job: its first queued one, unless that is not due yet (a clock gone back).
                SELECT tenant, priority, run_at, created_at, id FROM queued WHERE run_at <= \(now)
                UNION ALL
                SELECT due.* FROM queued CROSS JOIN LATERAL (
                    SELECT tenant, priority, run_at, created_at, id FROM jobs
                    WHERE state = '\(unescaped: queued)' AND tenant = queued.tenant AND run_at <= \(now)
                    ORDER BY priority, run_at, created_at, id LIMIT 1
                ) AS due
                WHERE queued.run_at > \(now)
            ), running AS MATERIALIZED (
                SELECT tenant, count(*) AS jobs FROM jobs WHERE state = '\(unescaped: JobState.running.rawValue)' GROUP BY tenant
            ), chosen AS MATERIALIZED (
                -- The tenants whose first due job is among the `limit` best first jobs (their turn: the tenant's running
                -- jobs plus one): any other tenant has every job behind `limit` better ones.
                SELECT heads.tenant, coalesce(running.jobs, 0) AS running
                FROM heads LEFT JOIN running ON running.tenant = heads.tenant
                WHERE \(tenantCap)::bigint IS NULL OR coalesce(running.jobs, 0) < \(tenantCap)::bigint
                ORDER BY heads.priority, coalesce(running.jobs, 0), heads.run_at, heads.created_at, heads.id
                LIMIT \(limit)
            ), turns AS MATERIALIZED (
                -- A job's turn: its tenant's running jobs plus its rank among the tenant's due ones. One ranked past
                -- `limit` has `limit` of its own tenant before it, so each tenant's first `limit` are enough.
                SELECT first.*, chosen.running + first.rank AS turn
                FROM chosen
                CROSS JOIN LATERAL (
                    SELECT jobs.id, jobs.priority, jobs.run_at, jobs.created_at,
                        row_number() OVER (ORDER BY jobs.priority, jobs.run_at, jobs.created_at, jobs.id) AS rank
                    FROM jobs WHERE jobs.state = '\(unescaped: queued)' AND jobs.tenant = chosen.tenant AND jobs.run_at <= \(now)
                    ORDER BY jobs.priority, jobs.run_at, jobs.created_at, jobs.id
                    LIMIT \(limit)
                ) AS first
            ), due AS MATERIALIZED (
                SELECT jobs.id, turns.turn FROM turns JOIN jobs ON jobs.id = turns.id
                WHERE jobs.state = '\(unescaped: queued)' AND (\(tenantCap)::bigint IS NULL OR turns.turn <= \(tenantCap)::bigint)
                ORDER BY turns.priority, turns.turn, turns.run_at, turns.created_at, turns.id
                LIMIT \(limit)
                FOR UPDATE OF jobs SKIP LOCKED
            ), moved AS (
                UPDATE jobs SET state = \(step.job.rawValue), version = version + 1, attempt = attempt + 1,
                    locked_by = \(runner), locked_until = \(leaseUntil), started_at = coalesce(started_at, \(now))
                FROM due WHERE jobs.id = due.id
                RETURNING \(unescaped: PostgresRows.qualifiedJobColumns), jobs.tenant AS job_tenant, jobs.traceparent, due.turn
            ), posts_moved AS (
                UPDATE posts SET state = \(step.post.rawValue), published_at = NULL FROM moved WHERE posts.id = moved.post_id
            ), media_moved AS (
                UPDATE media SET state = \(mediaState.rawValue), url = CASE WHEN \(mediaState == .staged) THEN NULL ELSE url END
                FROM moved WHERE media.post_id = moved.post_id
                RETURNING media.id, media.staging_path, media.size, media.sha256, media.content_type, media.position
            ), uploads_moved AS (
                -- A fresh run forgets the last attempt's error and bytes; a first run's uploads are fresh already, and
                -- are not written again.
                UPDATE uploads SET state = \(uploads.to.rawValue), error = NULL, bytes_sent = 0
                FROM moved WHERE uploads.job_id = moved.id
                    AND (uploads.state <> \(uploads.to.rawValue) OR uploads.error IS NOT NULL OR uploads.bytes_sent <> 0)
            ), uploads_read AS (
                -- The statement's snapshot: the attempts, which the update above leaves as they are.
                SELECT uploads.job_id, uploads.media_id, uploads.attempts FROM uploads JOIN moved ON uploads.job_id = moved.id
            )
            SELECT moved.*, media_moved.id AS media_id, media_moved.staging_path, media_moved.size, media_moved.sha256,
                media_moved.content_type, uploads_read.attempts AS upload_attempts
            FROM moved LEFT JOIN (uploads_read JOIN media_moved ON media_moved.id = uploads_read.media_id) ON uploads_read.job_id = moved.id
            ORDER BY moved.priority, moved.turn, moved.run_at, moved.created_at, moved.id, media_moved.position, media_moved.id
            """)
        return try PostgresRows.runs(rows, by: "id").map { group in
            let first = group[group.startIndex]
            let jobID: JobID = try first("id")
            transaction.recorder.record(try Transaction.change(first))
            var media: [ClaimedMedia] = []
            for row in group {
                guard let mediaID: MediaID = try row("media_id") else { continue }  // a post without media: one row, its job's
                guard let type = MediaType(rawValue: try row("content_type")) else { throw UnreadableRow(table: "media", id: mediaID.rawValue) }
                media.append(
                    ClaimedMedia(
                        mediaID: mediaID, stagingPath: try row("staging_path"), size: try row("size"), sha256: try row("sha256"),
                        contentType: type, attempts: try row("upload_attempts")))
            }
            // The job as a poll would read it now: its uploads start afresh.
            let uploads = media.map { Job.Upload(mediaID: $0.mediaID, state: uploads.to, attempts: $0.attempts, size: $0.size) }
            guard let job = Job(columns: JobRow(columns: first), uploads: uploads) else { throw UnreadableRow(table: "jobs", id: jobID.rawValue) }
            return (
                claimed: ClaimedJob(
                    jobID: jobID, postID: try first("post_id"), runner: runner, attempt: try first("attempt"), media: media,
                    traceparent: try first("traceparent")),
                written: WrittenJob(job: job, version: try first("version"), tenant: Tenant(uncheckedName: try first("job_tenant")))
            )
        }
    }

    /// The post is published: each medium gets its stored object's URL and key; the job succeeded.
    ///
    /// Throws, writing nothing, when `objects` lacks one of the job's media: a post is never half-published.
    static func commit(
        _ transaction: Transaction, jobID: JobID, postID: PostID, objects: [MediaID: StoredObject], now: Timestamp
    ) async throws {
        let mediaIDs: [MediaID] = try await transaction.rows("SELECT media_id FROM uploads WHERE job_id = \(jobID)").map { try $0("media_id") }
        var ids: [String] = []
        var keys: [String] = []
        var urls: [String] = []
        for mediaID in mediaIDs {
            guard let stored = objects[mediaID] else {
                throw UnreadableRow(table: "media", id: mediaID.rawValue, reason: "has no stored object: the post cannot be committed")
            }
            ids.append(mediaID.rawValue)
            keys.append(stored.key)
            urls.append(stored.url)
        }
        try await transaction.run(
            """
            UPDATE media SET url = stored.url, object_key = stored.key
            FROM unnest(\(ids)::text[], \(keys)::text[], \(urls)::text[]) AS stored (id, key, url)
            WHERE media.id = stored.id
            """)
        let moved = try await transaction.changeJobs(
            """
            UPDATE jobs SET state = \(Transition.commit.job.rawValue), version = version + 1, finished_at = \(now),
                locked_by = NULL, locked_until = NULL, error_code = NULL, error_message = NULL, error_media_id = NULL
            WHERE id = \(jobID) AND state = ANY(\(Transition.commit.jobFrom.map(\.rawValue)))
            RETURNING \(unescaped: Transaction.changed), post_id
            """)
        try await follow(transaction, .commit, moved, publishedAt: now)
    }

    /// A runner's commit: its lease, the objects stored, the uploads as it set them, and when.
    struct Commit: Sendable {
        let lease: JobLease
        let objects: [MediaID: StoredObject]
        let uploads: [MediaID: UploadProgress.Upload]
        let now: Timestamp
    }

    /// Usual commits in ONE statement (its own transaction when run alone): for each, the lease holds, no cancel was
    /// asked for, its objects cover every upload, and its tenant has no webhook for the event (whose body is written in
    /// Swift). Publishes each post as ``commit(_:jobID:postID:objects:now:)`` does, with the runner's uploads written
    /// in; returns the jobs as committed. A commit left out wrote nothing: its caller takes the long way, which says why.
    static func commit(_ transaction: Transaction, _ commits: [Commit]) async throws -> [JobID: WrittenJob] {
        guard !commits.isEmpty else { return [:] }
        let step = Transition.commit
        guard let mediaState = step.media, let uploadsTo = step.uploads?.to, let event = WebhookEventType(ending: step.job) else {
            preconditionFailure("a commit moves the media and uploads, and ends the job")
        }
        let stored = commits.flatMap { commit in
            commit.objects.sorted { $0.key < $1.key }.map { (job: commit.lease.jobID.rawValue, media: $0.key.rawValue, object: $0.value) }
        }
        let given = commits.flatMap { commit in
            commit.uploads.sorted { $0.key < $1.key }.map { (job: commit.lease.jobID.rawValue, media: $0.key.rawValue, upload: $0.value) }
        }
        let rows = try await transaction.rows(
            Committing.self,
            """
            WITH lease AS (
                SELECT * FROM unnest(
                    \(commits.map(\.lease.jobID.rawValue))::text[], \(commits.map(\.lease.runner))::text[], \(commits.map(\.lease.attempt))::bigint[],
                    \(commits.map(\.now))::timestamptz[])
                    AS lease (job_id, runner, attempt, finished_at)
            ), stored AS (
                SELECT * FROM unnest(
                    \(stored.map(\.job))::text[], \(stored.map(\.media))::text[], \(stored.map(\.object.key))::text[], \(stored.map(\.object.url))::text[])
                    AS stored (job_id, media_id, key, url)
            ), given AS (
                SELECT * FROM unnest(
                    \(given.map(\.job))::text[], \(given.map(\.media))::text[], \(given.map(\.upload.state.rawValue))::text[],
                    \(given.map(\.upload.attempts))::bigint[], \(given.map(\.upload.bytes))::bigint[])
                    AS given (job_id, media_id, state, attempts, bytes)
            ), locked AS MATERIALIZED (
                -- In id order, as every statement that locks several jobs: two of them never wait for each other.
                SELECT id FROM jobs WHERE id = ANY(\(commits.map(\.lease.jobID.rawValue))::text[]) ORDER BY id FOR UPDATE
            ), moved AS (
                UPDATE jobs SET state = \(step.job.rawValue), version = version + 1, finished_at = lease.finished_at,
                    locked_by = NULL, locked_until = NULL, error_code = NULL, error_message = NULL, error_media_id = NULL
                FROM lease JOIN locked ON locked.id = lease.job_id
                WHERE jobs.id = lease.job_id AND jobs.state = ANY(\(step.jobFrom.map(\.rawValue))) AND jobs.locked_by = lease.runner
                    AND jobs.attempt = lease.attempt AND NOT jobs.cancel_requested
                    AND NOT EXISTS (
                        SELECT 1 FROM uploads WHERE uploads.job_id = jobs.id
                            AND NOT EXISTS (SELECT 1 FROM stored WHERE stored.job_id = uploads.job_id AND stored.media_id = uploads.media_id))
                    AND NOT EXISTS (
                        SELECT 1 FROM webhooks WHERE webhooks.tenant = jobs.tenant AND NOT webhooks.disabled AND webhooks.events ? \(event.rawValue))
                RETURNING \(unescaped: PostgresRows.qualifiedJobColumns), jobs.tenant AS job_tenant
            ), published AS (
                UPDATE posts SET state = \(step.post.rawValue), published_at = moved.finished_at FROM moved WHERE posts.id = moved.post_id
            ), media_published AS (
                UPDATE media SET state = \(mediaState.rawValue), url = stored.url, object_key = stored.key
                FROM moved JOIN stored ON stored.job_id = moved.id WHERE media.id = stored.media_id AND media.post_id = moved.post_id
            ), uploaded AS (
                UPDATE uploads SET state = \(uploadsTo.rawValue), error = NULL, attempts = coalesce(given.attempts, uploads.attempts),
                    bytes_sent = CASE WHEN given.media_id IS NULL THEN uploads.bytes_sent
                                      WHEN given.state = \(UploadState.uploaded.rawValue) THEN media.size ELSE given.bytes END
                FROM moved JOIN media ON media.post_id = moved.post_id
                    LEFT JOIN given ON given.job_id = moved.id AND given.media_id = media.id
                WHERE uploads.job_id = moved.id AND uploads.media_id = media.id
                RETURNING uploads.job_id AS upload_job_id, uploads.media_id, uploads.attempts AS upload_attempts, uploads.bytes_sent,
                    media.size, media.position
            )
            SELECT moved.*, uploaded.* FROM moved LEFT JOIN uploaded ON uploaded.upload_job_id = moved.id ORDER BY moved.id, uploaded.position
            """)
        var committed: [JobID: WrittenJob] = [:]
        for group in try PostgresRows.runs(rows, by: "id") {
            let first = group[group.startIndex]
            let jobID: JobID = try first("id")
            transaction.recorder.record(try Transaction.change(first))
            let done: [Job.Upload] = try group.compactMap { row in
                guard let id: MediaID = try row("media_id") else { return nil }  // a post without media: one row, its job's
                return Job.Upload(
                    mediaID: id, state: uploadsTo, attempts: try row("upload_attempts"), size: try row("size"), bytesSent: try row("bytes_sent"))
            }
            guard let job = Job(columns: JobRow(columns: first), uploads: done) else { throw UnreadableRow(table: "jobs", id: jobID.rawValue) }
            committed[jobID] = WrittenJob(job: job, version: try first("version"), tenant: Tenant(uncheckedName: try first("job_tenant")))
        }
        return committed
    }

    /// The job failed with `error` (or was cancelled, with `error` saying so): finished, unlocked; what it may have
    /// stored is deleted again later, durably (the clean-up's outbox).
    static func end(
        _ transaction: Transaction, _ step: Transition, jobID: JobID, postID: PostID, error: Job.Failure, now: Timestamp
    ) async throws {
        precondition(step == .fail || step == .cancel, "a job ends with an error only by failing or being cancelled")
        let moved = try await transaction.changeJobs(
            """
            UPDATE jobs SET state = \(step.job.rawValue), version = version + 1, cancel_requested = cancel_requested OR \(step == .cancel),
                finished_at = \(now), locked_by = NULL, locked_until = NULL,
                error_code = \(error.code.rawValue), error_message = \(error.message), error_media_id = \(error.mediaID)
            WHERE id = \(jobID) AND state = ANY(\(step.jobFrom.map(\.rawValue)))
            RETURNING \(unescaped: Transaction.changed), post_id
            """)
        try await follow(transaction, step, moved)
        try await transaction.run(
            """
            INSERT INTO object_deletions (media_id, content_type, due_at, attempts, last_error)
            SELECT id, content_type, \(now.adding(milliseconds: PendingObjectDeletion.settle)), 0, NULL FROM media WHERE post_id = \(postID)
            ON CONFLICT (media_id) DO UPDATE SET due_at = excluded.due_at, attempts = 0, last_error = NULL
            """)
    }

    /// Running jobs back in the queue, to run again from the start; `clearCancel` forgets a cancel request. Returns
    /// their ids.
    @discardableResult
    static func putBack(_ transaction: Transaction, jobIDs: [JobID], clearCancel: Bool) async throws -> [JobID] {
        let moved = try await transaction.changeJobs(
            """
            UPDATE jobs SET state = \(Transition.putBack.job.rawValue), version = version + 1, locked_by = NULL, locked_until = NULL,
                cancel_requested = cancel_requested AND NOT \(clearCancel)
            WHERE id = ANY(\(jobIDs.map(\.rawValue))) AND state = ANY(\(Transition.putBack.jobFrom.map(\.rawValue)))
            RETURNING \(unescaped: Transaction.changed), post_id
            """)
        try await follow(transaction, .putBack, moved)
        return try moved.map { try $0("id") }.sorted()
    }

    // MARK: Changes within a state

    /// A running job is asked to stop (its runner hears the change, wherever it runs, and cancels it).
    static func requestCancel(_ transaction: Transaction, jobID: JobID) async throws {
        try await transaction.changeJobs(
            "UPDATE jobs SET cancel_requested = true, version = version + 1 WHERE id = \(jobID) RETURNING \(unescaped: Transaction.changed)")
    }

    /// Running jobs' uploads as their runners set them so far, each written only while its job's lease holds; the
    /// jobs written get a new version (a change every replica hears). Returns the jobs whose leases held.
    static func recordLiveUploads(_ transaction: Transaction, _ pending: [LiveUploads.Pending]) async throws -> Set<JobID> {
        guard !pending.isEmpty else { return [] }
        let moved = try await transaction.changeJobs(
            """
            WITH given AS (
                SELECT * FROM unnest(
                    \(pending.map(\.lease.jobID.rawValue))::text[], \(pending.map(\.lease.runner))::text[],
                    \(pending.map(\.lease.attempt))::bigint[], \(pending.map(\.mediaID.rawValue))::text[],
                    \(pending.map(\.upload.state.rawValue))::text[], \(pending.map(\.upload.attempts))::bigint[],
                    \(pending.map { $0.upload.error ?? "" })::text[], \(pending.map { $0.upload.error != nil })::boolean[],
                    \(pending.map(\.upload.bytes))::bigint[])
                    AS given (job_id, runner, lease_attempt, media_id, state, attempts, error, has_error, bytes)
            ), locked AS MATERIALIZED (
                -- In id order, as every statement that locks several jobs: two of them never wait for each other.
                SELECT id FROM jobs WHERE id IN (SELECT job_id FROM given) ORDER BY id FOR UPDATE
            ), held AS (
                UPDATE jobs SET version = version + 1
                FROM (SELECT DISTINCT job_id, runner, lease_attempt FROM given) AS lease JOIN locked ON locked.id = lease.job_id
                WHERE jobs.id = lease.job_id AND jobs.locked_by = lease.runner AND jobs.attempt = lease.lease_attempt
                    AND jobs.state = \(JobState.running.rawValue)
                RETURNING \(unescaped: Transaction.changed)
            ), written AS (
                UPDATE uploads SET state = given.state, attempts = given.attempts,
                    error = CASE WHEN given.has_error THEN given.error END,
                    bytes_sent = CASE WHEN given.state = \(UploadState.uploaded.rawValue) THEN media.size ELSE given.bytes END
                FROM given JOIN held ON held.id = given.job_id JOIN media ON media.id = given.media_id
                WHERE uploads.job_id = given.job_id AND uploads.media_id = given.media_id
                RETURNING uploads.job_id
            )
            SELECT id, version, state, cancel_requested FROM held
            """)
        return Set(try moved.map { try $0("id") })
    }

    /// The uploads as the runner last set them (kept in memory until now: ``UploadProgress``), written in its job's
    /// final transaction before the step that ends it. An uploaded medium counts all its bytes.
    static func recordUploads(_ transaction: Transaction, jobID: JobID, _ uploads: [MediaID: UploadProgress.Upload]) async throws {
        guard !uploads.isEmpty else { return }
        let entries = uploads.sorted { $0.key < $1.key }
        let ids = entries.map(\.key.rawValue)
        let states = entries.map(\.value.state.rawValue)
        let attempts = entries.map(\.value.attempts)
        let errors = entries.map { $0.value.error ?? "" }
        let hasError = entries.map { $0.value.error != nil }
        let bytes = entries.map(\.value.bytes)
        try await transaction.run(
            """
            UPDATE uploads SET state = given.state, attempts = given.attempts,
                error = CASE WHEN given.has_error THEN given.error END,
                bytes_sent = CASE WHEN given.state = \(UploadState.uploaded.rawValue) THEN media.size ELSE given.bytes END
            FROM unnest(\(ids)::text[], \(states)::text[], \(attempts)::bigint[], \(errors)::text[], \(hasError)::boolean[], \(bytes)::bigint[])
                AS given (media_id, state, attempts, error, has_error, bytes),
                media
            WHERE uploads.job_id = \(jobID) AND uploads.media_id = given.media_id AND media.id = given.media_id
            """)
    }

    // MARK: Implementation

    /// The hot statements' names (``HotStatement``).
    enum Create: HotStatementSite {}
    enum Claim: HotStatementSite {}
    enum Committing: HotStatementSite {}

    /// Inserts a job in `step`'s state, of its post's tenant, with one upload per attached medium of the post.
    private static func insertJob(
        _ transaction: Transaction, _ step: Transition, jobID: JobID, postID: PostID, priority: Priority, runAt: Timestamp,
        traceparent: String?, now: Timestamp
    ) async throws {
        try await transaction.changeJobs(
            """
            INSERT INTO jobs (id, tenant, post_id, state, priority, run_at, created_at, traceparent)
            SELECT \(jobID), tenant, id, \(step.job.rawValue), \(priority.rank), \(runAt), \(now), \(traceparent) FROM posts WHERE id = \(postID)
            RETURNING \(unescaped: Transaction.changed)
            """)
        if let uploads = step.uploads {
            try await transaction.run(
                "INSERT INTO uploads (job_id, media_id, state) SELECT \(jobID), id, \(uploads.to.rawValue) FROM media WHERE post_id = \(postID)")
        }
    }

    /// Moves the posts, media and uploads of the jobs `moved` (rows of `id` and `post_id`) as `step` says, once the
    /// jobs themselves moved; a job that ends tells its webhooks in the same transaction (the outbox).
    private static func follow(_ transaction: Transaction, _ step: Transition, _ moved: [Columns], publishedAt: Timestamp? = nil) async throws {
        guard !moved.isEmpty else { return }
        let jobIDs: [String] = try moved.map { try $0("id") }
        let postIDs: [String] = try moved.map { try $0("post_id") }
        // A post is published exactly when it has `published_at`: the commit stamps both at once.
        precondition((step.post == .published) == (publishedAt != nil), "only a commit publishes, with its time")
        try await transaction.run("UPDATE posts SET state = \(step.post.rawValue), published_at = \(publishedAt) WHERE id = ANY(\(postIDs))")
        if let media = step.media {
            // A staged medium has no URL: it is published only by a commit.
            try await transaction.run(
                """
                UPDATE media SET state = \(media.rawValue), url = CASE WHEN \(media == .staged) THEN NULL ELSE url END
                WHERE post_id = ANY(\(postIDs))
                """)
        }
        if let uploads = step.uploads {
            // A fresh run, or a success, forgets the last attempt's error and bytes; a stop keeps them.
            let forgetsError = uploads.to == .pending || uploads.to == .uploaded
            let forgetsBytes = uploads.to == .pending
            try await transaction.run(
                """
                UPDATE uploads SET state = \(uploads.to.rawValue),
                    error = CASE WHEN \(forgetsError) THEN NULL ELSE error END,
                    bytes_sent = CASE WHEN \(forgetsBytes) THEN 0 ELSE bytes_sent END
                WHERE job_id = ANY(\(jobIDs)) AND (\(uploads.from.isEmpty) OR state = ANY(\(uploads.from.map(\.rawValue))))
                """)
        }
        if step.job.isDone {
            for row in moved { try await PostgresWebhookRepository.enqueue(transaction, jobID: try row("id"), postID: try row("post_id")) }
        }
    }
}
