import Foundation
import GRDB
import GRDBSQLite
import HeraldCore
import HeraldStorage
import Logging
import Synchronization
import Testing

@testable import SQLiteStorage

@Suite("Storage")
struct StorageTests {
    static let tables = ["media", "posts", "jobs", "uploads", "idempotency_keys", "queue_heads"]

    // MARK: Opening and migrating

    @Test("migrations create every table on an empty database, with WAL, FULL sync and foreign keys")
    func migratesEmptyDatabase() async throws {
        try await withTemporaryDirectory { directory in
            let logs = LogRecorder()
            let storage = try SQLiteStorage.open(directory: directory + "/nested/data", logger: logs.logger)
            defer { try? storage.close() }

            #expect(FileManager.default.fileExists(atPath: directory + "/nested/data/herald.sqlite"))
            let tables = try await storage.pool.read { db in
                try Set(String.fetchAll(db, sql: "SELECT name FROM sqlite_master WHERE type = 'table'"))
            }
            for table in Self.tables {
                #expect(tables.contains(table), "missing table \(table)")
            }

            // Every table is STRICT: a wrong type is an error rather than a silent coercion.
            let strict = try await storage.pool.read { db in
                try Set(String.fetchAll(db, sql: "SELECT name FROM pragma_table_list WHERE strict = 1"))
            }
            #expect(strict.isSuperset(of: Self.tables))

            // The writer matters most (it commits); readers are checked so none is configured differently.
            let writer = try await storage.pool.write { db in try Pragmas(db) }
            let reader = try await storage.pool.read { db in try Pragmas(db) }
            for pragmas in [writer, reader] {
                #expect(pragmas.journalMode == "wal")
                #expect(pragmas.synchronous == 2)  // FULL
                #expect(pragmas.foreignKeys == 1)
            }

            let applied = try appliedMigrations(storage)
            #expect(applied == SQLiteStorage.migrationIdentifiers)
            #expect(applied.first == "0001_initial")
            #expect(logs.messages.filter { $0 == "applied migration" }.count == SQLiteStorage.migrationIdentifiers.count)
        }
    }

