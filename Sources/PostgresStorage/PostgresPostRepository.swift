import HeraldCore
import HeraldStorage
import PostgresNIO

/// Posts on PostgreSQL: created with their media and first job in one transaction, read back, re-published, deleted.
struct PostgresPostRepository: PostRepository {
    let storage: PostgresStorage

    // MARK: Creating

    /// ONE transaction, as on SQLite: the idempotency key (taken first, its row locked: two replicas with one key take
    /// turns), the listed media (locked, so two posts cannot both take one), `newMedia`, the post, its job and uploads,
    /// the key completed. Any outcome but ``PostCreation/created(_:)`` rolls back: it writes nothing.
    func create(
        _ request: PostRequest, tenant: Tenant, newMedia: [NewMedia], idempotency: IdempotencyRecord?, now: Timestamp
    ) async throws -> PostCreation {
        // The usual post (listed media whose ids Herald could have made, no key) goes in one statement with the others
        // asked for meanwhile, its own transaction (``PostgresStorage/creations``); one it could not create, or a failed
        // statement, sends it the long way, which says why.
        if newMedia.isEmpty, idempotency == nil, request.mediaIDs.allSatisfy({ Identifier.isValid($0.rawValue) }) {
            let post = PostgresTransitions.NewPost(
                postID: PostID.generate(at: now), jobID: JobID.generate(at: now), tenant: tenant, request: request, now: now)
            let created = try? await storage.creations.submit(post) { posts in
                do {
                    let created = try await storage.autocommit { try await PostgresTransitions.create($0, posts) }
                    return posts.map { .success(created[$0.postID]) }
                } catch {
                    return posts.map { _ in .failure(error) }
                }
            }
            if let created {
                // The client's first poll of it is answered as created, without a read.
                storage.feed.rememberPolled(created.postAndJob.job, tenant: tenant, version: created.version)
                return .created(created.postAndJob)
            }
        }
        do {
            return try await storage.write { transaction in
                try await Self.create(transaction, request, tenant: tenant, newMedia: newMedia, idempotency: idempotency, now: now)
            }
        } catch let answer as Answer {
            return answer.creation
        }
    }

    /// An answer other than a creation, thrown to roll the transaction back.
    private struct Answer: Error {
        let creation: PostCreation
    }

    private static func create(
        _ transaction: Transaction, _ request: PostRequest, tenant: Tenant, newMedia: [NewMedia], idempotency: IdempotencyRecord?, now: Timestamp
    ) async throws -> PostCreation {
        if let idempotency {
            var record = try await Self.lookUp(transaction, idempotency, tenant: tenant, now: now)
            // A new key is taken at once; a replica that took it meanwhile has committed when this insert returns.
            if case .none = record, try await !Self.insertReservation(transaction, idempotency, tenant: tenant, now: now) {
                record = try await Self.lookUp(transaction, idempotency, tenant: tenant, now: now)
            }
            switch record {
            case .none, .inProgress: break
            case .mismatch: throw Answer(creation: .keyReusedWithOtherPayload)
            case .completed(let postID, let jobID):
                throw Answer(creation: .replayed(try await PostgresRows.postAndJob(transaction, postID: postID, jobID: jobID)))
            }
        }
        let new = Set(newMedia.map(\.media.id))
        let listed = request.mediaIDs.enumerated().filter { !new.contains($0.element) }.map { (index: $0.offset, id: $0.element.rawValue) }
        let issues = try await Self.mediaIssues(transaction, listed, tenant: tenant, lock: true)
        guard issues.isEmpty else { throw Answer(creation: .invalid(issues)) }

        for item in newMedia {
            try await PostgresMediaRepository.insert(transaction, item.media, tenant: tenant, stagingPath: item.stagingPath)
        }
        let postID = PostID.generate(at: now)
        let jobID = JobID.generate(at: now)
        // Its media are locked and free: the creation cannot find one taken.
        let post = PostgresTransitions.NewPost(postID: postID, jobID: jobID, tenant: tenant, request: request, now: now)
        guard let created = try await PostgresTransitions.create(transaction, [post])[postID] else {
            throw UnreadableRow(table: "media", id: request.mediaIDs.map(\.rawValue).joined(separator: ","), reason: "could not all be attached")
        }
        if let idempotency {
            try await transaction.run(
                """
                UPDATE idempotency_keys SET state = 'completed', post_id = \(postID), job_id = \(jobID)
                WHERE tenant = \(tenant.rawValue) AND key = \(idempotency.key)
                """)
        }
        return .created(created.postAndJob)
    }

