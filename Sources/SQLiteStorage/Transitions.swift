import GRDB
import HeraldCore
import HeraldStorage

/// The SQL of every step of the publish state machine (``Transition``), in one place.
///
/// Each function moves a job together with its post, the post's media and the job's uploads, binding the states
/// the domain names rather than spelling them in SQL; the job's `version` grows, so that the change is announced once
/// the caller's transaction commits (``CommitObserver``). Callers check leases and outcomes first.
enum Transitions {
    // MARK: New jobs

    /// A new post (queued, or scheduled while `scheduledAt > now`) with its first job; its media attached in order.
    ///
    /// The media must exist and be unattached (``SQLitePostRepository`` checks first): a medium that cannot be attached
    /// throws, rolling back the transaction.
    static func create(
        _ db: Database, postID: PostID, jobID: JobID, tenant: Tenant, request: PostRequest, now: Timestamp
    ) throws {
        let (step, runAt) = request.initialSchedule(now: now)
        try db.run(
            """
            INSERT INTO posts (id, text, state, priority, scheduled_at, created_at, published_at, job_id, tenant)
            VALUES (?, ?, ?, ?, ?, ?, NULL, ?, ?)
            """,
            [postID, request.text, step.post.rawValue, request.priority.rawValue, request.scheduledAt?.rfc3339, now.rfc3339, jobID, tenant.rawValue]
        )
        for (position, mediaID) in request.mediaIDs.enumerated() {
            try db.run(
                "UPDATE media SET post_id = ?, position = ? WHERE id = ? AND post_id IS NULL AND tenant = ?",
                [postID, position, mediaID, tenant.rawValue]
            )
            guard db.changesCount == 1 else { throw UnreadableRow(table: "media", id: mediaID.rawValue, reason: "could not be attached") }
        }
        try insertJob(
            db, step, jobID: jobID, postID: postID, priority: request.priority, runAt: runAt, traceparent: request.traceparent, now: now)
    }

    /// A failed or cancelled post gets a new job that runs now, with fresh uploads; the post points at it.
    static func republish(
        _ db: Database, postID: PostID, priority: Priority, jobID: JobID, traceparent: String?, now: Timestamp
    ) throws {
        try insertJob(db, .enqueue, jobID: jobID, postID: postID, priority: priority, runAt: now, traceparent: traceparent, now: now)
        try db.run("UPDATE posts SET state = ?, published_at = NULL, job_id = ? WHERE id = ?", [Transition.enqueue.post.rawValue, jobID, postID])
        // Its objects are wanted again (the new job waits for a DELETE already under way: see ObjectCleaner).
        try SQLiteObjectDeletionRepository.cancel(db, postID: postID)
    }

    // MARK: The runner's steps

    /// Scheduled jobs whose `run_at <= now` become queued, with their posts. Returns how many.
    static func promoteDue(_ db: Database, now: Timestamp) throws -> Int {
        let due = try Row.fetchAll(
            // The state as a literal: the partial index jobs_scheduled answers it (a bound value cannot prove its predicate).
            db.cachedStatement(
                sql: """
                    SELECT id, post_id FROM jobs INDEXED BY jobs_scheduled
                    WHERE state = '\(JobState.scheduled.rawValue)' AND run_at <= ? ORDER BY id
                    """),
            arguments: [now.rfc3339]
        )
        for row in due {
            try move(db, .promote, jobID: row["id"], postID: row["post_id"])
        }
        return due.count
    }

    /// The job runs, leased to `runner` until `leaseUntil`; its attempt counts up; `started_at` is set once.
    static func claim(
        _ db: Database, jobID: JobID, postID: PostID, runner: String, leaseUntil: Timestamp, now: Timestamp
    ) throws {
        try move(
            db, .claim, jobID: jobID, postID: postID,
            set: "attempt = attempt + 1, locked_by = ?, locked_until = ?, started_at = coalesce(started_at, ?)",
            [runner, leaseUntil.rfc3339, now.rfc3339]
        )
    }

    /// The post is published: each medium gets its stored object's URL and key; the job succeeded.
    ///
    /// Throws, writing nothing, when `objects` lacks one of the job's media: a post is never half-published.
    static func commit(
        _ db: Database, jobID: JobID, postID: PostID, objects: [MediaID: StoredObject], now: Timestamp
    ) throws {
        let mediaIDs = try MediaID.fetchAll(db.cachedStatement(sql: "SELECT media_id FROM uploads WHERE job_id = ?"), arguments: [jobID])
        for mediaID in mediaIDs {
            guard let stored = objects[mediaID] else {
                throw UnreadableRow(table: "media", id: mediaID.rawValue, reason: "has no stored object: the post cannot be committed")
            }
            try db.run("UPDATE media SET url = ?, object_key = ? WHERE id = ?", [stored.url, stored.key, mediaID])
        }
        try move(
            db, .commit, jobID: jobID, postID: postID, set: "finished_at = ?, \(Self.unlocked), \(Self.noError)", [now.rfc3339], publishedAt: now
        )
    }

    /// The job failed with `error` (or was cancelled, with `error` saying so): finished, unlocked.
    static func end(
        _ db: Database, _ step: Transition, jobID: JobID, postID: PostID, error: Job.Failure, now: Timestamp
    ) throws {
        precondition(step == .fail || step == .cancel, "a job ends with an error only by failing or being cancelled")
        let cancelRequested = step == .cancel ? "cancel_requested = 1, " : ""
        try move(
            db, step, jobID: jobID, postID: postID,
            set: "\(cancelRequested)finished_at = ?, \(Self.unlocked), error_code = ?, error_message = ?, error_media_id = ?",
            [now.rfc3339, error.code.rawValue, error.message, error.mediaID]
        )
        // What the job may have stored is deleted again later, durably: the outbox of the store's clean-up.
        try SQLiteObjectDeletionRepository.enqueue(db, postID: postID, now: now)
    }

