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
            // Each state a literal, so that its partial index counts it (a bound value could not prove the predicate).
            let row = try Row.fetchOne(
                db.cachedStatement(
                    sql: """
                        SELECT (SELECT count(*) FROM jobs INDEXED BY jobs_leases WHERE state = '\(JobState.running.rawValue)'),
                            (SELECT count(*) FROM jobs INDEXED BY jobs_tenant_due WHERE state = '\(JobState.queued.rawValue)'),
                            (SELECT count(*) FROM jobs INDEXED BY jobs_scheduled WHERE state = '\(JobState.scheduled.rawValue)')
                        """))
            return row.map { ($0[0], $0[1], $0[2]) } ?? (0, 0, 0)
        }
    }

    func busiestTenants(limit: Int) async throws -> [TenantJobCounts] {
        try await storage.pool.read { db in
            try Row.fetchAll(
                db.cachedStatement(
                    sql: """
                        SELECT tenant, sum(queued) AS queued, sum(running) AS running FROM (
                            SELECT tenant, count(*) AS queued, 0 AS running FROM jobs INDEXED BY jobs_tenant_due WHERE state = '\(JobState.queued.rawValue)' GROUP BY tenant
                            UNION ALL
                            SELECT tenant, 0, count(*) FROM jobs INDEXED BY jobs_leases WHERE state = '\(JobState.running.rawValue)' GROUP BY tenant)
                        GROUP BY tenant ORDER BY queued DESC, running DESC, tenant LIMIT ?
                        """
                ),
                arguments: [limit]
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
                db.cachedStatement(
                    sql: "SELECT run_at FROM jobs INDEXED BY jobs_scheduled WHERE state = '\(JobState.scheduled.rawValue)' ORDER BY run_at LIMIT 1"))
            return text.flatMap { Timestamp(rfc3339: $0) }
        }
    }

    /// Claims up to `limit` due queued jobs in claim order, as ``claim(runner:leaseUntil:now:)`` claims one, in one
    /// transaction: a runner with several free workers waits for one commit, not one per job.
    func claim(upTo limit: Int, runner: String, leaseUntil: Timestamp, now: Timestamp, tenantCap: Int?) async throws -> [ClaimedJob] {
        guard limit > 0 else { return [] }
        return try await storage.write { db in
            let chosen = try Self.fairShare(db, upTo: limit, tenantCap: tenantCap, now: now)
            let claimed = try db.cachedStatement(sql: "SELECT post_id, attempt, traceparent FROM jobs WHERE id = ?")
            return try chosen.map { candidate in
                let jobID = JobID(rawValue: candidate.id)
                guard let row = try Row.fetchOne(claimed, arguments: [candidate.id]) else { throw UnreadableRow(table: "jobs", id: candidate.id) }
                let postID: PostID = row[0]
                try Transitions.claim(db, jobID: jobID, postID: postID, runner: runner, leaseUntil: leaseUntil, now: now)
                return ClaimedJob(
                    jobID: jobID, postID: postID, runner: runner, attempt: (row[1] as Int) + 1, media: try Self.claimedMedia(db, jobID),
                    traceparent: row[2])
            }
        }
    }

    /// A due job as the claim orders it.
    private struct Candidate {
        let id: String
        let tenant: String
        let priority: Int
        let runAt: String
        let createdAt: String
        /// Its tenant's running jobs plus its rank among the tenant's due ones (1 for the first).
        let turn: Int

        /// Reads the columns `id, tenant, priority, run_at, created_at`, in that order, by position (GRDB looks a name up).
        init(row: Row, turn: Int) {
            (id, tenant, priority, runAt, createdAt) = (row[0], row[1], row[2], row[3], row[4])
            self.turn = turn
        }

        /// The claim's order: priority, turn, due time, age, id (times are fixed-width RFC 3339: their text sorts).
        func precedes(_ other: Candidate) -> Bool {
            (priority, turn, runAt, createdAt, id) < (other.priority, other.turn, other.runAt, other.createdAt, other.id)
        }
    }

    /// The due jobs to claim, in fair-share order: the tenants' first jobs (`queue_heads`, kept by triggers with each
    /// tenant's running jobs) read in the claim's order from its index until `limit` are due, then the best of them
    /// taken one by one, its tenant's next due job standing in for it (one index search each). A tenant whose first job
    /// is not among those `limit` has every job behind `limit` better ones, so it gets none. One writer at a time: the
    /// running counts cannot move under the claim, so the cap is exact.
    private static func fairShare(_ db: Database, upTo limit: Int, tenantCap: Int?, now: Timestamp) throws -> [Candidate] {
        let cap = tenantCap ?? .max
        let due = now.rfc3339
        let heads = try db.cachedStatement(
            sql: """
                SELECT job_id, tenant, priority, run_at, created_at, running FROM queue_heads INDEXED BY queue_heads_turn
                WHERE running < ? ORDER BY priority, running, run_at, created_at, job_id
                """)
        // The partial index's predicate is written as a literal: a bound value could not prove it.
        let next = try db.cachedStatement(
            sql: """
                SELECT id, tenant, priority, run_at, created_at FROM jobs INDEXED BY jobs_tenant_due
                WHERE state = '\(JobState.queued.rawValue)' AND tenant = ? AND run_at <= ?
                    AND (priority, run_at, created_at, id) > (?, ?, ?, ?)
                ORDER BY priority, run_at, created_at, id LIMIT 1
                """)
        /// The tenant's first due job after `job` in its order, as its `turn`.
        func following(_ job: Candidate, turn: Int) throws -> Candidate? {
            try Row.fetchOne(next, arguments: [job.tenant, due, job.priority, job.runAt, job.createdAt, job.id])
                .map { Candidate(row: $0, turn: turn) }
        }
        var candidates: [Candidate] = []
        var dueHeads = 0
        let rows = try Row.fetchCursor(heads, arguments: [cap])
        while dueHeads < limit, let row = try rows.next() {
            let head = Candidate(row: row, turn: (row[5] as Int) + 1)
            if head.runAt <= due {
                candidates.append(head)
                dueHeads += 1
            } else if let first = try following(head, turn: head.turn) {
                // A first job not due yet (the clock went back): the tenant's first due one stands in for it. It comes
                // later in the order than its head, so the heads after `limit` due ones cannot beat them either.
                candidates.append(first)
            }
        }
        var chosen: [Candidate] = []
        while chosen.count < limit, let best = candidates.indices.min(by: { candidates[$0].precedes(candidates[$1]) }) {
            let taken = candidates[best]
            chosen.append(taken)
            if taken.turn < cap, let next = try following(taken, turn: taken.turn + 1) {
                candidates[best] = next
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
        // The state as a literal: the partial index jobs_leases answers it (a bound value could not prove its predicate;
        // without statistics the planner would rather walk every job in id order than sort the few running ones).
        let running = JobState.running.rawValue
        return try await storage.write { db in
            let rows =
                if let now {
                    try Row.fetchAll(
                        db.cachedStatement(
                            sql: "SELECT id, post_id FROM jobs INDEXED BY jobs_leases WHERE state = '\(running)' AND locked_until <= ? ORDER BY id"),
                        arguments: [now.rfc3339]
                    )
                } else if let runner {
                    try Row.fetchAll(
                        db.cachedStatement(
                            sql: "SELECT id, post_id FROM jobs INDEXED BY jobs_leases WHERE state = '\(running)' AND locked_by = ? ORDER BY id"),
                        arguments: [runner]
                    )
                } else {
                    try Row.fetchAll(
                        db.cachedStatement(sql: "SELECT id, post_id FROM jobs INDEXED BY jobs_leases WHERE state = '\(running)' ORDER BY id"))
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