    /// In a process of its own (an exit test): SQLite takes the setting only before its first use in the process, and
    /// the suites beside this one open databases of their own.
    @Test("opening turns SQLite's memory statistics off: its allocations count nothing, so take no global lock")
    func memoryStatisticsOff() async {
        await #expect(processExitsWith: .success) {
            try await withTemporaryDirectory { directory in
                let storage = try SQLiteStorage.open(directory: directory, logger: LogRecorder().logger)
                defer { try? storage.close() }
                let count = try await storage.pool.read { db in try Int.fetchOne(db, sql: "SELECT count(*) FROM sqlite_master") }
                // With the statistics on, opening and migrating alone leave hundreds of KiB counted.
                guard SQLiteLibrary.configured, let count, count > 0, sqlite3_memory_used() == 0 else { exit(1) }
            }
        }
    }

    @Test("reopening applies nothing again and keeps the rows")
    func reopenIsIdempotent() async throws {
        try await withTemporaryDirectory { directory in
            let appliedFirst: [String]
            do {
                let storage = try SQLiteStorage.open(directory: directory, logger: LogRecorder().logger)
                try await storage.pool.write { db in try insertMedia(db, id: "m1") }
                appliedFirst = try appliedMigrations(storage)
                try storage.close()
            }

            let logs = LogRecorder()
            let storage = try SQLiteStorage.open(directory: directory, logger: logs.logger)
            defer { try? storage.close() }
            #expect(try appliedMigrations(storage) == appliedFirst)
            #expect(!logs.messages.contains("applied migration"))
            let ids = try await storage.pool.read { db in try String.fetchAll(db, sql: "SELECT id FROM media") }
            #expect(ids == ["m1"])
        }
    }

    @Test("migration 0011 fills queue_heads from the jobs already queued and running")
    func queueHeadsBackfill() async throws {
        try await withTemporaryDirectory { directory in
            let path = directory + "/herald.sqlite"
            do {
                let queue = try DatabaseQueue(path: path)
                try SQLiteStorage.migrator.migrate(queue, upTo: "0010_fair_share")
                try await queue.write { db in
                    for (post, job, tenant, postState, jobState, priority, created) in [
                        ("p1", "j1", "a", "queued", "queued", 1, "10:00:01"), ("p2", "j2", "a", "queued", "queued", 0, "10:00:02"),
                        ("p3", "j3", "b", "publishing", "running", 1, "10:00:00"), ("p4", "j4", "b", "queued", "queued", 1, "10:00:03"),
                    ] {
                        let time = "2026-11-22T\(created).000Z"
                        let lease = jobState == "running" ? ("r", "2026-11-22T11:00:00.000Z") : nil
                        try db.execute(
                            sql: """
                                INSERT INTO posts (id, text, state, priority, created_at, job_id, tenant) VALUES (?, 'x', ?, 'normal', ?, ?, ?);
                                INSERT INTO jobs (id, post_id, state, priority, run_at, created_at, tenant, locked_by, locked_until, started_at)
                                VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?);
                                """,
                            arguments: [
                                post, postState, time, job, tenant, job, post, jobState, priority, time, time, tenant, lease?.0, lease?.1,
                                lease == nil ? nil : time,
                            ])
                    }
                }
                try queue.close()
            }
            let storage = try SQLiteStorage.open(directory: directory, logger: LogRecorder().logger)
            defer { try? storage.close() }
            let heads = try await storage.pool.read { db in
                try Row.fetchAll(db, sql: "SELECT tenant, job_id, running FROM queue_heads ORDER BY tenant").map {
                    "\($0[0] as String) \($0[1] as String) \($0[2] as Int)"
                }
            }
            #expect(heads == ["a j2 0", "b j4 1"])
            #expect(try await storage.integrityProblems() == [])
        }
    }

    @Test("a data directory that cannot be created is reported with its path and errno message")
    func unusableDirectory() async throws {
        try await withTemporaryDirectory { directory in
            let file = directory + "/not-a-directory"
            #expect(FileManager.default.createFile(atPath: file, contents: Data("x".utf8)))

            let error = #expect(throws: StorageError.self) {
                try SQLiteStorage.open(directory: file + "/data", logger: LogRecorder().logger)
            }
            #expect(error?.errorCode == .cannotCreateDirectory)
            #expect(error?.message.contains(file) == true)
            #expect(error?.message.contains(String(cString: strerror(ENOTDIR))) == true)
        }
    }

    @Test("isReachable is true on an open store and false once it is closed")
    func reachability() async throws {
        try await withTemporaryDirectory { directory in
            let storage = try SQLiteStorage.open(directory: directory, logger: LogRecorder().logger)
            #expect(await storage.isReachable())
            try storage.close()
            #expect(await storage.isReachable() == false)
        }
    }

    @Test("an upload's hold, renewal and release are leases, not waited to disk: the writer is durable again after each, also one that fails")
    func holdsLeaveTheWriterDurable() async throws {
        try await withTemporaryDirectory { directory in
            let storage = try SQLiteStorage.open(directory: directory, logger: LogRecorder().logger)
            defer { try? storage.close() }
            func writerSynchronous() async throws -> Int? { try await storage.pool.write { db in try Pragmas(db).synchronous } }
            let id = MediaID.generate(at: .now())
            let upload = Upload(
                id: id, contentType: .jpeg, description: nil, length: 300, bytesPath: "staging/\(id).upload", createdAt: .now(),
                expiresAt: Timestamp.now().adding(milliseconds: 60_000))
            try await storage.uploads.insert(upload, tenant: .default)
            let until = Timestamp.now().adding(milliseconds: 10_000)
            #expect(try await storage.uploads.hold(id: id, tenant: .default, holder: "a:1", now: .now(), until: until) == .held(upload))
            #expect(try await writerSynchronous() == 2)  // FULL
            #expect(try await storage.uploads.hold(id: id, tenant: .default, holder: "b:1", now: .now(), until: until) == .busy)
            #expect(try await storage.uploads.renew(id: id, holder: "a:1", until: until.adding(milliseconds: 1_000)))
            #expect(try await writerSynchronous() == 2)
            try await storage.uploads.release(id: id, holder: "a:1")
            #expect(try await writerSynchronous() == 2)
            #expect(try await storage.uploads.hold(id: id, tenant: .default, holder: "b:1", now: .now(), until: until) == .held(upload))
            // A hold whose statement fails rolls back and still puts FULL back.
            try await storage.pool.write { db in try db.execute(sql: "ALTER TABLE resumable_uploads RENAME TO gone") }
            await #expect(throws: DatabaseError.self) {
                try await storage.uploads.hold(id: id, tenant: .default, holder: "c:1", now: .now(), until: until)
            }
            #expect(try await writerSynchronous() == 2)
            #expect(try await storage.pool.writeWithoutTransaction { db in db.isInsideTransaction } == false)
        }
    }

    // MARK: Constraints

    /// Rows the schema must refuse, each breaking one CHECK.
    static let checkViolations: [String] = [
        "INSERT INTO posts (id, state, created_at) VALUES ('p2', 'bogus', '2026-11-22T10:15:30.123Z')",
        "INSERT INTO posts (id, state, priority, created_at) VALUES ('p2', 'queued', 'urgent', '2026-11-22T10:15:30.123Z')",
        // Timestamps compare as text, so only the one fixed-width spelling is accepted.
        "INSERT INTO posts (id, state, created_at) VALUES ('p2', 'queued', '2026-11-22T10:15:30Z')",
        "INSERT INTO posts (id, state, created_at) VALUES ('p2', 'queued', '2026-11-22 10:15:30.123')",
        "INSERT INTO posts (id, state, created_at) VALUES ('p2', 'published', '2026-11-22T10:15:30.123Z')",
        "UPDATE jobs SET state = 'paused'",
        "UPDATE jobs SET priority = 3",
        "UPDATE jobs SET cancel_requested = 2",
        "UPDATE jobs SET error_code = 'oops'",
        "UPDATE jobs SET state = 'succeeded'",  // a finished job has a finish time
        "UPDATE jobs SET locked_by = 'runner-1'",  // a lease has both an owner and an end
        "UPDATE uploads SET state = 'done'",
        "UPDATE media SET state = 'deleted'",
        "UPDATE media SET sha256 = 'XYZ'",
        "UPDATE media SET staging_path = '/etc/passwd'",
        "UPDATE media SET position = NULL",  // attached media have a position
        """
        INSERT INTO idempotency_keys (key, request_hash, state, created_at, expires_at)
        VALUES ('k', 'h', 'done', '2026-11-22T10:15:30.123Z', '2026-11-23T10:15:30.123Z')
        """,
    ]

    @Test("CHECK constraints reject invalid values", arguments: checkViolations)
    func checkConstraints(sql: String) async throws {
        try await withSeededStorage { storage in
            let error = #expect(throws: DatabaseError.self) {
                try storage.pool.write { db in try db.execute(sql: sql) }
            }
            #expect(error?.extendedResultCode == .SQLITE_CONSTRAINT_CHECK)
        }
    }

    /// Rows the schema must refuse because they point at nothing.
    static let foreignKeyViolations: [String] = [
        """
        INSERT INTO jobs (id, post_id, state, run_at, created_at)
        VALUES ('j2', 'missing', 'queued', '2026-11-22T10:15:30.123Z', '2026-11-22T10:15:30.123Z')
        """,
        "INSERT INTO uploads (job_id, media_id) VALUES ('j1', 'missing')",
        "UPDATE media SET post_id = 'missing'",
        // Deferred (a post and its job reference each other) yet still checked, at commit.
        "UPDATE posts SET job_id = 'missing'",
    ]

    @Test("foreign keys reject references to missing rows", arguments: foreignKeyViolations)
    func foreignKeys(sql: String) async throws {
        try await withSeededStorage { storage in
            let error = #expect(throws: DatabaseError.self) {
                try storage.pool.write { db in try db.execute(sql: sql) }
            }
            #expect(error?.extendedResultCode == .SQLITE_CONSTRAINT_FOREIGNKEY)
        }
    }

    @Test("a post has at most one active job")
    func oneActiveJobPerPost() async throws {
        try await withSeededStorage { storage in
            let error = #expect(throws: DatabaseError.self) {
                try storage.pool.write { db in
                    try db.execute(
                        sql: """
                            INSERT INTO jobs (id, post_id, state, run_at, created_at)
                            VALUES ('j2', 'p1', 'scheduled', '2026-11-23T00:00:00.000Z', '2026-11-22T10:15:31.000Z')
                            """
                    )
                }
            }
            #expect(error?.extendedResultCode == .SQLITE_CONSTRAINT_UNIQUE)

            // Once the first job is finished, a re-publish may enqueue another.
            try await storage.pool.write { db in
                try db.execute(sql: "UPDATE jobs SET state = 'failed', finished_at = '2026-11-22T10:15:31.000Z', error_code = 'upload_failed'")
                try db.execute(
                    sql: """
                        INSERT INTO jobs (id, post_id, state, run_at, created_at)
                        VALUES ('j2', 'p1', 'queued', '2026-11-22T10:15:32.000Z', '2026-11-22T10:15:32.000Z')
                        """
                )
                try db.execute(sql: "UPDATE posts SET job_id = 'j2', state = 'queued'")
            }
            let count = try await storage.pool.read { db in try Int.fetchOne(db, sql: "SELECT count(*) FROM jobs WHERE post_id = 'p1'") }
            #expect(count == 2)
        }
    }

    // MARK: Indexes

    /// The hot queries the API needs, each of which must be served by an index without sorting.
    static let plannedQueries: [PlannedQuery] = [
        // The claim: the tenants' first jobs in its order, then a tenant's next due job.
        PlannedQuery(
            "SELECT job_id FROM queue_heads WHERE running < ? ORDER BY priority, running, run_at, created_at, job_id", index: "queue_heads_turn"),
        PlannedQuery(
            """
            SELECT id FROM jobs WHERE state = 'queued' AND tenant = ? AND run_at <= ? AND (priority, run_at, created_at, id) > (?, ?, ?, ?)
            ORDER BY priority, run_at, created_at, id LIMIT 1
            """,
            index: "jobs_tenant_due"
        ),
        PlannedQuery("SELECT id FROM jobs WHERE state = 'scheduled' AND run_at <= ?", index: "jobs_scheduled"),
        PlannedQuery("SELECT id FROM jobs WHERE state = 'running' AND locked_until <= ?", index: "jobs_leases"),
        PlannedQuery(
            "SELECT * FROM posts WHERE tenant = ? AND (created_at, id) < (?, ?) ORDER BY created_at DESC, id DESC LIMIT 20", index: "posts_list"),
        PlannedQuery(
            "SELECT * FROM posts WHERE tenant = ? AND state = ? AND (created_at, id) < (?, ?) ORDER BY created_at DESC, id DESC LIMIT 20",
            index: "posts_state_list"
        ),
        PlannedQuery("SELECT * FROM jobs WHERE tenant = ? ORDER BY created_at DESC, id DESC LIMIT 20", index: "jobs_list"),
        PlannedQuery("SELECT * FROM jobs WHERE tenant = ? AND state = ? ORDER BY created_at DESC, id DESC LIMIT 20", index: "jobs_state_list"),
        // The UNIQUE (post_id, position) constraint's index.
        PlannedQuery("SELECT * FROM media WHERE post_id = ? ORDER BY position", index: "sqlite_autoindex_media_3"),
        PlannedQuery("DELETE FROM idempotency_keys WHERE expires_at < ?", index: "idempotency_keys_expiry"),
        PlannedQuery("SELECT * FROM keys WHERE (created_at, id) < (?, ?) ORDER BY created_at DESC, id DESC LIMIT 20", index: "keys_list"),
        // A key's lookup on every request whose key is not cached: the UNIQUE hash's index.
        PlannedQuery("SELECT * FROM keys WHERE hash = ?", index: "sqlite_autoindex_keys_2"),
    ]

    @Test("claiming, listing, media by post and key expiry use their indexes", arguments: plannedQueries)
    func queryPlan(query: PlannedQuery) async throws {
        try await withSeededStorage { storage in
            let arguments = StatementArguments(Array(repeating: "2026-11-22T10:15:30.123Z", count: query.sql.count { $0 == "?" }))
            let plan = try await storage.pool.read { db in
                try Row.fetchAll(db, sql: "EXPLAIN QUERY PLAN " + query.sql, arguments: arguments).map { row -> String in row["detail"] }
            }
            let usesIndex = plan.contains { $0.contains("INDEX \(query.index) ") || $0.hasSuffix("INDEX \(query.index)") }
            #expect(usesIndex, "\(plan)")
            #expect(!plan.contains { $0.contains("TEMP B-TREE") }, "\(plan)")
        }
    }
}