    /// A running job back in the queue, to run again from the start; `clearCancel` forgets a cancel request.
    static func putBack(_ db: Database, jobID: JobID, postID: PostID, clearCancel: Bool) throws {
        let cancel = clearCancel ? ", cancel_requested = 0" : ""
        try move(db, .putBack, jobID: jobID, postID: postID, set: "\(Self.unlocked)\(cancel)", [])
    }

    // MARK: Changes within a state

    /// A running job is asked to stop (its runner sees the change and cancels it).
    static func requestCancel(_ db: Database, jobID: JobID) throws {
        try db.run("UPDATE jobs SET cancel_requested = 1, version = version + 1 WHERE id = ?", [jobID])
    }

    /// The uploads as the runner last set them (kept in memory until now: ``UploadProgress``), written in its job's
    /// final transaction before the step that ends it. `bytes_sent` is what the attempt reached; an uploaded medium
    /// counts all its bytes.
    static func recordUploads(_ db: Database, jobID: JobID, _ uploads: [MediaID: UploadProgress.Upload]) throws {
        guard !uploads.isEmpty else { return }
        let statement = try db.cachedStatement(
            sql: """
                UPDATE uploads SET state = ?, attempts = ?, error = ?,
                    bytes_sent = CASE WHEN ? THEN (SELECT size FROM media WHERE id = uploads.media_id) ELSE ? END
                WHERE job_id = ? AND media_id = ?
                """
        )
        for (mediaID, upload) in uploads {
            try statement.execute(arguments: [
                upload.state.rawValue, upload.attempts, upload.error, upload.state == .uploaded, upload.bytes, jobID, mediaID,
            ])
        }
    }

    // MARK: Implementation

    private static let unlocked = "locked_by = NULL, locked_until = NULL"
    private static let noError = "error_code = NULL, error_message = NULL, error_media_id = NULL"

    /// Inserts a job in `step`'s state, of its post's tenant, with one upload per attached medium of the post.
    private static func insertJob(
        _ db: Database, _ step: Transition, jobID: JobID, postID: PostID, priority: Priority, runAt: Timestamp, traceparent: String?,
        now: Timestamp
    ) throws {
        try db.run(
            """
            INSERT INTO jobs (id, post_id, state, priority, attempt, run_at, cancel_requested, created_at, tenant, traceparent)
            VALUES (?, ?, ?, ?, 0, ?, 0, ?, (SELECT tenant FROM posts WHERE id = ?), ?)
            """,
            [jobID, postID, step.job.rawValue, priority.rank, runAt.rfc3339, now.rfc3339, postID, traceparent]
        )
        if let uploads = step.uploads {
            try db.run(
                "INSERT INTO uploads (job_id, media_id, state, attempts) SELECT ?, id, ?, 0 FROM media WHERE post_id = ?",
                [jobID, uploads.to.rawValue, postID]
            )
        }
    }

    /// Moves the job from one of `step.jobFrom` to `step.job` (also setting `set`, bound to `arguments`), and its
    /// post, media and uploads as `step` says. Throws when the job was not in a state the step starts from.
    private static func move(
        _ db: Database, _ step: Transition, jobID: JobID, postID: PostID, set: String = "", _ arguments: StatementArguments = [],
        publishedAt: Timestamp? = nil
    ) throws {
        let extra = set.isEmpty ? "" : ", " + set
        try db.run(
            "UPDATE jobs SET state = ?, version = version + 1\(extra) WHERE id = ? AND state IN (\(databaseQuestionMarks(count: step.jobFrom.count)))",
            [step.job.rawValue] + arguments + [jobID] + StatementArguments(step.jobFrom.map { $0.rawValue })
        )
        guard db.changesCount == 1 else { throw UnreadableRow(table: "jobs", id: jobID.rawValue, reason: "is not in a state \(step) starts from") }
        // A post is published exactly when it has `published_at`: the commit stamps both at once.
        precondition((step.post == .published) == (publishedAt != nil), "only a commit publishes, with its time")
        try db.run("UPDATE posts SET state = ?, published_at = ? WHERE id = ?", [step.post.rawValue, publishedAt?.rfc3339, postID])
        if let media = step.media {
            // A staged medium has no URL: it is published only by a commit.
            let url = media == .staged ? ", url = NULL" : ""
            try db.run("UPDATE media SET state = ?\(url) WHERE post_id = ?", [media.rawValue, postID])
        }
        if let uploads = step.uploads {
            // A fresh run, or a success, forgets the last attempt's error and bytes; a stop keeps them.
            let error = uploads.to == .pending || uploads.to == .uploaded ? ", error = NULL" : ""
            let bytes = uploads.to == .pending ? ", bytes_sent = 0" : ""
            let only = uploads.from.isEmpty ? "" : " AND state IN (\(databaseQuestionMarks(count: uploads.from.count)))"
            try db.run(
                "UPDATE uploads SET state = ?\(error)\(bytes) WHERE job_id = ?\(only)",
                [uploads.to.rawValue, jobID] + StatementArguments(uploads.from.map { $0.rawValue })
            )
        }
        // A job that ends tells its webhooks in this same transaction: the outbox.
        if step.job.isDone { try SQLiteWebhookRepository.enqueue(db, jobID: jobID, postID: postID) }
    }
}
