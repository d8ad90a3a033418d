import GRDB
public import HeraldCore

/// Publish jobs: read and cancelled by clients, claimed, leased and finished by the runner.
///
/// Every method that writes runs one write transaction, so a job, its post, its media and its uploads always move
/// together; the runner's methods check the lease (`locked_by`) inside that transaction.
public struct JobRepository: Sendable {
    /// What a cancel request found and did.
    public enum CancelRequest: Sendable, Equatable {
        /// Was queued or scheduled: the job and its post are cancelled, the media stay attached (staged) (202).
        case cancelledNow(Job)
        /// Running: `cancel_requested` is set (idempotent); the runner stops it (202).
        case requested(Job)
        /// Already cancelled (200).
        case alreadyCancelled(Job)
        /// Succeeded or failed (409).
        case finished(Job)
        /// No such job (404).
        case notFound
    }

    /// What a runner's final write did.
    public enum Completion: Sendable, Equatable {
        /// The final state was written.
        case done(Job)
        /// This runner no longer holds the job: nothing written.
        case lostLease
        /// (commit only) `cancel_requested` was set before the commit: nothing written; cancel instead.
        case cancelRequested
    }

    private static let cancelledMessage = "The job was cancelled."

    private let pool: DatabasePool

    public init(_ storage: Storage) {
        pool = storage.pool
    }

    // MARK: Reading

    /// The job with this id, its uploads in media position order; nil if there is none.
    public func find(id: String) async throws -> Job? {
        try await pool.read { db in try Rows.job(db, id: id) }
    }

    /// One page of jobs, newest first (`created_at DESC, id DESC`), optionally of one state, strictly after `cursor`.
    public func list(state: JobState?, limit: Int, after cursor: HeraldCore.Cursor?) async throws -> Page<Job> {
        try await pool.read { db in
            let rows = try Rows.listRows(db, table: "jobs", state: state?.rawValue, limit: limit, after: cursor)
            return Page(fetched: try Rows.jobs(db, rows), limit: limit, cursor: \.cursor)
        }
    }

    /// How many jobs are running, queued and scheduled (for `/v1/queue` and metrics).
    public func counts() async throws -> (running: Int, queued: Int, scheduled: Int) {
        try await pool.read { db in
            let rows = try Row.fetchAll(
                db.cachedStatement(
                    sql: "SELECT state, COUNT(*) AS count FROM jobs WHERE state IN ('running', 'queued', 'scheduled') GROUP BY state"
                )
            )
            var counts: [String: Int] = [:]
            for row in rows { counts[row["state"]] = row["count"] }
            return (counts["running"] ?? 0, counts["queued"] ?? 0, counts["scheduled"] ?? 0)
        }
    }

    // MARK: Cancelling

