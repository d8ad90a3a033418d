import GRDB
import HeraldCore
import HeraldStorage

/// Posts: created with their media and first publish job in one transaction, read back, re-published.
struct SQLitePostRepository: PostRepository {

    let storage: SQLiteStorage

    // MARK: Creating

    /// ONE write transaction: checks the idempotency key (if any; expired keys are purged and ignored), checks every
    /// listed medium exists and is unattached (reporting every problem), inserts `newMedia`, inserts the post (queued,
    /// or scheduled when `request.scheduledAt > now`) and its job, attaches the media in order with one pending upload
    /// each, and records the key as completed. Any outcome but ``PostCreation/created(_:)`` writes nothing.
    ///
    /// An `in_progress` key with the same payload is taken as this request's own reservation (see ``reserve(_:now:)``)
    /// and completed; a payload mismatch is ``PostCreation/keyReusedWithOtherPayload`` whatever the key's state.
    func create(
        _ request: PostRequest, tenant: Tenant, newMedia: [NewMedia], idempotency: IdempotencyRecord?, now: Timestamp
    ) async throws -> PostCreation {
        try await storage.write { db in
            var reserved = false
            if let idempotency {
                switch try Self.lookUp(db, idempotency, tenant: tenant, now: now) {
                case .none:
                    break
                case .mismatch:
                    return .keyReusedWithOtherPayload
                case .completed(let postID, let jobID):
                    return .replayed(try Self.postAndJob(db, postID: postID, jobID: jobID))
                case .inProgress:
                    reserved = true
                }
            }

            let new = Set(newMedia.map { $0.media.id })
            let listed = request.mediaIDs.enumerated().filter { !new.contains($0.element) }.map { (index: $0.offset, id: $0.element.rawValue) }
            let issues = try Self.mediaIssues(db, listed, tenant: tenant)
            guard issues.isEmpty else { return .invalid(issues) }

            for item in newMedia { try SQLiteMediaRepository.insert(db, item.media, tenant: tenant, stagingPath: item.stagingPath) }
            let postID = PostID.generate(at: now)
            let jobID = JobID.generate(at: now)
            try Transitions.create(db, postID: postID, jobID: jobID, tenant: tenant, request: request, now: now)

            if let idempotency {
                if reserved {
                    try db.run(
                        "UPDATE idempotency_keys SET state = 'completed', post_id = ?, job_id = ? WHERE tenant = ? AND key = ?",
                        [postID, jobID, tenant.rawValue, idempotency.key]
                    )
                } else {
                    try db.run(
                        """
                        INSERT INTO idempotency_keys (tenant, key, request_hash, post_id, job_id, state, created_at, expires_at)
                        VALUES (?, ?, ?, ?, ?, 'completed', ?, ?)
                        """,
                        [
                            tenant.rawValue, idempotency.key, idempotency.requestHash, postID, jobID, now.rfc3339,
                            now.adding(milliseconds: IdempotencyRecord.lifetimeMilliseconds).rfc3339,
                        ]
                    )
                }
            }
            return .created(try Self.postAndJob(db, postID: postID, jobID: jobID))
        }
    }

    /// For multipart posts whose media must be staged first: reserves the key (`in_progress`) before staging.
    ///
    /// Returns nil when reserved (go on), or the answer to give at once: ``PostCreation/replayed(_:)``,
    /// ``PostCreation/keyReusedWithOtherPayload`` or ``PostCreation/keyInProgress``. A reservation older than 60 s
    /// counts as abandoned and is taken over (nil).
    func reserve(_ idempotency: IdempotencyRecord, tenant: Tenant, now: Timestamp) async throws -> PostCreation? {
        try await storage.pool.write { db in
            switch try Self.lookUp(db, idempotency, tenant: tenant, now: now) {
            case .none:
                try db.run(
                    """
                    INSERT INTO idempotency_keys (tenant, key, request_hash, post_id, job_id, state, created_at, expires_at)
                    VALUES (?, ?, ?, NULL, NULL, 'in_progress', ?, ?)
                    """,
                    [
                        tenant.rawValue, idempotency.key, idempotency.requestHash, now.rfc3339,
                        now.adding(milliseconds: IdempotencyRecord.lifetimeMilliseconds).rfc3339,
                    ]
                )
                return nil
            case .mismatch:
                return .keyReusedWithOtherPayload
            case .completed(let postID, let jobID):
                return .replayed(try Self.postAndJob(db, postID: postID, jobID: jobID))
            case .inProgress(let since):
                guard now.milliseconds(since: since) >= IdempotencyRecord.reservationTimeoutMilliseconds else { return .keyInProgress }
                try db.run(
                    "UPDATE idempotency_keys SET created_at = ?, expires_at = ? WHERE tenant = ? AND key = ?",
                    [now.rfc3339, now.adding(milliseconds: IdempotencyRecord.lifetimeMilliseconds).rfc3339, tenant.rawValue, idempotency.key]
                )
                return nil
            }
        }
    }

