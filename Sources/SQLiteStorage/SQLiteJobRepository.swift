import GRDB
import HeraldCore
import HeraldStorage

/// Publish jobs: read and cancelled by clients, claimed, leased and finished by the runner.
///
/// Every method that writes runs one write transaction, so a job, its post, its media and its uploads always move
/// together; the runner's methods check the lease (`locked_by` and `attempt`) inside that transaction.
struct SQLiteJobRepository: JobRepository {

    private static let cancelledMessage = "The job was cancelled."
    private static let cancelledFailure = Job.Failure(code: .cancelled, message: cancelledMessage)

    let storage: SQLiteStorage

    // MARK: Reading

    /// The job with this id, its uploads in media position order; nil if `tenant` has none.
    func find(id: JobID, tenant: Tenant) async throws -> Job? {
        guard var job = try await storage.pool.read({ db in try Rows.job(db, id: id, tenant: tenant) }) else { return nil }
        storage.uploadProgress.apply(to: &job)
        return job
    }

    /// The job with its live bytes and its event id (``UploadProgress/eventID(version:step:)``), which grows with
    /// every committed change and byte event; nil if `tenant` has none.
    func snapshot(id: JobID, tenant: Tenant) async throws -> JobSnapshot? {
        let read = try await storage.pool.read { db -> (job: Job, version: Int)? in
            guard
                let row = try Row.fetchOne(
                    db.cachedStatement(sql: "SELECT * FROM jobs WHERE id = ? AND tenant = ?"), arguments: [id, tenant.rawValue]),
                let job = try Rows.jobs(db, [row]).first
            else { return nil }
            return (job, row["version"])
        }
        return read.map { storage.uploadProgress.snapshot($0.job, version: $0.version) }
    }

    /// The tenant's jobs not yet done, oldest first, with their event ids: what a new event stream starts with.
    func activeSnapshots(tenant: Tenant) async throws -> [JobSnapshot] {
        let read = try await storage.pool.read { db in
            let rows = try Row.fetchAll(
                db.cachedStatement(
                    sql: """
                        SELECT * FROM jobs WHERE tenant = ? AND state IN (\(databaseQuestionMarks(count: JobState.active.count)))
                        ORDER BY created_at, id
                        """
                ),
                arguments: [tenant.rawValue] + StatementArguments(JobState.active.map(\.rawValue))
            )
            return zip(try Rows.jobs(db, rows), rows.map { $0["version"] as Int }).map { ($0, $1) }
        }
        return read.map { storage.uploadProgress.snapshot($0, version: $1) }
    }

    /// One page of jobs, newest first (`created_at DESC, id DESC`), optionally of one state, strictly after `cursor`.
    func list(tenant: Tenant, state: JobState?, limit: Int, after cursor: HeraldCore.Cursor?) async throws -> Page<Job> {
        var page = try await storage.pool.read { db in
            let rows = try Rows.listRows(db, table: "jobs", tenant: tenant, state: state?.rawValue, limit: limit, after: cursor)
            return Page(fetched: try Rows.jobs(db, rows), limit: limit, cursor: \.cursor)
        }
        for index in page.data.indices { storage.uploadProgress.apply(to: &page.data[index]) }
        return page
    }

    /// How many jobs are running, queued and scheduled (for `/v1/queue` and metrics).
    func counts() async throws -> (running: Int, queued: Int, scheduled: Int) {
        try await storage.pool.read { db in
            let rows = try Row.fetchAll(
                db.cachedStatement(
                    sql:
                        "SELECT state, COUNT(*) AS count FROM jobs WHERE state IN (\(databaseQuestionMarks(count: JobState.active.count))) GROUP BY state"
                ),
                arguments: StatementArguments(JobState.active.map(\.rawValue))
            )
            var counts: [JobState: Int] = [:]
            for row in rows { JobState(rawValue: row["state"]).map { counts[$0] = row["count"] } }
            return (counts[.running] ?? 0, counts[.queued] ?? 0, counts[.scheduled] ?? 0)
        }
    }

