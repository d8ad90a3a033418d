import HeraldCore
import HeraldStorage
import PostgresNIO

/// Publish jobs on PostgreSQL: read and cancelled by clients, claimed, leased and finished by any replica's runner.
///
/// Every method that writes is one transaction; a runner's writes lock the job's row (`FOR UPDATE`) and check its
/// lease, `(id, locked_by, attempt)`, before anything else: a replica that lost the job changes nothing of it.
struct PostgresJobRepository: JobRepository {
    private static let cancelledFailure = Job.Failure(code: .cancelled, message: "The job was cancelled.")

    let storage: PostgresStorage

    // MARK: Reading

    func find(id: JobID, tenant: Tenant) async throws -> Job? {
        guard var job = try await storage.autocommit({ try await PostgresRows.job($0, id: id, tenant: tenant)?.job }) else { return nil }
        storage.uploadProgress.apply(to: &job)
        return job
    }

    func snapshot(id: JobID, tenant: Tenant) async throws -> JobSnapshot? {
        // A stream woken by a change this replica wrote finds the job as written (see create, claim, commit).
        try await PostgresJobStatusReader(storage: storage).current(id: id, tenant: tenant).map {
            storage.uploadProgress.snapshot($0.job, version: $0.version)
        }
    }

    func activeSnapshots(tenant: Tenant) async throws -> [JobSnapshot] {
        let read = try await storage.read { transaction in
            let rows = try await transaction.rows(
                """
                SELECT \(unescaped: PostgresRows.jobColumns) FROM jobs
                WHERE tenant = \(tenant.rawValue) AND state = ANY(\(JobState.active.map(\.rawValue)))
                ORDER BY created_at, id
                """)
            return zip(try await PostgresRows.jobs(transaction, rows), try rows.map { try $0("version", as: Int.self) }).map { ($0, $1) }
        }
        return read.map { storage.uploadProgress.snapshot($0, version: $1) }
    }

    func list(tenant: Tenant, state: JobState?, limit: Int, after cursor: Cursor?) async throws -> Page<Job> {
        var page = try await storage.read { transaction in
            let rows = try await PostgresRows.listRows(
                transaction, table: "jobs", columns: PostgresRows.jobColumns, tenant: tenant, state: state?.rawValue, limit: limit, after: cursor)
            return Page(fetched: try await PostgresRows.jobs(transaction, rows), limit: limit, cursor: \.cursor)
        }
        for index in page.data.indices { storage.uploadProgress.apply(to: &page.data[index]) }
        return page
    }

    func counts() async throws -> (running: Int, queued: Int, scheduled: Int) {
        var counts: [JobState: Int] = [:]
        for row in try await storage.run(
            "SELECT state, count(*) AS count FROM jobs WHERE state = ANY(\(JobState.active.map(\.rawValue))) GROUP BY state")
        {
            let (state, count) = try row.decode((String, Int).self)
            JobState(rawValue: state).map { counts[$0] = count }
        }
        return (counts[.running] ?? 0, counts[.queued] ?? 0, counts[.scheduled] ?? 0)
    }

    func busiestTenants(limit: Int) async throws -> [TenantJobCounts] {
        try await storage.run(
            """
            SELECT tenant, count(*) FILTER (WHERE state = \(JobState.queued.rawValue)) AS queued,
                count(*) FILTER (WHERE state = \(JobState.running.rawValue)) AS running
            FROM jobs WHERE state = ANY(\([JobState.queued.rawValue, JobState.running.rawValue]))
            GROUP BY tenant ORDER BY queued DESC, running DESC, tenant LIMIT \(limit)
            """
        ).map { row in
            let (tenant, queued, running) = try row.decode((String, Int, Int).self)
            return TenantJobCounts(tenant: Tenant(uncheckedName: tenant), queued: queued, running: running)
        }
    }

    // MARK: Cancelling

    func requestCancel(id: JobID, tenant: Tenant, now: Timestamp) async throws -> CancelRequest {
        try await storage.write { transaction in
            guard
                let row = try await transaction.row(
                    "SELECT state, post_id FROM jobs WHERE id = \(id) AND tenant = \(tenant.rawValue) FOR UPDATE")
            else { return .notFound }
            guard let state = JobState(rawValue: try row("state")) else { throw UnreadableRow(table: "jobs", id: id.rawValue) }
            switch state {
            case .queued, .scheduled:
                try await PostgresTransitions.end(transaction, .cancel, jobID: id, postID: try row("post_id"), error: Self.cancelledFailure, now: now)
                return .cancelledNow(try await PostgresRows.existingJob(transaction, id))
            case .running:
                try await PostgresTransitions.requestCancel(transaction, jobID: id)
                return .requested(try await PostgresRows.existingJob(transaction, id))
            case .cancelled:
                return .alreadyCancelled(try await PostgresRows.existingJob(transaction, id))
            case .succeeded, .failed:
                return .finished(try await PostgresRows.existingJob(transaction, id))
            }
        }
    }

