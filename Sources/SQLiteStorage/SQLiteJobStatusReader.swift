import GRDB
import GRDBSQLite
import HeraldCore
import HeraldStorage
import Synchronization

/// Reads one job, for a status poll or a long-poll's re-read, on the caller's thread: the hottest read Herald serves.
///
/// `DatabasePool.read` around two queries cost most of a status poll (`BENCHMARKS.md`): the reader pool's checkout,
/// a deferred `BEGIN`/`COMMIT`, a sort, and rows copied and decoded by column name. Here the calling thread (an HTTP
/// thread, or a long-poll's task) takes one of a few read-only connections of its own, and the job and its uploads
/// come from one statement (one SQLite snapshot, so they always agree) that walks the media in position order,
/// stepped with SQLite's C API. WAL: a reader never waits for the writer.
struct SQLiteJobStatusReader: JobStatusReader {
    /// Read-only connections, taken round-robin: one per calling thread (HTTP threads and cores) keeps contention rare,
    /// and a busy one only makes the caller wait for that one query.
    private let connections: [Connection]
    private let next: RoundRobin
    private let progress: UploadProgress

    /// Opens `count` read-only connections to the database `storage` opened (and migrated).
    init(_ storage: SQLiteStorage, connections count: Int) throws {
        connections = try (0..<max(count, 1)).map { _ in try Connection(path: storage.path) }
        next = RoundRobin()
        progress = storage.uploadProgress
    }

    /// The job with this id, its uploads in media position order, their live bytes laid over; nil if `tenant` has none.
    func job(id: JobID, tenant: Tenant) throws -> Job? {
        guard var job = try fetch(id: id, tenant: tenant) else { return nil }
        progress.apply(to: &job)
        return job
    }

    private func fetch(id: JobID, tenant: Tenant) throws -> Job? {
        try connections[next.take() % connections.count].withStatement { statement, db in
            var bound = id.rawValue
            var owner = tenant.rawValue
            return try bound.withUTF8 { id8 in
                try owner.withUTF8 { tenant8 in
                    // SQLITE_STATIC (nil): SQLite reads both in place, and the bindings are cleared before the buffers end.
                    sqlite3_bind_text(statement, 1, Self.text(id8), Int32(id8.count), nil)
                    sqlite3_bind_text(statement, 2, Self.text(tenant8), Int32(tenant8.count), nil)
                    // Reset at once, not at the next use: a statement left stepping holds its read snapshot open.
                    defer {
                        sqlite3_reset(statement)
                        sqlite3_clear_bindings(statement)
                    }
                    return try Self.read(statement, id: id, db: db)
                }
            }
        }
    }

    private static func text(_ utf8: UnsafeBufferPointer<UInt8>) -> UnsafePointer<CChar>? {
        utf8.baseAddress.map { UnsafeRawPointer($0).assumingMemoryBound(to: CChar.self) }
    }

    /// Steps ``query`` bound to `id`: the job from its first row, an upload from each row.
    private static func read(_ statement: OpaquePointer, id: JobID, db: OpaquePointer) throws -> Job? {
        var code = sqlite3_step(statement)
        guard code == SQLITE_ROW else {
            if code == SQLITE_DONE { return nil }
            throw Connection.error(code, db)
        }
        let columns = Columns(statement)
        guard var job = Job(columns: columns, uploads: []) else { throw UnreadableRow(table: "jobs", id: id.rawValue) }
        // One allocation for most posts' uploads, not one per doubling.
        job.uploads.reserveCapacity(8)
        // The job's columns repeat on every row; the upload's follow them, NULL on the LEFT JOIN's row of a job
        // without media.
        let upload = Int32(JobColumn.all.count)
        while code == SQLITE_ROW {
            if let mediaID = columns.text(upload) {
                guard let state = UploadState(rawValue: columns.text(upload + 1) ?? "") else {
                    throw UnreadableRow(table: "uploads", id: "\(id)/\(mediaID)")
                }
                job.uploads.append(
                    Job.Upload(
                        mediaID: MediaID(mediaID), state: state, attempts: columns.int(upload + 2), error: columns.text(upload + 3),
                        size: columns.int(upload + 4), bytesSent: columns.int(upload + 5)))
            }
            code = sqlite3_step(statement)
        }
        guard code == SQLITE_DONE else {
            throw Connection.error(code, db)
        }
        return job
    }