    func reserve(_ idempotency: IdempotencyRecord, tenant: Tenant, now: Timestamp) async throws -> PostCreation? {
        try await storage.write { transaction in
            switch try await Self.lookUp(transaction, idempotency, tenant: tenant, now: now) {
            case .none:
                // Taken meanwhile by another replica, whose transaction this insert waited for: in progress.
                return try await Self.insertReservation(transaction, idempotency, tenant: tenant, now: now) ? nil : .keyInProgress
            case .mismatch:
                return .keyReusedWithOtherPayload
            case .completed(let postID, let jobID):
                return .replayed(try await PostgresRows.postAndJob(transaction, postID: postID, jobID: jobID))
            case .inProgress(let since):
                guard now.milliseconds(since: since) >= IdempotencyRecord.reservationTimeoutMilliseconds else { return .keyInProgress }
                try await transaction.run(
                    """
                    UPDATE idempotency_keys SET created_at = \(now), expires_at = \(now.adding(milliseconds: IdempotencyRecord.lifetimeMilliseconds))
                    WHERE tenant = \(tenant.rawValue) AND key = \(idempotency.key)
                    """)
                return nil
            }
        }
    }

    func release(_ idempotency: IdempotencyRecord, tenant: Tenant) async throws {
        try await storage.run(
            """
            DELETE FROM idempotency_keys
            WHERE tenant = \(tenant.rawValue) AND key = \(idempotency.key) AND request_hash = \(idempotency.requestHash) AND state = 'in_progress'
            """)
    }

    // MARK: Reading

    func find(id: PostID, tenant: Tenant) async throws -> Post? {
        try await storage.read { try await PostgresRows.post($0, id: id, tenant: tenant) }
    }

    func list(tenant: Tenant, state: PostState?, limit: Int, after cursor: Cursor?) async throws -> Page<Post> {
        try await storage.read { transaction in
            let rows = try await PostgresRows.listRows(
                transaction, table: "posts", columns: PostgresRows.postColumns, tenant: tenant, state: state?.rawValue, limit: limit,
                after: cursor)
            return Page(fetched: try await PostgresRows.posts(transaction, rows), limit: limit, cursor: \.cursor)
        }
    }

    func mediaIssues(_ ids: [(index: Int, id: String)], tenant: Tenant) async throws -> [ValidationIssue] {
        try await storage.read { try await Self.mediaIssues($0, ids, tenant: tenant, lock: false) }
    }

    // MARK: Re-publishing

    func republish(id: PostID, tenant: Tenant, now: Timestamp, traceparent: String?) async throws -> Republication {
        try await storage.write { transaction in
            // Locked: two re-publishes of one post take turns, and the second finds the first's job.
            guard
                let row = try await transaction.row(
                    "SELECT state, priority FROM posts WHERE id = \(id) AND tenant = \(tenant.rawValue) FOR UPDATE")
            else { return .notFound }
            guard let state = PostState(rawValue: try row("state")), let priority = Priority(rawValue: try row("priority")) else {
                throw UnreadableRow(table: "posts", id: id.rawValue)
            }
            if state == .published { return .conflict("The post is already published.") }
            if let active = try await transaction.row(
                "SELECT id FROM jobs WHERE post_id = \(id) AND state = ANY(\(JobState.active.map(\.rawValue))) LIMIT 1")
            {
                return .conflict("The post's job \(try active("id", as: String.self)) is still active.")
            }
            guard state.canRepublish else {
                return .conflict("Only a failed or cancelled post can be published again; this one is \(state.rawValue).")
            }
            let jobID = JobID.generate(at: now)
            try await PostgresTransitions.republish(transaction, postID: id, priority: priority, jobID: jobID, traceparent: traceparent, now: now)
            return .queued(try await PostgresRows.postAndJob(transaction, postID: id, jobID: jobID))
        }
    }

    // MARK: Deleting and forgetting

    func deletionPlan(id: PostID, tenant: Tenant) async throws -> PostDeletionPlan {
        try await storage.read { try await Self.deletionPlan($0, id: id, tenant: tenant, lock: false) }
    }

    func delete(id: PostID, tenant: Tenant) async throws -> PostDeletionPlan {
        try await storage.write { transaction in
            let plan = try await Self.deletionPlan(transaction, id: id, tenant: tenant, lock: true)
            guard case .deletable = plan else { return plan }
            try await transaction.run(
                "DELETE FROM idempotency_keys WHERE post_id = \(id) OR job_id IN (SELECT id FROM jobs WHERE post_id = \(id))")
            try await transaction.run("DELETE FROM uploads WHERE job_id IN (SELECT id FROM jobs WHERE post_id = \(id))")
            // The post names its current job (checked at commit): both go in this transaction.
            try await transaction.run("DELETE FROM jobs WHERE post_id = \(id)")
            try await transaction.run("DELETE FROM media WHERE post_id = \(id)")
            try await transaction.run("DELETE FROM posts WHERE id = \(id)")
            return plan
        }
    }