    /// Cancels a queued or scheduled job at once (error code `cancelled`, post cancelled, uploads cancelled, media
    /// staged and still attached); marks a running one `cancel_requested` for its runner.
    public func requestCancel(id: String, now: Timestamp) async throws -> CancelRequest {
        try await pool.write { db in
            guard let row = try Row.fetchOne(db.cachedStatement(sql: "SELECT state, post_id FROM jobs WHERE id = ?"), arguments: [id]) else {
                return .notFound
            }
            guard let state = JobState(rawValue: row["state"]) else { throw UnreadableRow(table: "jobs", id: id) }
            switch state {
            case .queued, .scheduled:
                try Self.finish(db, jobID: id, postID: row["post_id"], as: .cancelled, error: Self.cancelledFailure, now: now)
                return .cancelledNow(try Self.job(db, id))
            case .running:
                try db.run("UPDATE jobs SET cancel_requested = 1 WHERE id = ?", [id])
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
    public func promoteDue(now: Timestamp) async throws -> Int {
        try await pool.write { db in
            try db.run(
                """
                UPDATE posts SET state = 'queued'
                WHERE state = 'scheduled' AND id IN (SELECT post_id FROM jobs WHERE state = 'scheduled' AND run_at <= ?)
                """,
                [now.rfc3339]
            )
            try db.run("UPDATE jobs SET state = 'queued' WHERE state = 'scheduled' AND run_at <= ?", [now.rfc3339])
            return db.changesCount
        }
    }

    /// The earliest `run_at` among scheduled jobs (for the runner's timer), nil if none.
    public func nextScheduledRunAt() async throws -> Timestamp? {
        try await pool.read { db in
            let text = try String.fetchOne(
                db.cachedStatement(sql: "SELECT run_at FROM jobs WHERE state = 'scheduled' ORDER BY run_at LIMIT 1")
            )
            return text.flatMap { Timestamp(rfc3339: $0) }
        }
    }

    /// Atomically claims the next due queued job in claim order (priority rank, `run_at`, `created_at`, id): it
    /// becomes running (attempt + 1, locked by `runner` until `leaseUntil`, `started_at` set once), its post
    /// publishing, every upload row pending (attempts kept), its media uploading. Nil if no job is due.
    public func claim(runner: String, leaseUntil: Timestamp, now: Timestamp) async throws -> ClaimedJob? {
        try await pool.write { db in
            guard
                let row = try Row.fetchOne(
                    db.cachedStatement(
                        sql: """
                            SELECT id, post_id, attempt FROM jobs
                            WHERE state = 'queued' AND run_at <= ?
                            ORDER BY priority, run_at, created_at, id
                            LIMIT 1
                            """
                    ),
                    arguments: [now.rfc3339]
                )
            else { return nil }
            let jobID: String = row["id"]
            let postID: String = row["post_id"]
            try db.run(
                """
                UPDATE jobs SET state = 'running', attempt = attempt + 1, locked_by = ?, locked_until = ?,
                                started_at = coalesce(started_at, ?)
                WHERE id = ?
                """,
                [runner, leaseUntil.rfc3339, now.rfc3339, jobID]
            )
            try db.run("UPDATE posts SET state = 'publishing' WHERE id = ?", [postID])
            try db.run("UPDATE uploads SET state = 'pending', error = NULL WHERE job_id = ?", [jobID])
            try db.run("UPDATE media SET state = 'uploading' WHERE post_id = ?", [postID])

            let mediaRows = try Row.fetchAll(
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
            let media = try mediaRows.map { row in
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
            return ClaimedJob(jobID: jobID, postID: postID, attempt: (row["attempt"] as Int) + 1, media: media)
        }
    }

    /// Extends the lease; false if this runner no longer holds the job (then it must stop and not commit).
    public func renewLease(jobID: String, runner: String, until: Timestamp) async throws -> Bool {
        try await pool.write { db in
            try db.run(
                "UPDATE jobs SET locked_until = ? WHERE id = ? AND state = 'running' AND locked_by = ?",
                [until.rfc3339, jobID, runner]
            )
            return db.changesCount == 1
        }
    }

    /// Running jobs whose lease ended at or before `now` (a crashed process) go back to queued with the lock
    /// cleared; their posts become queued, their media staged, their uploads pending. Returns their ids.
    public func reclaimExpired(now: Timestamp) async throws -> [String] {
        try await pool.write { db in
            let rows = try Row.fetchAll(
                db.cachedStatement(sql: "SELECT id, post_id FROM jobs WHERE state = 'running' AND locked_until <= ? ORDER BY id"),
                arguments: [now.rfc3339]
            )
            for row in rows {
                try Self.putBack(db, jobID: row["id"], postID: row["post_id"], clearCancel: false)
            }
            return rows.map { $0["id"] }
        }
    }

    /// Progress of one upload, written as it changes; ignored once the job is no longer running.
    public func updateUpload(jobID: String, mediaID: String, state: UploadState, attempts: Int, error: String?) async throws {
        try await pool.write { db in
            try db.run(
                """
                UPDATE uploads SET state = ?, attempts = ?, error = ?
                WHERE job_id = ? AND media_id = ? AND EXISTS (SELECT 1 FROM jobs WHERE id = ? AND state = 'running')
                """,
                [state.rawValue, attempts, error, jobID, mediaID, jobID]
            )
        }
    }

    /// Whether cancellation was requested (false for an unknown job).
    public func isCancelRequested(jobID: String) async throws -> Bool {
        try await pool.read { db in
            try Int.fetchOne(db.cachedStatement(sql: "SELECT cancel_requested FROM jobs WHERE id = ?"), arguments: [jobID]) == 1
        }
    }

    /// ONE transaction, only while `runner` holds the job and no cancel was requested: the post is published
    /// (`published_at = now`), each medium uploaded with its url and object key, every upload uploaded, and the job
    /// succeeded (finished, lock cleared).
    ///
    /// Throws, writing nothing, when `urls` lacks one of the post's media: a post is never half-published.
    public func commit(
        jobID: String,
        runner: String,
        urls: [String: (url: String, objectKey: String)],
        now: Timestamp
    ) async throws -> Completion {
        try await pool.write { db in
            guard let held = try Self.held(db, jobID: jobID, runner: runner) else { return .lostLease }
            guard !held.cancelRequested else { return .cancelRequested }

            let mediaIDs = try String.fetchAll(
                db.cachedStatement(sql: "SELECT media_id FROM uploads WHERE job_id = ?"),
                arguments: [jobID]
            )
            for mediaID in mediaIDs {
                guard let stored = urls[mediaID] else {
                    throw UnreadableRow(table: "media", id: mediaID, reason: "has no url: the post cannot be committed")
                }
                try db.run(
                    "UPDATE media SET state = 'uploaded', url = ?, object_key = ? WHERE id = ?",
                    [stored.url, stored.objectKey, mediaID]
                )
            }
            try db.run("UPDATE uploads SET state = 'uploaded', error = NULL WHERE job_id = ?", [jobID])
            try db.run("UPDATE posts SET state = 'published', published_at = ? WHERE id = ?", [now.rfc3339, held.postID])
            try db.run(
                """
                UPDATE jobs SET state = 'succeeded', finished_at = ?, locked_by = NULL, locked_until = NULL,
                                error_code = NULL, error_message = NULL, error_media_id = NULL
                WHERE id = ?
                """,
                [now.rfc3339, jobID]
            )
            return .done(try Self.job(db, jobID))
        }
    }

    /// The job failed with `error`; its post failed; its media back to staged (url cleared, still attached); uploads
    /// still pending or uploading cancelled. Only while `runner` holds the job.
    public func fail(jobID: String, runner: String, error: Job.Failure, now: Timestamp) async throws -> Completion {
        try await pool.write { db in
            guard let held = try Self.held(db, jobID: jobID, runner: runner) else { return .lostLease }
            try Self.finish(db, jobID: jobID, postID: held.postID, as: .failed, error: error, now: now)
            return .done(try Self.job(db, jobID))
        }
    }

    /// The job cancelled (error code `cancelled`, `cancel_requested` 1); its post cancelled; media staged; uploads
    /// not yet uploaded cancelled. Only while `runner` holds the job.
    public func finishCancelled(jobID: String, runner: String, now: Timestamp) async throws -> Completion {
        try await pool.write { db in
            guard let held = try Self.held(db, jobID: jobID, runner: runner) else { return .lostLease }
            try Self.finish(db, jobID: jobID, postID: held.postID, as: .cancelled, error: Self.cancelledFailure, now: now)
            return .done(try Self.job(db, jobID))
        }
    }

    /// Shutdown: the job back to queued (`cancel_requested` 0, lock cleared), its post queued, media staged, uploads
    /// pending. Does nothing unless `runner` holds the job.
    public func requeue(jobID: String, runner: String) async throws {
        try await pool.write { db in
            guard let held = try Self.held(db, jobID: jobID, runner: runner) else { return }
            try Self.putBack(db, jobID: jobID, postID: held.postID, clearCancel: true)
        }
    }

    // MARK: Implementation

    private static let cancelledFailure = Job.Failure(code: .cancelled, message: cancelledMessage)

    private static func job(_ db: Database, _ id: String) throws -> Job {
        guard let job = try Rows.job(db, id: id) else { throw UnreadableRow(table: "jobs", id: id, reason: "is missing") }
        return job
    }

    /// The running job's post and cancel flag, if `runner` holds it.
    private static func held(_ db: Database, jobID: String, runner: String) throws -> (postID: String, cancelRequested: Bool)? {
        guard
            let row = try Row.fetchOne(
                db.cachedStatement(sql: "SELECT post_id, cancel_requested FROM jobs WHERE id = ? AND state = 'running' AND locked_by = ?"),
                arguments: [jobID, runner]
            )
        else { return nil }
        return (row["post_id"], (row["cancel_requested"] as Int) != 0)
    }

    /// Ends a job as failed or cancelled, with its post; media staged and attached; unfinished uploads cancelled.
    private static func finish(
        _ db: Database,
        jobID: String,
        postID: String,
        as state: JobState,
        error: Job.Failure,
        now: Timestamp
    ) throws {
        let cancelled = state == .cancelled
        try db.run(
            """
            UPDATE jobs SET state = ?, finished_at = ?, locked_by = NULL, locked_until = NULL,
                            cancel_requested = CASE WHEN ? THEN 1 ELSE cancel_requested END,
                            error_code = ?, error_message = ?, error_media_id = ?
            WHERE id = ?
            """,
            [state.rawValue, now.rfc3339, cancelled, error.code.rawValue, error.message, error.mediaID, jobID]
        )
        try db.run("UPDATE posts SET state = ? WHERE id = ?", [cancelled ? PostState.cancelled.rawValue : PostState.failed.rawValue, postID])
        try db.run("UPDATE media SET state = 'staged', url = NULL WHERE post_id = ?", [postID])
        // A failed job keeps the failed upload's row as the runner wrote it; a cancel stops everything not in the store.
        let unfinished = cancelled ? "state <> 'uploaded'" : "state IN ('pending', 'uploading')"
        try db.run("UPDATE uploads SET state = 'cancelled' WHERE job_id = ? AND \(unfinished)", [jobID])
    }

    /// Puts a running job back in the queue with its post: lock cleared, media staged, uploads pending.
    private static func putBack(_ db: Database, jobID: String, postID: String, clearCancel: Bool) throws {
        try db.run(
            """
            UPDATE jobs SET state = 'queued', locked_by = NULL, locked_until = NULL,
                            cancel_requested = CASE WHEN ? THEN 0 ELSE cancel_requested END
            WHERE id = ?
            """,
            [clearCancel, jobID]
        )
        try db.run("UPDATE posts SET state = 'queued' WHERE id = ?", [postID])
        try db.run("UPDATE media SET state = 'staged', url = NULL WHERE post_id = ?", [postID])
        try db.run("UPDATE uploads SET state = 'pending' WHERE job_id = ?", [jobID])
    }
}

/// A job the runner has just claimed: what it needs to upload the post's media.
public struct ClaimedJob: Sendable, Equatable {
    /// The job's id.
    public var jobID: String
    /// Its post's id.
    public var postID: String
    /// This run's attempt number (1 for the first).
    public var attempt: Int
    /// The post's media, in position order.
    public var media: [ClaimedMedia]

    /// Creates a claimed job.
    public init(jobID: String, postID: String, attempt: Int, media: [ClaimedMedia]) {
        self.jobID = jobID
        self.postID = postID
        self.attempt = attempt
        self.media = media
    }
}

/// One medium of a claimed job.
public struct ClaimedMedia: Sendable, Equatable {
    /// The medium's id.
    public var mediaID: String
    /// Where its bytes are staged, relative to the data directory.
    public var stagingPath: String
    /// Its size in bytes.
    public var size: Int
    /// The SHA-256 of its bytes, 64 lowercase hex digits.
    public var sha256: String
    /// Its content type.
    public var contentType: MediaType
    /// Upload attempts so far (from the uploads row).
    public var attempts: Int

    /// Creates a claimed medium.
    public init(mediaID: String, stagingPath: String, size: Int, sha256: String, contentType: MediaType, attempts: Int) {
        self.mediaID = mediaID
        self.stagingPath = stagingPath
        self.size = size
        self.sha256 = sha256
        self.contentType = contentType
        self.attempts = attempts
    }
}
