import HeraldCore
import HeraldStorage
import PostgresNIO

/// Rows to HeraldCore objects on PostgreSQL, in one place; each loader reads a page's children (a post's media, a
/// job's uploads) with one query for the whole page.
enum PostgresRows {
    // MARK: Jobs

    /// The job object's columns (``JobColumn/all``) and its version.
    static let jobColumns = (JobColumn.all + ["version"]).joined(separator: ", ")
    /// The same, qualified by the table (a statement that joins another table with an `attempt` or a `state`).
    static let qualifiedJobColumns = (JobColumn.all + ["version"]).map { "jobs.\($0)" }.joined(separator: ", ")

    /// The job with this id and its uploads, with its version, in one statement; nil if none (of `tenant`, when given).
    static func job(_ transaction: Transaction, id: JobID, tenant: Tenant? = nil) async throws -> (job: Job, version: Int)? {
        try PostgresJobStatusReader.job(
            try await transaction.rows(
                JobRead.self,
                """
                \(unescaped: PostgresJobStatusReader.selection)
                WHERE jobs.id = \(id) AND (\(tenant?.rawValue)::text IS NULL OR jobs.tenant = \(tenant?.rawValue)::text)
                ORDER BY media.position
                """))
    }

    /// The hot statement's name (``HotStatement``).
    enum JobRead: HotStatementSite {}

    /// `rows` cut into runs of consecutive rows with one value of the text `column` (a statement's rows ordered by it:
    /// a job or post and its children, one row each).
    static func runs(_ rows: [Columns], by column: String) throws -> [ArraySlice<Columns>] {
        var runs: [ArraySlice<Columns>] = []
        var start = rows.startIndex
        while start < rows.endIndex {
            let value: String = try rows[start](column)
            var end = start + 1
            while end < rows.endIndex, try rows[end](column, as: String.self) == value { end += 1 }
            runs.append(rows[start..<end])
            start = end
        }
        return runs
    }

    /// The job with this id, which must exist.
    static func existingJob(_ transaction: Transaction, _ id: JobID) async throws -> Job {
        guard let read = try await job(transaction, id: id) else { throw UnreadableRow(table: "jobs", id: id.rawValue, reason: "is missing") }
        return read.job
    }

    /// The jobs of `rows` (``jobColumns``), in the same order, with their uploads read in one query.
    static func jobs(_ transaction: Transaction, _ rows: [Columns]) async throws -> [Job] {
        guard !rows.isEmpty else { return [] }
        let ids: [String] = try rows.map { try $0("id") }
        var uploads: [JobID: [Job.Upload]] = [:]
        let uploadRows = try await transaction.rows(
            """
            SELECT uploads.job_id, uploads.media_id, uploads.state, uploads.attempts, uploads.error, media.size, uploads.bytes_sent
            FROM uploads JOIN media ON media.id = uploads.media_id
            WHERE uploads.job_id = ANY(\(ids))
            ORDER BY uploads.job_id, media.position, media.id
            """)
        for row in uploadRows {
            let jobID: JobID = try row("job_id")
            let mediaID: MediaID = try row("media_id")
            guard let state = UploadState(rawValue: try row("state")) else { throw UnreadableRow(table: "uploads", id: "\(jobID)/\(mediaID)") }
            uploads[jobID, default: []].append(
                Job.Upload(
                    mediaID: mediaID, state: state, attempts: try row("attempts"), error: try row("error"), size: try row("size"),
                    bytesSent: try row("bytes_sent")))
        }
        return try rows.map { row in
            guard let job = Job(columns: JobRow(columns: row), uploads: uploads[try row("id")] ?? []) else {
                throw UnreadableRow(table: "jobs", id: (try? row("id", as: String.self)) ?? "?")
            }
            return job
        }
    }

    // MARK: Posts

    static let postColumns = "id, text, state, priority, scheduled_at, created_at, published_at, job_id"

