import GRDB
import HeraldCore
import HeraldStorage

/// A stored row holds a value this version of Herald cannot read (an unknown state, a malformed timestamp),
/// or a write found the rows in a shape the schema allows but Herald never makes. Either is a bug: a 500.
struct UnreadableRow: Error, CustomStringConvertible {
    let table: String
    let id: String
    let reason: String

    init(table: String, id: String, reason: String = "holds a value this version cannot read") {
        self.table = table
        self.id = id
        self.reason = reason
    }

    var description: String { "UnreadableRow: \(table) \(id) \(reason)" }
}

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
            guard let job = job(row, uploads: uploads[row["id"]] ?? []) else { throw UnreadableRow(table: "jobs", id: row["id"]) }
            return job
        }
    }

    /// The API object of a `jobs` row with its uploads, nil if a value is unreadable.
    ///
    /// One mapping for both ways a row is read: GRDB's `Row` by column name, and ``SQLiteJobStatusReader``'s statement by
    /// column index.
    static func job(_ row: some JobColumns, uploads: [Job.Upload]) -> Job? {
        guard let id = row.text(.id).map(JobID.init(rawValue:)),
            let postID = row.text(.postID).map(PostID.init(rawValue:)),
            let state = row.text(.state).flatMap(JobState.init(rawValue:)),
            let priority = row.int(.priority).flatMap(Priority.init(rank:)),
            let attempt = row.int(.attempt),
            let cancelRequested = row.int(.cancelRequested),
            let runAt = row.timestamp(.runAt).value,
            let createdAt = row.timestamp(.createdAt).value
        else { return nil }
        let startedAt = row.timestamp(.startedAt)
        let finishedAt = row.timestamp(.finishedAt)
        guard startedAt.isReadable, finishedAt.isReadable else { return nil }
        var failure: Job.Failure?
        if let code = row.text(.errorCode) {
            guard let code = JobErrorCode(rawValue: code) else { return nil }
            failure = Job.Failure(code: code, message: row.text(.errorMessage) ?? "", mediaID: row.text(.errorMediaID).map(MediaID.init(rawValue:)))
        }
        return Job(
            id: id,
            postID: postID,
            state: state,
            priority: priority,
            attempt: attempt,
            runAt: runAt,
            cancelRequested: cancelRequested != 0,
            uploads: uploads,
            error: failure,
            createdAt: createdAt,
            startedAt: startedAt.value,
            finishedAt: finishedAt.value
        )
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

/// A `jobs` column of the job object: where it is in the statements that select ``all``.
///
/// Derived from ``Job/Member``, the one list of the job object's members: the columns follow the members' order, and a
/// member added to a job must be given its columns here (the switch is exhaustive) before anything compiles.
struct JobColumn: Sendable {
    /// Its index in ``all`` and so in the status statement's result (a position alone: the poll reads by it, and a
    /// trivial value costs no reference counting there).
    let position: Int32

    /// The column's name in `jobs`.
    var name: String { Self.all[Int(position)] }

    /// The columns a member is stored in, in order.
    static func names(of member: Job.Member) -> [String] {
        switch member {
        case .id, .postID, .state, .priority, .attempt, .runAt, .cancelRequested, .createdAt, .startedAt, .finishedAt: [member.rawValue]
        case .error: ["error_code", "error_message", "error_media_id"]
        // Derived from the state and the uploads.
        case .done, .progress: []
        // Rows of `uploads`, read beside the job.
        case .uploads: []
        }
    }

    /// Every column of the job object, in member order: the list the status statement selects.
    static let all: [String] = Job.Member.allCases.flatMap(names(of:))

    /// The `part`th column of `member`.
    private init(_ member: Job.Member, part: Int = 0) {
        let before = Job.Member.allCases.prefix { $0 != member }.reduce(0) { $0 + Self.names(of: $1).count }
        precondition(part < Self.names(of: member).count, "\(member) has no column \(part)")
        position = Int32(before + part)
    }

    static let id = JobColumn(.id)
    static let postID = JobColumn(.postID)
    static let state = JobColumn(.state)
    static let priority = JobColumn(.priority)
    static let attempt = JobColumn(.attempt)
    static let runAt = JobColumn(.runAt)
    static let cancelRequested = JobColumn(.cancelRequested)
    static let errorCode = JobColumn(.error, part: 0)
    static let errorMessage = JobColumn(.error, part: 1)
    static let errorMediaID = JobColumn(.error, part: 2)
    static let createdAt = JobColumn(.createdAt)
    static let startedAt = JobColumn(.startedAt)
    static let finishedAt = JobColumn(.finishedAt)
}

/// A `jobs` row as ``Rows/job(_:uploads:)`` reads it; NULL reads as nil.
protocol JobColumns {
    func text(_ column: JobColumn) -> String?
    func int(_ column: JobColumn) -> Int?
    /// Absent (NULL), present, or present but not a timestamp (`isReadable` false).
    func timestamp(_ column: JobColumn) -> (value: Timestamp?, isReadable: Bool)
}

extension Row: JobColumns {
    func text(_ column: JobColumn) -> String? { self[column.name] }
    func int(_ column: JobColumn) -> Int? { self[column.name] }
    func timestamp(_ column: JobColumn) -> (value: Timestamp?, isReadable: Bool) { Rows.optionalTimestamp(self[column.name]) }
}

/// Ids bind and read as their text.
extension ID: DatabaseValueConvertible, StatementBinding {
    public var databaseValue: DatabaseValue { rawValue.databaseValue }

    public static func fromDatabaseValue(_ dbValue: DatabaseValue) -> ID? {
        String.fromDatabaseValue(dbValue).map(ID.init(rawValue:))
    }
}