    func busiestTenants(limit: Int) async throws -> [TenantJobCounts] {
        try await storage.pool.read { db in
            try Row.fetchAll(
                db.cachedStatement(
                    sql: """
                        SELECT tenant, sum(state = ?) AS queued, sum(state = ?) AS running FROM jobs WHERE state IN (?, ?)
                        GROUP BY tenant ORDER BY queued DESC, running DESC, tenant LIMIT ?
                        """
                ),
                arguments: [JobState.queued.rawValue, JobState.running.rawValue, JobState.queued.rawValue, JobState.running.rawValue, limit]
            ).map { TenantJobCounts(tenant: Tenant(uncheckedName: $0["tenant"]), queued: $0["queued"], running: $0["running"]) }
        }
    }

    // MARK: Cancelling

    /// Cancels a queued or scheduled job at once (error code `cancelled`, post cancelled, uploads cancelled, media
    /// staged and still attached); marks a running one `cancel_requested`, which its runner hears as a change.
    func requestCancel(id: JobID, tenant: Tenant, now: Timestamp) async throws -> CancelRequest {
        try await storage.write { db in
            guard
                let row = try Row.fetchOne(
                    db.cachedStatement(sql: "SELECT state, post_id FROM jobs WHERE id = ? AND tenant = ?"), arguments: [id, tenant.rawValue])
            else {
                return .notFound
            }
            guard let state = JobState(rawValue: row["state"]) else { throw UnreadableRow(table: "jobs", id: id.rawValue) }
            switch state {
            case .queued, .scheduled:
                try Transitions.end(db, .cancel, jobID: id, postID: row["post_id"], error: Self.cancelledFailure, now: now)
                return .cancelledNow(try Self.job(db, id))
            case .running:
                try Transitions.requestCancel(db, jobID: id)
                return .requested(try Self.job(db, id))
            case .cancelled:
                return .alreadyCancelled(try Self.job(db, id))
            case .succeeded, .failed:
                return .finished(try Self.job(db, id))
            }
        }
    }

    // MARK: For the runner

    /// Scheduled jobs whose `run_at <= now` become queued, and so do their posts. Returns how many.
    func promoteDue(now: Timestamp) async throws -> Int {
        try await storage.write { db in try Transitions.promoteDue(db, now: now) }
    }

    /// The earliest `run_at` among scheduled jobs (for the runner's timer), nil if none.
    func nextScheduledRunAt() async throws -> Timestamp? {
        try await storage.pool.read { db in
            let text = try String.fetchOne(
                db.cachedStatement(sql: "SELECT run_at FROM jobs WHERE state = ? ORDER BY run_at LIMIT 1"),
                arguments: [JobState.scheduled.rawValue]
            )
            return text.flatMap { Timestamp(rfc3339: $0) }
        }
    }

    /// Claims up to `limit` due queued jobs in claim order, as ``claim(runner:leaseUntil:now:)`` claims one, in one
    /// transaction: a runner with several free workers waits for one commit, not one per job.
    func claim(upTo limit: Int, runner: String, leaseUntil: Timestamp, now: Timestamp, tenantCap: Int?) async throws -> [ClaimedJob] {
        guard limit > 0 else { return [] }
        return try await storage.write { db in
            let rows = try Self.fairShare(db, upTo: limit, tenantCap: tenantCap, now: now)
            return try rows.map { row in
                let jobID: JobID = row["id"]
                let postID: PostID = row["post_id"]
                try Transitions.claim(db, jobID: jobID, postID: postID, runner: runner, leaseUntil: leaseUntil, now: now)
                return ClaimedJob(
                    jobID: jobID, postID: postID, runner: runner, attempt: (row["attempt"] as Int) + 1, media: try Self.claimedMedia(db, jobID))
            }
        }
    }

    /// A due job as the claim orders it, its sort columns read once.
    private struct Candidate {
        let row: Row
        /// Its tenant's running jobs plus its rank among the tenant's due ones.
        let turn: Int
        let tenant: String
        let priority: Int
        let runAt: String
        let createdAt: String
        let id: String

        init(row: Row, turn: Int) {
            self.row = row
            self.turn = turn
            (tenant, priority, runAt, createdAt, id) = (row["tenant"], row["priority"], row["run_at"], row["created_at"], row["id"])
        }