    /// The job's columns (``JobColumn/all``), then the upload's. Media by the post's `(post_id, position)` index: rows
    /// arrive in position order, no sort. A post's uploads are one row per medium (``SQLiteJobRepository``), so joining
    /// them through the media lists exactly the job's uploads.
    static let query = """
        SELECT \(JobColumn.all.map { "jobs.\($0)" }.joined(separator: ", ")),
               uploads.media_id, uploads.state, uploads.attempts, uploads.error, media.size, uploads.bytes_sent
        FROM jobs
        LEFT JOIN media ON media.post_id = jobs.post_id
        LEFT JOIN uploads ON uploads.job_id = jobs.id AND uploads.media_id = media.id
        WHERE jobs.id = ? AND jobs.tenant = ?
        ORDER BY media.position
        """

    /// The current row's values, by column index (a job's at their ``JobColumn/position``).
    private struct Columns: JobColumns {
        let statement: OpaquePointer

        init(_ statement: OpaquePointer) { self.statement = statement }

        func int(_ index: Int32) -> Int { Int(sqlite3_column_int64(statement, index)) }

        func text(_ index: Int32) -> String? { utf8(index).map { String(decoding: $0, as: UTF8.self) } }

        func text(_ column: JobColumn) -> String? { text(column.position) }

        func int(_ column: JobColumn) -> Int? {
            sqlite3_column_type(statement, column.position) == SQLITE_NULL ? nil : int(column.position)
        }

        func flag(_ column: JobColumn) -> Bool? { int(column).map { $0 != 0 } }

        /// Parsed in place: no string made.
        func timestamp(_ column: JobColumn) -> (value: Timestamp?, isReadable: Bool) {
            guard let utf8 = utf8(column.position) else { return (nil, true) }
            let timestamp = Timestamp(rfc3339: utf8)
            return (timestamp, timestamp != nil)
        }

        /// The column's text, valid until the next step or reset.
        private func utf8(_ index: Int32) -> UnsafeBufferPointer<UInt8>? {
            guard let text = sqlite3_column_text(statement, index) else { return nil }
            return UnsafeBufferPointer(start: text, count: Int(sqlite3_column_bytes(statement, index)))
        }
    }

    /// One read-only connection and its prepared ``query``, used by one caller at a time.
    ///
    /// Opened with SQLite's C API rather than as a GRDB `DatabaseQueue`: the poll steps one prepared statement, and
    /// the queue's `DispatchQueue.sync` and the connection's own mutex (Debian's SQLite is built serialized; GRDB
    /// keeps its threading mode internal) cost more than the read. The lock here is the only serialization needed
    /// (`SQLITE_OPEN_NOMUTEX`). SQLiteStorage opened and migrated the database first, in WAL mode.
    private final class Connection: Sendable {
        /// Held while the statement is bound and stepped.
        private let lock = Mutex(())
        // nonisolated(unsafe): touched only under `lock` (and by deinit, when no one else can).
        private nonisolated(unsafe) let db: OpaquePointer
        private nonisolated(unsafe) let statement: OpaquePointer

        init(path: String) throws {
            var db: OpaquePointer?
            let opened = sqlite3_open_v2(path, &db, SQLITE_OPEN_READONLY | SQLITE_OPEN_NOMUTEX, nil)
            guard let db else { throw DatabaseError(resultCode: ResultCode(rawValue: opened), message: "out of memory") }
            guard opened == SQLITE_OK else { throw Self.closing(db, opened) }
            sqlite3_extended_result_codes(db, 1)
            sqlite3_busy_timeout(db, Int32(SQLiteStorage.busyTimeout * 1000))
            var statement: OpaquePointer?
            let prepared = sqlite3_prepare_v3(db, SQLiteJobStatusReader.query, -1, UInt32(SQLITE_PREPARE_PERSISTENT), &statement, nil)
            guard prepared == SQLITE_OK, let statement else { throw Self.closing(db, prepared) }
            self.db = db
            self.statement = statement
        }

        deinit {
            sqlite3_finalize(statement)
            sqlite3_close_v2(db)
        }

        /// Runs `body` with the prepared statement and its connection, holding the lock.
        func withStatement<T>(_ body: (_ statement: OpaquePointer, _ db: OpaquePointer) throws -> T) throws -> T {
            try lock.withLock { _ in try body(statement, db) }
        }

        /// The error SQLite reported on `db` for `code`.
        static func error(_ code: Int32, _ db: OpaquePointer) -> DatabaseError {
            DatabaseError(resultCode: ResultCode(rawValue: code), message: String(cString: sqlite3_errmsg(db)), sql: SQLiteJobStatusReader.query)
        }

        private static func closing(_ db: OpaquePointer, _ code: Int32) -> DatabaseError {
            defer { sqlite3_close_v2(db) }
            return error(code, db)
        }
    }

    /// A shared round-robin counter.
    private final class RoundRobin: Sendable {
        private let value = Atomic(0)

        /// The count before this call's increment, kept non-negative as it wraps.
        func take() -> Int { value.wrappingAdd(1, ordering: .relaxed).oldValue & Int.max }
    }
}