    // MARK: For the runner

    func promoteDue(now: Timestamp) async throws -> Int {
        try await storage.write { try await PostgresTransitions.promoteDue($0, now: now) }
    }

    func nextScheduledRunAt() async throws -> Timestamp? {
        try await storage.autocommit { transaction in
            // The state as a literal: the partial index jobs_scheduled answers it (a bound value cannot prove its predicate).
            try await transaction.rows(
                NextScheduled.self, "SELECT min(run_at) AS next FROM jobs WHERE state = '\(unescaped: JobState.scheduled.rawValue)'"
            )
            .first?("next", as: Timestamp?.self)
        } ?? nil
    }

    func claim(upTo limit: Int, runner: String, leaseUntil: Timestamp, now: Timestamp, tenantCap: Int?) async throws -> [ClaimedJob] {
        guard limit > 0 else { return [] }
        let claim: @Sendable (Transaction) async throws -> [(claimed: ClaimedJob, written: PostgresTransitions.WrittenJob)] = { transaction in
            try await PostgresTransitions.claim(transaction, upTo: limit, runner: runner, leaseUntil: leaseUntil, now: now, tenantCap: tenantCap)
        }
        // With a cap, claims take turns (every replica's): each counts the running jobs after the last one committed,
        // so two cannot both pass it. Without one, a claim is its own transaction and skips what others hold.
        let claimed =
            if tenantCap != nil {
                try await storage.write { transaction in
                    try await transaction.run("SELECT pg_advisory_xact_lock(\(Self.claimLock))")
                    return try await claim(transaction)
                }
            } else {
                try await storage.autocommit(claim)
            }
        // The clients' polls woken by the claim are answered with the jobs as claimed, without a read.
        for (_, written) in claimed { storage.feed.rememberPolled(written.job, tenant: written.tenant, version: written.version) }
        storage.liveUploads.hold(claimed.map(\.claimed.lease))
        return claimed.map(\.claimed)
    }

    func renewLeases(_ leases: [JobLease], until: Timestamp) async throws -> LeaseRenewal {
        guard !leases.isEmpty else { return LeaseRenewal() }
        let rows = try await storage.run(
            """
            WITH locked AS MATERIALIZED (
                -- In id order, as every statement that locks several jobs: two of them never wait for each other.
                SELECT id FROM jobs WHERE id = ANY(\(leases.map(\.jobID.rawValue))::text[]) ORDER BY id FOR UPDATE
            )
            UPDATE jobs SET locked_until = \(until)
            FROM unnest(\(leases.map(\.jobID.rawValue))::text[], \(leases.map(\.runner))::text[], \(leases.map(\.attempt))::bigint[])
                AS lease (id, runner, attempt)
                JOIN locked ON locked.id = lease.id
            WHERE jobs.id = lease.id AND jobs.locked_by = lease.runner AND jobs.attempt = lease.attempt
                AND jobs.state = \(JobState.running.rawValue)
            RETURNING jobs.id, jobs.cancel_requested
            """)
        var renewal = LeaseRenewal()
        for row in rows {
            let (id, cancel) = try row.decode((String, Bool).self)
            renewal.held.insert(JobID(id))
            if cancel { renewal.cancelRequested.insert(JobID(id)) }
        }
        return renewal
    }

    func reclaimExpired(now: Timestamp) async throws -> [JobID] {
        try await storage.write { transaction in
            let expired: [JobID] = try await transaction.rows(
                """
                SELECT id FROM jobs WHERE state = '\(unescaped: JobState.running.rawValue)' AND locked_until <= \(now)
                ORDER BY id FOR UPDATE SKIP LOCKED
                """
            ).map { try $0("id") }
            return try await PostgresTransitions.putBack(transaction, jobIDs: expired, clearCancel: false)
        }
    }

    func reclaimRunning(heldBy runner: String?) async throws -> [JobID] {
        try await storage.write { transaction in
            let held: [JobID] = try await transaction.rows(
                """
                SELECT id FROM jobs WHERE state = '\(unescaped: JobState.running.rawValue)' AND (\(runner)::text IS NULL OR locked_by = \(runner))
                ORDER BY id FOR UPDATE
                """
            ).map { try $0("id") }
            return try await PostgresTransitions.putBack(transaction, jobIDs: held, clearCancel: false)
        }
    }