    /// The post with this id and its media in position order, or nil; of `tenant` only, when given.
    static func post(_ transaction: Transaction, id: PostID, tenant: Tenant? = nil) async throws -> Post? {
        let rows =
            if let tenant {
                try await transaction.rows("SELECT \(unescaped: postColumns) FROM posts WHERE id = \(id) AND tenant = \(tenant.rawValue)")
            } else {
                try await transaction.rows("SELECT \(unescaped: postColumns) FROM posts WHERE id = \(id)")
            }
        return try await posts(transaction, rows).first
    }

    /// The posts of `rows` (``postColumns``), in the same order, with their media read in one query.
    static func posts(_ transaction: Transaction, _ rows: [Columns]) async throws -> [Post] {
        guard !rows.isEmpty else { return [] }
        let ids: [String] = try rows.map { try $0("id") }
        var media: [PostID: [Media]] = [:]
        for row in try await transaction.rows(
            "SELECT \(unescaped: mediaColumns) FROM media WHERE post_id = ANY(\(ids)) ORDER BY post_id, position")
        {
            let medium = try self.media(row)
            media[try row("post_id"), default: []].append(medium)
        }
        return try rows.map { row in
            let id: PostID = try row("id")
            guard let state = PostState(rawValue: try row("state")), let priority = Priority(rawValue: try row("priority")) else {
                throw UnreadableRow(table: "posts", id: id.rawValue)
            }
            return Post(
                id: id, text: try row("text"), state: state, media: media[id] ?? [], jobID: try row("job_id"), priority: priority,
                scheduledAt: try row("scheduled_at"), createdAt: try row("created_at"), publishedAt: try row("published_at"))
        }
    }

    /// The post and job as stored now.
    static func postAndJob(_ transaction: Transaction, postID: PostID, jobID: JobID) async throws -> PostAndJob {
        guard let post = try await post(transaction, id: postID) else {
            throw UnreadableRow(table: "posts", id: postID.rawValue, reason: "is missing")
        }
        return PostAndJob(post: post, job: try await existingJob(transaction, jobID))
    }

    // MARK: Media

    static let mediaColumns = "id, content_type, size, sha256, description, state, url, post_id, created_at"

    /// The API object of a `media` row (``mediaColumns``).
    static func media(_ row: Columns) throws -> Media {
        let id: MediaID = try row("id")
        guard let type = MediaType(rawValue: try row("content_type")), let state = MediaState(rawValue: try row("state")) else {
            throw UnreadableRow(table: "media", id: id.rawValue)
        }
        return Media(
            id: id, contentType: type, size: try row("size"), sha256: try row("sha256"), description: try row("description"), state: state,
            url: try row("url"), postID: try row("post_id"), createdAt: try row("created_at"))
    }

    // MARK: Lists

    /// The list query of `table` (`columns` of it), newest first, optionally of one state and strictly after `cursor`:
    /// `limit + 1` rows. `(created_at, id) < (…)` walks the tenant's list index; `keys` lists every tenant (nil). A
    /// condition whose parameter is NULL drops out as the statement is planned with its values.
    static func listRows(
        _ transaction: Transaction, table: String, columns: String, tenant: Tenant?, state: String?, limit: Int, after cursor: Cursor?
    ) async throws -> [Columns] {
        // Tables without a state (keys, webhooks) are never asked for one: the column is named only when it is.
        try await transaction.rows(
            """
            SELECT \(unescaped: columns) FROM \(unescaped: table)
            WHERE (\(tenant?.rawValue)::text IS NULL OR tenant = \(tenant?.rawValue))
              AND (\(state)::text IS NULL OR \(unescaped: state == nil ? "NULL" : "state") = \(state))
              AND (\(cursor?.createdAt)::timestamptz IS NULL OR (created_at, id) < (\(cursor?.createdAt), \(cursor?.id)))
            ORDER BY created_at DESC, id DESC LIMIT \(max(limit, 0) + 1)
            """)
    }
}