    /// Drops a reservation whose request failed, so a retry can proceed. A completed key is never dropped.
    func release(_ idempotency: IdempotencyRecord, tenant: Tenant) async throws {
        try await storage.pool.write { db in
            try db.run(
                "DELETE FROM idempotency_keys WHERE tenant = ? AND key = ? AND request_hash = ? AND state = 'in_progress'",
                [tenant.rawValue, idempotency.key, idempotency.requestHash]
            )
        }
    }

    // MARK: Reading

    /// The post with this id, its media in position order; nil if `tenant` has none.
    func find(id: PostID, tenant: Tenant) async throws -> Post? {
        try await storage.pool.read { db in try Rows.post(db, id: id, tenant: tenant) }
    }

    /// One page of posts, newest first (`created_at DESC, id DESC`), optionally of one state, strictly after `cursor`.
    func list(tenant: Tenant, state: PostState?, limit: Int, after cursor: HeraldCore.Cursor?) async throws -> Page<Post> {
        try await storage.pool.read { db in
            let rows = try Rows.listRows(db, table: "posts", tenant: tenant, state: state?.rawValue, limit: limit, after: cursor)
            return Page(fetched: try Rows.posts(db, rows), limit: limit, cursor: \.cursor)
        }
    }

    /// The problems of listed media ids (`index` in the draft, `id` as sent) that only the database can find: unknown
    /// and attached media, read with one query. The same check ``create(_:newMedia:idempotency:now:)`` makes.
    func mediaIssues(_ ids: [(index: Int, id: String)], tenant: Tenant) async throws -> [ValidationIssue] {
        try await storage.pool.read { db in try Self.mediaIssues(db, ids, tenant: tenant) }
    }

    // MARK: Re-publishing

    /// A `failed` or `cancelled` post gets a new job (queued, `run_at` now, the post's priority) with fresh uploads
    /// rows; the post becomes queued and points at the new job. Published, or a job active: conflict.
    func republish(id: PostID, tenant: Tenant, now: Timestamp, traceparent: String?) async throws -> Republication {
        try await storage.write { db in
            guard let post = try Rows.post(db, id: id, tenant: tenant) else { return .notFound }
            if post.state == .published { return .conflict("The post is already published.") }
            let active = try String.fetchOne(
                db.cachedStatement(
                    sql: "SELECT id FROM jobs WHERE post_id = ? AND state IN (\(databaseQuestionMarks(count: JobState.active.count))) LIMIT 1"
                ),
                arguments: [id] + StatementArguments(JobState.active.map(\.rawValue))
            )
            if let active { return .conflict("The post's job \(active) is still active.") }
            guard post.state.canRepublish else {
                return .conflict("Only a failed or cancelled post can be published again; this one is \(post.state.rawValue).")
            }
            let jobID = JobID.generate(at: now)
            try Transitions.republish(db, postID: id, priority: post.priority, jobID: jobID, traceparent: traceparent, now: now)
            return .queued(try Self.postAndJob(db, postID: id, jobID: jobID))
        }
    }

    // MARK: Implementation

    /// What the idempotency table holds for a key, after purging expired keys.
    private enum KeyRecord {
        case none
        case mismatch
        case completed(postID: PostID, jobID: JobID)
        case inProgress(since: Timestamp)
    }

    private static func lookUp(_ db: Database, _ idempotency: IdempotencyRecord, tenant: Tenant, now: Timestamp) throws -> KeyRecord {
        // Expired keys are forgotten: purging them all here keeps the table small (idempotency_keys_expiry).
        try db.run("DELETE FROM idempotency_keys WHERE expires_at <= ?", [now.rfc3339])
        guard
            let row = try Row.fetchOne(
                db.cachedStatement(
                    sql: "SELECT request_hash, state, post_id, job_id, created_at FROM idempotency_keys WHERE tenant = ? AND key = ?"),
                arguments: [tenant.rawValue, idempotency.key]
            )
        else { return .none }
        guard (row["request_hash"] as String) == idempotency.requestHash else { return .mismatch }
        if (row["state"] as String) == "completed", let postID: PostID = row["post_id"], let jobID: JobID = row["job_id"] {
            return .completed(postID: postID, jobID: jobID)
        }
        guard let since = Timestamp(rfc3339: row["created_at"]) else {
            throw UnreadableRow(table: "idempotency_keys", id: idempotency.key)
        }
        return .inProgress(since: since)
    }