        /// The claim's order: priority, turn, due time, age, id (times are fixed-width RFC 3339: their text sorts).
        func precedes(_ other: Candidate) -> Bool {
            (priority, turn, runAt, createdAt, id) < (other.priority, other.turn, other.runAt, other.createdAt, other.id)
        }
    }

    /// The due jobs to claim, in fair-share order: each tenant's first due job (one index probe a tenant), then the best
    /// of them taken one by one, its tenant's next due job standing in for it (one probe each). One writer at a time: the
    /// running counts cannot move under the claim, so the cap is exact.
    private static func fairShare(_ db: Database, upTo limit: Int, tenantCap: Int?, now: Timestamp) throws -> [Row] {
        let queued = JobState.queued.rawValue
        let columns = "jobs.id, jobs.post_id, jobs.attempt, jobs.tenant, jobs.priority, jobs.run_at, jobs.created_at"
        let running = try Dictionary(
            uniqueKeysWithValues: Row.fetchAll(
                db.cachedStatement(sql: "SELECT tenant, count(*) AS jobs FROM jobs WHERE state = ? GROUP BY tenant"),
                arguments: [JobState.running.rawValue]
            ).map { ($0["tenant"] as String, $0["jobs"] as Int) })
        // The partial index's predicate is written as a literal: a bound value could not prove it.
        let heads = try Row.fetchAll(
            db.cachedStatement(
                sql: """
                    WITH RECURSIVE tenants(tenant) AS (
                        SELECT (SELECT tenant FROM jobs INDEXED BY jobs_tenant_due WHERE state = '\(queued)' ORDER BY tenant LIMIT 1)
                        UNION ALL
                        SELECT (SELECT tenant FROM jobs INDEXED BY jobs_tenant_due WHERE state = '\(queued)' AND tenant > tenants.tenant
                                ORDER BY tenant LIMIT 1)
                        FROM tenants WHERE tenants.tenant IS NOT NULL
                    )
                    SELECT \(columns) FROM tenants JOIN jobs ON jobs.id = (
                        SELECT due.id FROM jobs AS due INDEXED BY jobs_tenant_due
                        WHERE due.state = '\(queued)' AND due.tenant = tenants.tenant AND due.run_at <= ?
                        ORDER BY due.priority, due.run_at, due.created_at, due.id LIMIT 1)
                    """),
            arguments: [now.rfc3339])
        let next = try db.cachedStatement(
            sql: """
                SELECT \(columns) FROM jobs INDEXED BY jobs_tenant_due
                WHERE state = '\(queued)' AND tenant = ? AND run_at <= ? AND (priority, run_at, created_at, id) > (?, ?, ?, ?)
                ORDER BY priority, run_at, created_at, id LIMIT 1
                """)
        var candidates = heads.map { Candidate(row: $0, turn: running[$0["tenant"], default: 0] + 1) }
        if let tenantCap { candidates.removeAll { $0.turn > tenantCap } }
        var chosen: [Row] = []
        while chosen.count < limit, let best = candidates.indices.min(by: { candidates[$0].precedes(candidates[$1]) }) {
            let taken = candidates[best]
            chosen.append(taken.row)
            let following = try Row.fetchOne(
                next, arguments: [taken.tenant, now.rfc3339, taken.priority, taken.runAt, taken.createdAt, taken.id])
            if let following, taken.turn < tenantCap ?? .max {
                candidates[best] = Candidate(row: following, turn: taken.turn + 1)
            } else {
                candidates.remove(at: best)
            }
        }
        return chosen
    }

    /// A claimed job's media in the post's order, with what an upload needs.
    private static func claimedMedia(_ db: Database, _ jobID: JobID) throws -> [ClaimedMedia] {
        let rows = try Row.fetchAll(
            db.cachedStatement(
                sql: """
                    SELECT media.id, media.staging_path, media.size, media.sha256, media.content_type, uploads.attempts
                    FROM uploads JOIN media ON media.id = uploads.media_id
                    WHERE uploads.job_id = ?
                    ORDER BY media.position, media.id
                    """
            ),
            arguments: [jobID]
        )
        return try rows.map { row in
            guard let type = MediaType(rawValue: row["content_type"]) else { throw UnreadableRow(table: "media", id: row["id"]) }
            return ClaimedMedia(
                mediaID: row["id"],
                stagingPath: row["staging_path"],
                size: row["size"],
                sha256: row["sha256"],
                contentType: type,
                attempts: row["attempts"]
            )
        }
    }

