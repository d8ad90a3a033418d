import HeraldCore
import HeraldStorage
import PostgresNIO

/// Reads one job for a status poll on the caller's (HTTP) thread, with one statement (one snapshot: the job and its
/// uploads always agree), on a connection of ``BlockingConnections``; or from memory, while the change feed says the
/// job has not moved since the last poll read it or this replica wrote it (``ChangeFeed/polledJob(id:tenant:)``). A long
/// poll reads the same way through the pool (``read(id:tenant:)``).
struct PostgresJobStatusReader: JobStatusReader {
    let storage: PostgresStorage

    /// The job's columns, then its uploads' (one row per medium, in position order; NULL on the row of a job without).
    static let selection = """
        SELECT \(JobColumn.all.map { "jobs.\($0)" }.joined(separator: ", ")),
               uploads.media_id AS upload_media_id, uploads.state AS upload_state, uploads.attempts AS upload_attempts,
               uploads.error AS upload_error, media.size AS upload_size, uploads.bytes_sent AS upload_bytes_sent,
               jobs.version AS job_version
        FROM jobs
        LEFT JOIN media ON media.post_id = jobs.post_id
        LEFT JOIN uploads ON uploads.job_id = jobs.id AND uploads.media_id = media.id
        """

    /// ``selection`` of one job of one tenant.
    static let query = selection + " WHERE jobs.id = $1 AND jobs.tenant = $2 ORDER BY media.position"

    /// The job and its version from the rows of ``selection``; nil if there are none.
    static func job(_ rows: [Columns]) throws -> (job: Job, version: Int)? {
        guard let first = rows.first else { return nil }
        guard var job = Job(columns: JobRow(columns: first), uploads: []) else {
            throw UnreadableRow(table: "jobs", id: (try? first("id", as: String.self)) ?? "?")
        }
        for row in rows {
            guard let mediaID: MediaID = try row("upload_media_id") else { continue }
            guard let state = UploadState(rawValue: try row("upload_state")) else {
                throw UnreadableRow(table: "uploads", id: "\(job.id)/\(mediaID)")
            }
            job.uploads.append(
                Job.Upload(
                    mediaID: mediaID, state: state, attempts: try row("upload_attempts"), error: try row("upload_error"),
                    size: try row("upload_size"), bytesSent: try row("upload_bytes_sent")))
        }
        return (job, try first("job_version"))
    }

    func job(id: JobID, tenant: Tenant) throws -> Job? {
        if let job = remembered(id: id, tenant: tenant) { return job }
        var bindings = PostgresBindings(capacity: 2)
        bindings.append(id)
        bindings.append(tenant.rawValue)
        let rows = try storage.blocking.rows(PostgresQuery(unsafeSQL: Self.query, binds: bindings)).map(Columns.init)
        return try Self.job(rows).map { remembering($0, tenant: tenant) }
    }

    /// The same job through the pool, for a task (a long poll): no thread waits on the database.
    func read(id: JobID, tenant: Tenant) async throws -> Job? {
        try await current(id: id, tenant: tenant).map { read in
            var job = read.job
            storage.uploadProgress.apply(to: &job)
            return job
        }
    }

    /// The job and its version as the polls' memory has them, else read through the pool and remembered (a long poll's
    /// read and an event stream's snapshot).
    func current(id: JobID, tenant: Tenant) async throws -> (job: Job, version: Int)? {
        if let polled = storage.feed.polled(id: id, tenant: tenant) { return polled }
        guard let read = try await storage.autocommit({ try await PostgresRows.job($0, id: id, tenant: tenant) }) else { return nil }
        storage.feed.rememberPolled(read.job, tenant: tenant, version: read.version)
        return read
    }

    /// The job from the polls' memory, with its uploads' live progress.
    private func remembered(id: JobID, tenant: Tenant) -> Job? {
        guard var job = storage.feed.polledJob(id: id, tenant: tenant) else { return nil }
        storage.uploadProgress.apply(to: &job)
        return job
    }

    /// `read`'s job, remembered for the next polls, with its uploads' live progress.
    private func remembering(_ read: (job: Job, version: Int), tenant: Tenant) -> Job {
        storage.feed.rememberPolled(read.job, tenant: tenant, version: read.version)
        var job = read.job
        storage.uploadProgress.apply(to: &job)
        return job
    }
}