    func forgetExpiredKeys(now: Timestamp) async throws -> Int {
        try await storage.run("DELETE FROM idempotency_keys WHERE expires_at <= \(now) RETURNING key").count
    }

    // MARK: Implementation

    /// What the idempotency table holds for a key, after forgetting the expired ones.
    private enum KeyRecord {
        case none
        case mismatch
        case completed(postID: PostID, jobID: JobID)
        case inProgress(since: Timestamp)
    }

    private static func lookUp(_ transaction: Transaction, _ idempotency: IdempotencyRecord, tenant: Tenant, now: Timestamp) async throws -> KeyRecord
    {
        try await transaction.run(
            "DELETE FROM idempotency_keys WHERE tenant = \(tenant.rawValue) AND key = \(idempotency.key) AND expires_at <= \(now)")
        guard
            let row = try await transaction.row(
                """
                SELECT request_hash, state, post_id, job_id, created_at FROM idempotency_keys
                WHERE tenant = \(tenant.rawValue) AND key = \(idempotency.key) FOR UPDATE
                """)
        else { return .none }
        guard try row("request_hash", as: String.self) == idempotency.requestHash else { return .mismatch }
        if try row("state", as: String.self) == "completed", let postID: PostID = try row("post_id"), let jobID: JobID = try row("job_id") {
            return .completed(postID: postID, jobID: jobID)
        }
        return .inProgress(since: try row("created_at"))
    }

    /// Records the key as `in_progress`; false when another transaction recorded it first (this one waited for it).
    private static func insertReservation(
        _ transaction: Transaction, _ idempotency: IdempotencyRecord, tenant: Tenant, now: Timestamp
    ) async throws -> Bool {
        try await !transaction.run(
            """
            INSERT INTO idempotency_keys (tenant, key, request_hash, state, created_at, expires_at)
            VALUES (\(tenant.rawValue), \(idempotency.key), \(idempotency.requestHash), 'in_progress', \(now),
                    \(now.adding(milliseconds: IdempotencyRecord.lifetimeMilliseconds)))
            ON CONFLICT (tenant, key) DO NOTHING
            RETURNING key
            """
        ).isEmpty
    }

    /// Unknown and attached media among `ids`, in one query (``MediaRule``); another tenant's are unknown. With `lock`,
    /// the free ones stay locked until the transaction ends, so no other post takes them meanwhile.
    private static func mediaIssues(
        _ transaction: Transaction, _ ids: [(index: Int, id: String)], tenant: Tenant, lock: Bool
    ) async throws -> [ValidationIssue] {
        // Only an id Herald could have made is looked for (the others are unknown): PostgreSQL's text refuses some of
        // what a client may send (a NUL).
        let possible = ids.map(\.id).filter(Identifier.isValid)
        guard !possible.isEmpty else { return MediaRule.issues(ids) { _ in .unknown } }
        let rows = try await transaction.rows(
            """
            SELECT id, post_id IS NOT NULL AS attached FROM media WHERE id = ANY(\(possible)) AND tenant = \(tenant.rawValue)
            \(unescaped: lock ? "ORDER BY id FOR UPDATE" : "")
            """)
        var attached: [String: Bool] = [:]
        for row in rows { attached[try row("id")] = try row("attached") }
        return MediaRule.issues(ids) { id in attached[id].map { $0 ? .attached : .free } ?? .unknown }
    }

    private static func deletionPlan(_ transaction: Transaction, id: PostID, tenant: Tenant, lock: Bool) async throws -> PostDeletionPlan {
        guard
            try await transaction.row(
                "SELECT 1 FROM posts WHERE id = \(id) AND tenant = \(tenant.rawValue) \(unescaped: lock ? "FOR UPDATE" : "")") != nil
        else { return .notFound }
        if let active = try await transaction.row(
            "SELECT id FROM jobs WHERE post_id = \(id) AND state = ANY(\(JobState.active.map(\.rawValue))) LIMIT 1")
        {
            return .active(try active("id"))
        }
        let rows = try await transaction.rows("SELECT object_key, staging_path FROM media WHERE post_id = \(id) ORDER BY position")
        return .deletable(objectKeys: try rows.compactMap { try $0("object_key") }, stagingPaths: try rows.map { try $0("staging_path") })
    }
}