    /// Unknown and attached media among `ids`, found with one `IN (...)` query (``MediaRule``).
    /// Another tenant's media are unknown, as if they did not exist.
    private static func mediaIssues(_ db: Database, _ ids: [(index: Int, id: String)], tenant: Tenant) throws -> [ValidationIssue] {
        guard !ids.isEmpty else { return [] }
        var attached: [String: Bool] = [:]
        // Cached per placeholder count: every creation asks, and preparing costs more than the query.
        let rows = try Row.fetchAll(
            db.cachedStatement(
                sql: "SELECT id, post_id IS NOT NULL AS attached FROM media WHERE id IN (\(databaseQuestionMarks(count: ids.count))) AND tenant = ?"),
            arguments: StatementArguments(ids.map { $0.id }) + [tenant.rawValue]
        )
        for row in rows { attached[row["id"]] = row["attached"] }
        return MediaRule.issues(ids) { id in attached[id].map { $0 ? .attached : .free } ?? .unknown }
    }

    /// The post and job as stored now.
    static func postAndJob(_ db: Database, postID: PostID, jobID: JobID) throws -> PostAndJob {
        guard let post = try Rows.post(db, id: postID) else { throw UnreadableRow(table: "posts", id: postID.rawValue, reason: "is missing") }
        guard let job = try Rows.job(db, id: jobID) else { throw UnreadableRow(table: "jobs", id: jobID.rawValue, reason: "is missing") }
        return PostAndJob(post: post, job: job)
    }
}

// MARK: Deleting and forgetting

extension SQLitePostRepository {

    /// Reads what deleting the post would remove, or why it cannot be deleted now.
    func deletionPlan(id: PostID, tenant: Tenant) async throws -> PostDeletionPlan {
        try await storage.pool.read { db in try Self.deletionPlan(db, id: id, tenant: tenant) }
    }

    /// Deletes the post's rows in ONE transaction: the idempotency keys that name it, its jobs' uploads, its jobs,
    /// its media and the post. Re-checks that no job is active (a re-publish may have come in between).
    func delete(id: PostID, tenant: Tenant) async throws -> PostDeletionPlan {
        try await storage.pool.write { db in
            let plan = try Self.deletionPlan(db, id: id, tenant: tenant)
            guard case .deletable = plan else { return plan }
            let jobs = "SELECT id FROM jobs WHERE post_id = ?"
            try db.run("DELETE FROM idempotency_keys WHERE post_id = ? OR job_id IN (\(jobs))", [id, id])
            try db.run("DELETE FROM uploads WHERE job_id IN (\(jobs))", [id])
            // The post names its current job (checked at commit): both go in this transaction.
            try db.run("DELETE FROM jobs WHERE post_id = ?", [id])
            try db.run("DELETE FROM media WHERE post_id = ?", [id])
            try db.run("DELETE FROM posts WHERE id = ?", [id])
            return plan
        }
    }

    private static func deletionPlan(_ db: Database, id: PostID, tenant: Tenant) throws -> PostDeletionPlan {
        guard try Bool.fetchOne(db, sql: "SELECT 1 FROM posts WHERE id = ? AND tenant = ?", arguments: [id, tenant.rawValue]) != nil else {
            return .notFound
        }
        let active = try JobID.fetchOne(
            db,
            sql: "SELECT id FROM jobs WHERE post_id = ? AND state IN (\(databaseQuestionMarks(count: JobState.active.count))) LIMIT 1",
            arguments: [id] + StatementArguments(JobState.active.map(\.rawValue))
        )
        if let active { return .active(active) }
        let rows = try Row.fetchAll(db, sql: "SELECT object_key, staging_path FROM media WHERE post_id = ? ORDER BY position", arguments: [id])
        return .deletable(objectKeys: rows.compactMap { $0["object_key"] }, stagingPaths: rows.map { $0["staging_path"] })
    }

    /// Forgets idempotency keys past their 24 hours; returns how many.
    func forgetExpiredKeys(now: Timestamp) async throws -> Int {
        try await storage.pool.write { db in
            try db.run("DELETE FROM idempotency_keys WHERE expires_at <= ?", [now.rfc3339])
            return db.changesCount
        }
    }
}