/// A query and the index that must serve it.
struct PlannedQuery: Sendable, CustomTestStringConvertible {
    var sql: String
    var index: String

    init(_ sql: String, index: String) {
        self.sql = sql
        self.index = index
    }

    var testDescription: String { self.index }
}

// MARK: Helpers

/// The journal mode, synchronous level and foreign-key switch of one connection.
private struct Pragmas {
    var journalMode: String?
    var synchronous: Int?
    var foreignKeys: Int?

    init(_ db: Database) throws {
        self.journalMode = try String.fetchOne(db, sql: "PRAGMA journal_mode")
        self.synchronous = try Int.fetchOne(db, sql: "PRAGMA synchronous")
        self.foreignKeys = try Int.fetchOne(db, sql: "PRAGMA foreign_keys")
    }
}

/// The identifiers GRDB recorded as applied, in order.
private func appliedMigrations(_ storage: SQLiteStorage) throws -> [String] {
    try storage.pool.read { db in try String.fetchAll(db, sql: "SELECT identifier FROM grdb_migrations ORDER BY identifier") }
}

private func insertMedia(_ db: Database, id: String) throws {
    try db.execute(
        sql: """
            INSERT INTO media (id, content_type, size, sha256, staging_path, created_at)
            VALUES (?, 'image/png', 3, ?, ?, '2026-11-22T10:15:30.123Z')
            """,
        arguments: [id, String(repeating: "ab", count: 32), "staging/\(id)"]
    )
}

