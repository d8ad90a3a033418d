import GRDB
import HeraldCore
import HeraldStorage

/// Row to HeraldCore object mapping for posts and jobs, in one place; media rows map in ``SQLiteMediaRepository``.
///
/// The loaders read a page's children (a post's media, a job's uploads) with one query for the whole page.
enum Rows {
    // MARK: Posts

    /// The post with this id and its media in position order, or nil; of `tenant` only, when given.
    static func post(_ db: Database, id: PostID, tenant: Tenant? = nil) throws -> Post? {
        let rows =
            if let tenant {
                try Row.fetchAll(db.cachedStatement(sql: "SELECT * FROM posts WHERE id = ? AND tenant = ?"), arguments: [id, tenant.rawValue])
            } else {
                try Row.fetchAll(db.cachedStatement(sql: "SELECT * FROM posts WHERE id = ?"), arguments: [id])
            }
        return try posts(db, rows).first
    }

    /// The posts of `rows` (full `posts` rows), in the same order, with their media read in one query.
    static func posts(_ db: Database, _ rows: [Row]) throws -> [Post] {
        guard !rows.isEmpty else { return [] }
        let ids: [PostID] = rows.map { $0["id"] }
        var media: [PostID: [Media]] = [:]
        // Cached per placeholder count, as the uploads below: a post's creation reads its media back here.
        let mediaRows = try Row.fetchAll(
            db.cachedStatement(sql: "SELECT * FROM media WHERE post_id IN (\(databaseQuestionMarks(count: ids.count))) ORDER BY post_id, position"),
            arguments: StatementArguments(ids)
        )
        for row in mediaRows {
            guard let medium = SQLiteMediaRepository.media(row) else { throw UnreadableRow(table: "media", id: row["id"]) }
            media[row["post_id"], default: []].append(medium)
        }
        return try rows.map { row in
            guard let post = post(row, media: media[row["id"]] ?? []) else { throw UnreadableRow(table: "posts", id: row["id"]) }
            return post
        }
    }

    /// The API object of a `posts` row with its media, nil if a value is unreadable.
    static func post(_ row: Row, media: [Media]) -> Post? {
        guard let state = PostState(rawValue: row["state"]),
            let priority = Priority(rawValue: row["priority"]),
            let createdAt = Timestamp(rfc3339: row["created_at"]),
            let jobID: JobID = row["job_id"]
        else { return nil }
        let scheduledAt = optionalTimestamp(row["scheduled_at"])
        let publishedAt = optionalTimestamp(row["published_at"])
        guard scheduledAt.isReadable, publishedAt.isReadable else { return nil }
        return Post(
            id: row["id"],
            text: row["text"],
            state: state,
            media: media,
            jobID: jobID,
            priority: priority,
            scheduledAt: scheduledAt.value,
            createdAt: createdAt,
            publishedAt: publishedAt.value
        )
    }

    // MARK: Jobs

    /// The job with this id and its uploads in media position order, or nil.
    static func job(_ db: Database, id: JobID, tenant: Tenant? = nil) throws -> Job? {
        let rows =
            if let tenant {
                try Row.fetchAll(db.cachedStatement(sql: "SELECT * FROM jobs WHERE id = ? AND tenant = ?"), arguments: [id, tenant.rawValue])
            } else {
                try Row.fetchAll(db.cachedStatement(sql: "SELECT * FROM jobs WHERE id = ?"), arguments: [id])
            }
        return try jobs(db, rows).first
    }