    func updateUpload(jobID: JobID, mediaID: MediaID, state: UploadState, attempts: Int, error: String?) {
        storage.uploadProgress.update(jobID: jobID, mediaID: mediaID, state: state, attempts: attempts, error: error)
    }

    func reportBytes(jobID: JobID, mediaID: MediaID, bytes: Int) {
        storage.uploadProgress.report(jobID: jobID, mediaID: mediaID, bytes: bytes)
    }

    func isCancelRequested(jobID: JobID) async throws -> Bool {
        try await storage.run("SELECT cancel_requested FROM jobs WHERE id = \(jobID)").first?.decode(Bool.self) ?? false
    }

    func commit(_ lease: JobLease, objects: [MediaID: StoredObject], now: Timestamp) async throws -> JobCompletion {
        let uploads = storage.uploadProgress.uploads(of: lease.jobID)
        defer { storage.liveUploads.release(lease.jobID) }
        // The usual commit goes in one statement with the others made meanwhile, its own transaction; a lost lease, a
        // cancel, a missing object, webhooks to tell or a failed statement take the long way, which says which.
        let commit = PostgresTransitions.Commit(lease: lease, objects: objects, uploads: uploads, now: now)
        let committed = try? await storage.commits.submit(commit) { commits in
            do {
                let committed = try await storage.autocommit { try await PostgresTransitions.commit($0, commits) }
                return commits.map { .success(committed[$0.lease.jobID]) }
            } catch {
                return commits.map { _ in .failure(error) }
            }
        }
        if let committed {
            // The clients' polls of it (woken by this change) are answered with it, without a read.
            storage.feed.rememberPolled(committed.job, tenant: committed.tenant, version: committed.version)
            return .done(committed.job)
        }
        return try await storage.write { transaction in
            guard let held = try await Self.held(transaction, lease) else { return .lostLease }
            guard !held.cancelRequested else { return .cancelRequested }
            try await PostgresTransitions.recordUploads(transaction, jobID: lease.jobID, uploads)
            try await PostgresTransitions.commit(transaction, jobID: lease.jobID, postID: held.postID, objects: objects, now: now)
            return .done(try await PostgresRows.existingJob(transaction, lease.jobID))
        }
    }

    func fail(_ lease: JobLease, error: Job.Failure, now: Timestamp) async throws -> JobCompletion {
        try await end(lease, .fail, error: error, now: now)
    }

    func finishCancelled(_ lease: JobLease, now: Timestamp) async throws -> JobCompletion {
        try await end(lease, .cancel, error: Self.cancelledFailure, now: now)
    }

    func requeue(_ lease: JobLease) async throws {
        let uploads = storage.uploadProgress.uploads(of: lease.jobID)
        defer { storage.liveUploads.release(lease.jobID) }
        try await storage.write { transaction in
            guard try await Self.held(transaction, lease) != nil else { return }
            try await PostgresTransitions.recordUploads(transaction, jobID: lease.jobID, uploads)  // their attempts count on
            try await PostgresTransitions.putBack(transaction, jobIDs: [lease.jobID], clearCancel: true)
        }
    }

    // MARK: Implementation

    /// The advisory lock capped claims take in turn: "CLAIM" in ASCII (the migrations' is "HERALD").
    static let claimLock: Int64 = 0x43_4C41_494D

    /// The hot statement's name (``HotStatement``): the runner asks each time it waits.
    enum NextScheduled: HotStatementSite {}

    private func end(_ lease: JobLease, _ step: Transition, error: Job.Failure, now: Timestamp) async throws -> JobCompletion {
        let uploads = storage.uploadProgress.uploads(of: lease.jobID)
        defer { storage.liveUploads.release(lease.jobID) }
        return try await storage.write { transaction in
            guard let held = try await Self.held(transaction, lease) else { return .lostLease }
            try await PostgresTransitions.recordUploads(transaction, jobID: lease.jobID, uploads)
            try await PostgresTransitions.end(transaction, step, jobID: lease.jobID, postID: held.postID, error: error, now: now)
            return .done(try await PostgresRows.existingJob(transaction, lease.jobID))
        }
    }

    /// The running job's post and cancel flag if `lease` holds it, its row locked until the commit (the fencing check:
    /// a reclaim or another replica's claim waits, and finds it moved on).
    private static func held(_ transaction: Transaction, _ lease: JobLease) async throws -> (postID: PostID, cancelRequested: Bool)? {
        guard
            let row = try await transaction.row(
                """
                SELECT post_id, cancel_requested FROM jobs
                WHERE id = \(lease.jobID) AND state = \(JobState.running.rawValue) AND locked_by = \(lease.runner) AND attempt = \(lease.attempt)
                FOR UPDATE
                """)
        else { return nil }
        return (try row("post_id"), try row("cancel_requested"))
    }
}