    /// Extends the leases that still hold their jobs, in one transaction; which of them a client asked to cancel.
    func renewLeases(_ leases: [JobLease], until: Timestamp) async throws -> LeaseRenewal {
        guard !leases.isEmpty else { return LeaseRenewal() }
        return try await storage.pool.write { db in
            var renewal = LeaseRenewal()
            for lease in leases {
                let cancel = try Bool.fetchOne(
                    db,
                    sql: """
                        UPDATE jobs SET locked_until = ? WHERE id = ? AND state = ? AND locked_by = ? AND attempt = ?
                        RETURNING cancel_requested
                        """,
                    arguments: [until.rfc3339, lease.jobID, JobState.running.rawValue, lease.runner, lease.attempt])
                guard let cancel else { continue }
                renewal.held.insert(lease.jobID)
                if cancel { renewal.cancelRequested.insert(lease.jobID) }
            }
            return renewal
        }
    }

    /// Running jobs whose lease ended at or before `now` (a crashed process) go back to queued with the lock
    /// cleared; their posts become queued, their media staged, their uploads pending. Returns their ids.
    func reclaimExpired(now: Timestamp) async throws -> [JobID] {
        try await reclaim(leaseEndedBy: now)
    }

    /// Running jobs held by `runner` (every running job when nil: what the only process on the database does at start,
    /// holding the data directory's lock) go back to queued, lease or not, so a crashed job resumes at once rather than
    /// when its lease ends. Returns their ids.
    func reclaimRunning(heldBy runner: String?) async throws -> [JobID] {
        try await reclaim(leaseEndedBy: nil, heldBy: runner)
    }

    private func reclaim(leaseEndedBy now: Timestamp?, heldBy runner: String? = nil) async throws -> [JobID] {
        try await storage.write { db in
            let rows =
                if let now {
                    try Row.fetchAll(
                        db.cachedStatement(sql: "SELECT id, post_id FROM jobs WHERE state = ? AND locked_until <= ? ORDER BY id"),
                        arguments: [JobState.running.rawValue, now.rfc3339]
                    )
                } else if let runner {
                    try Row.fetchAll(
                        db.cachedStatement(sql: "SELECT id, post_id FROM jobs WHERE state = ? AND locked_by = ? ORDER BY id"),
                        arguments: [JobState.running.rawValue, runner]
                    )
                } else {
                    try Row.fetchAll(
                        db.cachedStatement(sql: "SELECT id, post_id FROM jobs WHERE state = ? ORDER BY id"),
                        arguments: [JobState.running.rawValue]
                    )
                }
            for row in rows {
                try Transitions.putBack(db, jobID: row["id"], postID: row["post_id"], clearCancel: false)
            }
            return rows.map { $0["id"] }
        }
    }

    /// One upload's new state, kept in memory (``UploadProgress``): shown by every read of the job, announced to event
    /// streams, and written to SQLite with the job's end (its commit, failure, cancel or requeue), in that transaction.
    /// Ignored unless the job runs. Its bytes: 0 as an attempt starts, all once uploaded, what the attempt reached
    /// (``reportBytes``) otherwise.
    ///
    /// Not written one by one: a crash forgets them and the job runs again from the start (object keys are
    /// deterministic), which it would do anyway.
    func updateUpload(jobID: JobID, mediaID: MediaID, state: UploadState, attempts: Int, error: String?) {
        storage.uploadProgress.update(jobID: jobID, mediaID: mediaID, state: state, attempts: attempts, error: error)
    }

    /// `bytes` of the upload's current attempt are taken by the store: kept in memory, shown by every read of the job
    /// and announced to event streams (``UploadProgress``); written with the job's end.
    func reportBytes(jobID: JobID, mediaID: MediaID, bytes: Int) {
        storage.uploadProgress.report(jobID: jobID, mediaID: mediaID, bytes: bytes)
    }