    /// The jobs of `rows` (full `jobs` rows), in the same order, with their uploads read in one query.
    static func jobs(_ db: Database, _ rows: [Row]) throws -> [Job] {
        guard !rows.isEmpty else { return [] }
        let ids: [JobID] = rows.map { $0["id"] }
        var uploads: [JobID: [Job.Upload]] = [:]
        // Cached per placeholder count (a page holds at most a few hundred jobs): preparing costs more than the query.
        let uploadRows = try Row.fetchAll(
            db.cachedStatement(
                sql: """
                    SELECT uploads.job_id, uploads.media_id, uploads.state, uploads.attempts, uploads.error, media.size, uploads.bytes_sent
                    FROM uploads JOIN media ON media.id = uploads.media_id
                    WHERE uploads.job_id IN (\(databaseQuestionMarks(count: ids.count)))
                    ORDER BY uploads.job_id, media.position, media.id
                    """
            ),
            arguments: StatementArguments(ids)
        )
        for row in uploadRows {
            guard let state = UploadState(rawValue: row["state"]) else {
                throw UnreadableRow(table: "uploads", id: "\(row["job_id"] as String)/\(row["media_id"] as String)")
            }
            let upload = Job.Upload(
                mediaID: row["media_id"], state: state, attempts: row["attempts"], error: row["error"], size: row["size"],
                bytesSent: row["bytes_sent"])
            uploads[row["job_id"], default: []].append(upload)
        }
        return try rows.map { row in
            guard let job = Job(columns: JobRow(row: row), uploads: uploads[row["id"]] ?? []) else {
                throw UnreadableRow(table: "jobs", id: row["id"])
            }
            return job
        }
    }

    // MARK: Lists

    /// The list query of `table`, newest first, optionally of one state and strictly after `cursor`: `limit + 1` rows.
    ///
    /// The row-value comparison `(created_at, id) < (?, ?)` walks `posts_list` / `posts_state_list` (and the jobs ones),
    /// whose leading `tenant` keeps a tenant's page to its own rows; `keys` lists every tenant (nil).
    static func listRows(
        _ db: Database, table: String, tenant: Tenant?, state: String?, limit: Int, after cursor: HeraldCore.Cursor?
    ) throws -> [Row] {
        var conditions: [String] = []
        var arguments: StatementArguments = []
        if let tenant {
            conditions.append("tenant = ?")
            arguments += [tenant.rawValue]
        }
        if let state {
            conditions.append("state = ?")
            arguments += [state]
        }
        if let cursor {
            conditions.append("(created_at, id) < (?, ?)")
            arguments += [cursor.createdAt.rfc3339, cursor.id]
        }
        let filter = conditions.isEmpty ? "" : "WHERE " + conditions.joined(separator: " AND ")
        arguments += [max(limit, 0) + 1]
        return try Row.fetchAll(
            db.cachedStatement(sql: "SELECT * FROM \(table) \(filter) ORDER BY created_at DESC, id DESC LIMIT ?"),
            arguments: arguments
        )
    }

    // MARK: Helpers

    /// A nullable timestamp column: absent, present, or unreadable.
    static func optionalTimestamp(_ text: String?) -> (value: Timestamp?, isReadable: Bool) {
        guard let text else { return (nil, true) }
        guard let timestamp = Timestamp(rfc3339: text) else { return (nil, false) }
        return (timestamp, true)
    }
}

extension Database {
    /// Runs a fixed statement through the statement cache.
    func run(_ sql: String, _ arguments: StatementArguments = []) throws {
        try cachedStatement(sql: sql).execute(arguments: arguments)
    }
}

/// A `jobs` row read by column name, for the shared mapping (``HeraldCore/Job/init(columns:uploads:)``).
struct JobRow: JobColumns {
    let row: Row

    func text(_ column: JobColumn) -> String? { row[column.name] }
    func int(_ column: JobColumn) -> Int? { row[column.name] }
    func flag(_ column: JobColumn) -> Bool? { (row[column.name] as Int?).map { $0 != 0 } }
    func timestamp(_ column: JobColumn) -> (value: Timestamp?, isReadable: Bool) { Rows.optionalTimestamp(row[column.name]) }
}

/// Ids bind and read as their text.
extension ID: DatabaseValueConvertible, StatementBinding {
    public var databaseValue: DatabaseValue { rawValue.databaseValue }

    public static func fromDatabaseValue(_ dbValue: DatabaseValue) -> ID? {
        String.fromDatabaseValue(dbValue).map(ID.init(rawValue:))
    }
}
