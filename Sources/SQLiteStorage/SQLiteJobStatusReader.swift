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
        try read(id: id, tenant: tenant) { Job($0) }
    }

    /// The job's JSON written from the row where it lies: no `Job`, no string per id (the status poll).
    func write(id: JobID, tenant: Tenant, to writer: inout JSONWriter) throws -> JobState? {
        try read(id: id, tenant: tenant) { job in
            job.write(to: &writer)
            return job.state
        }
    }

    /// Runs `body` with the job read in place, its live uploads laid over; nil if `tenant` has none.
    private func read<T>(id: JobID, tenant: Tenant, _ body: (BorrowedJob) throws -> T) throws -> T? {
        try connections[next.take() % connections.count].withStatement { statement, db, scratch in
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
                    guard let row = try Self.step(statement, id: id, db: db, into: &scratch) else { return nil }
                    // Grown no more from here: the text's place is fixed while the job is lent.
                    let copied = scratch.text
                    return try copied.withUnsafeBufferPointer { text in
                        for index in scratch.uploads.indices {
                            scratch.uploads[index].mediaID = UTF8Text(UnsafeBufferPointer(rebasing: text[scratch.mediaIDs[index]]))
                        }
                        progress.apply(to: &scratch.uploads, of: id, state: row.state)
                        return try scratch.uploads.withUnsafeBufferPointer { uploads in
                            guard let job = row.job(text: text, uploads: uploads) else { throw UnreadableRow(table: "jobs", id: id.rawValue) }
                            return try body(job)
                        }
                    }
                }
            }
        }
    }

    private static func text(_ utf8: UnsafeBufferPointer<UInt8>) -> UnsafePointer<CChar>? {
        utf8.baseAddress.map { UnsafeRawPointer($0).assumingMemoryBound(to: CChar.self) }
    }

    /// Steps ``query`` bound to `id`: the job from its first row, an upload from each row, their text copied into
    /// `scratch` (a column's text ends at the next step); nil if there is no row.
    private static func step(_ statement: OpaquePointer, id: JobID, db: OpaquePointer, into scratch: inout Scratch) throws -> Row? {
        var code = sqlite3_step(statement)
        guard code == SQLITE_ROW else {
            if code == SQLITE_DONE { return nil }
            throw Connection.error(code, db)
        }
        scratch.clear()
        let columns = Columns(statement)
        guard let row = Row(columns, into: &scratch) else { throw UnreadableRow(table: "jobs", id: id.rawValue) }
        // The job's columns repeat on every row; the upload's follow them, NULL on the LEFT JOIN's row of a job
        // without media.
        let upload = Int32(JobColumn.all.count)
        while code == SQLITE_ROW {
            if let mediaID = columns.utf8(upload) {
                guard let state = columns.utf8(upload + 1).flatMap(Self.uploadStates.value) else {
                    throw UnreadableRow(table: "uploads", id: "\(id)/\(String(decoding: mediaID, as: UTF8.self))")
                }
                // Its text is placed once the scratch text stops growing (``Row/job(text:uploads:)``).
                scratch.mediaIDs.append(scratch.keep(mediaID))
                scratch.uploads.append(
                    BorrowedUpload(
                        mediaID: UTF8Text(UnsafeBufferPointer(start: nil, count: 0)), state: state, attempts: columns.int(upload + 2),
                        error: columns.text(upload + 3), size: columns.int(upload + 4), bytesSent: columns.int(upload + 5)))
            }
            code = sqlite3_step(statement)
        }
        guard code == SQLITE_DONE else {
            throw Connection.error(code, db)
        }
        return row
    }

    private static let jobStates = CaseTable<JobState>()
    private static let uploadStates = CaseTable<UploadState>()

    /// A string enum's cases found by their raw values' bytes: a column's text is read where it lies, no `String` made.
    private struct CaseTable<Value: RawRepresentable & CaseIterable & Sendable>: Sendable where Value.RawValue == String {
        private let cases: [(utf8: [UInt8], value: Value)]

        init() { cases = Value.allCases.map { (Array($0.rawValue.utf8), $0) } }

        func value(_ utf8: UnsafeBufferPointer<UInt8>) -> Value? {
            for entry in cases where entry.utf8.count == utf8.count {
                // Compared in place: `elementsEqual` iterated both sides generically, a few times this loop's cost.
                let same = entry.utf8.withUnsafeBufferPointer { expected in
                    for index in expected.indices where expected[index] != utf8[index] { return false }
                    return true
                }
                if same { return entry.value }
            }
            return nil
        }
    }

    /// Where a read keeps the row's text and uploads, reused from read to read (one per connection, under its lock).
    fileprivate struct Scratch {
        /// The job's and the uploads' text, copied out of the row.
        var text: [UInt8] = []
        var uploads: [BorrowedUpload] = []
        /// Each upload's media id, in `text`.
        var mediaIDs: [Range<Int>] = []

        init() {
            text.reserveCapacity(1024)
            uploads.reserveCapacity(16)
            mediaIDs.reserveCapacity(16)
        }

        mutating func clear() {
            text.removeAll(keepingCapacity: true)
            uploads.removeAll(keepingCapacity: true)
            mediaIDs.removeAll(keepingCapacity: true)
        }

        /// Copies `utf8` into ``text``: where it is there.
        mutating func keep(_ utf8: UnsafeBufferPointer<UInt8>) -> Range<Int> {
            let start = text.count
            text.append(contentsOf: utf8)
            return start..<text.count
        }
    }

    /// The job's values from its first row: numbers as read, text as ranges of the scratch text. Checked as
    /// ``HeraldCore/Job/init(columns:uploads:)`` checks a row (the other backends' and readers' mapping).
    private struct Row {
        let id: Range<Int>
        let postID: Range<Int>
        let state: JobState
        let priority: Priority
        let attempt: Int
        let runAt: Range<Int>
        let cancelRequested: Bool
        let error: Job.Failure?
        let createdAt: Range<Int>
        let startedAt: Range<Int>?
        let finishedAt: Range<Int>?
        let runner: String?

        init?(_ columns: Columns, into scratch: inout Scratch) {
            guard let id = columns.utf8(.id), let postID = columns.utf8(.postID),
                let state = columns.utf8(.state).flatMap(SQLiteJobStatusReader.jobStates.value),
                let priority = columns.int(.priority).flatMap(Priority.init(rank:)),
                let attempt = columns.int(.attempt),
                let cancelRequested = columns.flag(.cancelRequested),
                let runAt = columns.utf8(.runAt),
                let createdAt = columns.utf8(.createdAt)
            else { return nil }
            var failure: Job.Failure?
            if let code = columns.text(.errorCode) {
                guard let code = JobErrorCode(rawValue: code) else { return nil }
                failure = Job.Failure(
                    code: code, message: columns.text(.errorMessage) ?? "", mediaID: columns.text(.errorMediaID).map(MediaID.init(rawValue:)))
            }
            self.id = scratch.keep(id)
            self.postID = scratch.keep(postID)
            self.state = state
            self.priority = priority
            self.attempt = attempt
            self.runAt = scratch.keep(runAt)
            self.cancelRequested = cancelRequested
            self.error = failure
            self.createdAt = scratch.keep(createdAt)
            self.startedAt = columns.utf8(.startedAt).map { scratch.keep($0) }
            self.finishedAt = columns.utf8(.finishedAt).map { scratch.keep($0) }
            self.runner = columns.text(.runner)
        }

        /// The job, its text in `text` (the scratch's, grown no more) and its uploads; nil if a timestamp is unreadable.
        func job(text: UnsafeBufferPointer<UInt8>, uploads: UnsafeBufferPointer<BorrowedUpload>) -> BorrowedJob? {
            func utf8(_ range: Range<Int>) -> UTF8Text { UTF8Text(UnsafeBufferPointer(rebasing: text[range])) }
            func timestamp(_ range: Range<Int>) -> TimestampText? { TimestampText(UnsafeBufferPointer(rebasing: text[range])) }
            guard let runAt = timestamp(runAt), let createdAt = timestamp(createdAt) else { return nil }
            var startedAt: TimestampText?
            var finishedAt: TimestampText?
            if let range = self.startedAt {
                guard let value = timestamp(range) else { return nil }
                startedAt = value
            }
            if let range = self.finishedAt {
                guard let value = timestamp(range) else { return nil }
                finishedAt = value
            }
            return BorrowedJob(
                id: utf8(id), postID: utf8(postID), state: state, priority: priority, attempt: attempt, runAt: runAt,
                cancelRequested: cancelRequested, uploads: uploads, error: error, createdAt: createdAt, startedAt: startedAt,
                finishedAt: finishedAt, runner: runner)
        }
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
    private struct Columns {
        let statement: OpaquePointer

        init(_ statement: OpaquePointer) { self.statement = statement }

        func int(_ index: Int32) -> Int { Int(sqlite3_column_int64(statement, index)) }

        func text(_ index: Int32) -> String? { utf8(index).map { String(decoding: $0, as: UTF8.self) } }

        func text(_ column: JobColumn) -> String? { text(column.position) }

        func int(_ column: JobColumn) -> Int? {
            sqlite3_column_type(statement, column.position) == SQLITE_NULL ? nil : int(column.position)
        }

        func flag(_ column: JobColumn) -> Bool? { int(column).map { $0 != 0 } }

        /// The column's text, valid until the next step or reset.
        func utf8(_ column: JobColumn) -> UnsafeBufferPointer<UInt8>? { utf8(column.position) }

        /// The column's text, valid until the next step or reset.
        func utf8(_ index: Int32) -> UnsafeBufferPointer<UInt8>? {
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
        private nonisolated(unsafe) var scratch = Scratch()

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

        /// Runs `body` with the prepared statement, its connection and its scratch, holding the lock.
        func withStatement<T>(_ body: (_ statement: OpaquePointer, _ db: OpaquePointer, _ scratch: inout Scratch) throws -> T) throws -> T {
            try lock.withLock { _ in try body(statement, db, &scratch) }
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