/// Runs `body` with a new directory under the system's temporary directory, removed afterwards.
private func withTemporaryDirectory(_ body: (String) async throws -> Void) async throws {
    let directory = FileManager.default.temporaryDirectory
        .appendingPathComponent("herald-storage-tests-\(UUID().uuidString)", isDirectory: true)
        .path
    try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
    defer { try? FileManager.default.removeItem(atPath: directory) }
    try await body(directory)
}

/// Runs `body` with a fresh store holding one valid post, its queued job and one attached medium with its upload.
private func withSeededStorage(_ body: (SQLiteStorage) async throws -> Void) async throws {
    try await withTemporaryDirectory { directory in
        let storage = try SQLiteStorage.open(directory: directory, logger: LogRecorder().logger)
        defer { try? storage.close() }
        try await storage.pool.write { db in
            // The post points at its job before the job exists: posts.job_id is checked at commit.
            try db.execute(
                sql: """
                    INSERT INTO posts (id, text, state, priority, created_at, job_id)
                    VALUES ('p1', 'hello', 'queued', 'high', '2026-11-22T10:15:30.123Z', 'j1');
                    INSERT INTO jobs (id, post_id, state, priority, run_at, created_at)
                    VALUES ('j1', 'p1', 'queued', 0, '2026-11-22T10:15:30.123Z', '2026-11-22T10:15:30.123Z');
                    """
            )
            try insertMedia(db, id: "m1")
            try db.execute(sql: "UPDATE media SET post_id = 'p1', position = 0 WHERE id = 'm1'")
            try db.execute(sql: "INSERT INTO uploads (job_id, media_id) VALUES ('j1', 'm1')")
        }
        try await body(storage)
    }
}

/// A logger whose messages are kept, to check what `Storage.open` reports.
private final class LogRecorder: Sendable {
    private let recorded = Mutex<[String]>([])

    var messages: [String] { self.recorded.withLock { $0 } }

    var logger: Logger {
        Logger(label: "herald.storage.tests") { _ in Handler(recorder: self) }
    }

    private struct Handler: LogHandler {
        let recorder: LogRecorder
        var metadata: Logger.Metadata = [:]
        var logLevel: Logger.Level = .trace

        subscript(metadataKey key: String) -> Logger.Metadata.Value? {
            get { self.metadata[key] }
            set { self.metadata[key] = newValue }
        }

        func log(event: LogEvent) {
            self.recorder.recorded.withLock { $0.append(event.message.description) }
        }
    }
}