    /// Whether cancellation was requested (false for an unknown job).
    func isCancelRequested(jobID: JobID) async throws -> Bool {
        try await storage.pool.read { db in
            try Int.fetchOne(db.cachedStatement(sql: "SELECT cancel_requested FROM jobs WHERE id = ?"), arguments: [jobID]) == 1
        }
    }

    /// ONE transaction, only while `lease` holds the job and no cancel was requested: the post is published
    /// (`published_at = now`), each medium uploaded with its stored object's url and key, every upload uploaded, and
    /// the job succeeded (finished, lock cleared).
    ///
    /// Throws, writing nothing, when `objects` lacks one of the post's media: a post is never half-published.
    func commit(_ lease: JobLease, objects: [MediaID: StoredObject], now: Timestamp) async throws -> JobCompletion {
        let jobID = lease.jobID
        let uploads = storage.uploadProgress.uploads(of: jobID)
        return try await storage.write { db in
            guard let held = try Self.held(db, lease) else { return .lostLease }
            guard !held.cancelRequested else { return .cancelRequested }
            try Transitions.recordUploads(db, jobID: jobID, uploads)
            try Transitions.commit(db, jobID: jobID, postID: held.postID, objects: objects, now: now)
            return .done(try Self.job(db, jobID))
        }
    }

    /// The job failed with `error`; its post failed; its media back to staged (url cleared, still attached); uploads
    /// still pending or uploading cancelled. Only while `lease` holds the job.
    func fail(_ lease: JobLease, error: Job.Failure, now: Timestamp) async throws -> JobCompletion {
        let jobID = lease.jobID
        let uploads = storage.uploadProgress.uploads(of: jobID)
        return try await storage.write { db in
            guard let held = try Self.held(db, lease) else { return .lostLease }
            try Transitions.recordUploads(db, jobID: jobID, uploads)
            try Transitions.end(db, .fail, jobID: jobID, postID: held.postID, error: error, now: now)
            return .done(try Self.job(db, jobID))
        }
    }

    /// The job cancelled (error code `cancelled`, `cancel_requested` 1); its post cancelled; media staged; uploads
    /// not yet uploaded cancelled. Only while `lease` holds the job.
    func finishCancelled(_ lease: JobLease, now: Timestamp) async throws -> JobCompletion {
        let jobID = lease.jobID
        let uploads = storage.uploadProgress.uploads(of: jobID)
        return try await storage.write { db in
            guard let held = try Self.held(db, lease) else { return .lostLease }
            try Transitions.recordUploads(db, jobID: jobID, uploads)
            try Transitions.end(db, .cancel, jobID: jobID, postID: held.postID, error: Self.cancelledFailure, now: now)
            return .done(try Self.job(db, jobID))
        }
    }

    /// Shutdown: the job back to queued (`cancel_requested` 0, lock cleared), its post queued, media staged, uploads
    /// pending. Does nothing unless `lease` holds the job.
    func requeue(_ lease: JobLease) async throws {
        let jobID = lease.jobID
        let uploads = storage.uploadProgress.uploads(of: jobID)
        try await storage.write { db in
            guard let held = try Self.held(db, lease) else { return }
            try Transitions.recordUploads(db, jobID: jobID, uploads)  // their attempts count on
            try Transitions.putBack(db, jobID: jobID, postID: held.postID, clearCancel: true)
        }
    }

    // MARK: Implementation

    private static func job(_ db: Database, _ id: JobID) throws -> Job {
        guard let job = try Rows.job(db, id: id) else { throw UnreadableRow(table: "jobs", id: id.rawValue, reason: "is missing") }
        return job
    }

    /// The running job's post and cancel flag, if `lease` holds it (the fencing check).
    private static func held(_ db: Database, _ lease: JobLease) throws -> (postID: PostID, cancelRequested: Bool)? {
        guard
            let row = try Row.fetchOne(
                db.cachedStatement(
                    sql: "SELECT post_id, cancel_requested FROM jobs WHERE id = ? AND state = ? AND locked_by = ? AND attempt = ?"),
                arguments: [lease.jobID, JobState.running.rawValue, lease.runner, lease.attempt]
            )
        else { return nil }
        return (row["post_id"], (row["cancel_requested"] as Int) != 0)
    }
}
