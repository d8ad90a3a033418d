import Foundation
public import GRDB
public import HeraldStorage
import Logging
import Platform

/// Herald's SQLite database, the embedded default: a WAL connection pool, migrated to the current schema when opened.
public struct SQLiteStorage: Storage {
    /// The database file's name inside the data directory.
    public static let fileName = "herald.sqlite"

    /// How long a write waits for another writer (another process, or a checkpoint) before failing with `SQLITE_BUSY`.
    public static let busyTimeout: TimeInterval = 5

    /// The migration identifiers in the order they are applied: the embedded `Migrations/*.sql` names without `.sql`.
    /// The status poll's statement, as its reader prepares it: the benchmark's C server runs exactly this.
    public static var statusStatement: String { SQLiteJobStatusReader.query }

    public static var migrationIdentifiers: [String] {
        EmbeddedMigrations.files.map { migrationIdentifier(fileName: $0.name) }
    }

    /// One writer and concurrent readers; repositories run their queries through it.
    public let pool: DatabasePool

    /// The database file's path.
    public let path: String

    /// The data directory that holds the database (and the staging folder).
    public var directory: String { URL(fileURLWithPath: path).deletingLastPathComponent().path }

    /// The job changes this process commits, announced after each transaction (``CommitObserver``).
    public let changes: JobChanges

    /// Running uploads' states and bytes, kept in memory and laid over every job read.
    public let uploadProgress: UploadProgress

    /// Announces every commit of the writer's: the jobs it changed, its webhook deliveries, a metric.
    let commits: CommitObserver

    /// The job-changing writes (``write(_:)``), committed together when they arrive together.
    let groupCommit: GroupCommit

    /// This process's heartbeat, the one replica on SQLite.
    let replicas = SQLiteQueueRepository.Replicas()

    private init(pool: DatabasePool, path: String) {
        self.pool = pool
        self.path = path
        let changes = JobChanges()
        self.changes = changes
        self.uploadProgress = UploadProgress(changes: changes)
        self.commits = CommitObserver(changes: changes)
        self.groupCommit = GroupCommit(pool: pool)
    }

    /// Creates `directory` if needed, opens `<directory>/herald.sqlite` and applies the migrations it lacks.
    ///
    /// Blocks while SQLite opens and migrates the file: call it once, at start.
    /// - Parameters:
    ///   - directory: The data directory; created with its parents if missing.
    ///   - logger: Receives one line per migration applied and one when the database is ready.
    public static func open(directory: String, logger: Logger) throws -> SQLiteStorage {
        if !SQLiteLibrary.configured {
            logger.debug("SQLite was in use before Herald configured it: its memory statistics stay on")
        }
        try createDirectory(directory)
        let path = URL(fileURLWithPath: directory, isDirectory: true).appendingPathComponent(fileName).path

        let pool = try DatabasePool(path: path, configuration: configuration())
        // DatabasePool turns on WAL after `prepareDatabase` has run, and sets `synchronous = NORMAL`
        // on the writer as it does. NORMAL in WAL mode may lose the last commits on power loss, and a
        // 2xx promises the rows are durable: put FULL back on the one connection that writes.
        try pool.writeWithoutTransaction { db in
            try db.execute(sql: "PRAGMA synchronous = FULL")
        }

        let storage = SQLiteStorage(pool: pool, path: path)
        try storage.migrate(logger: logger)
        pool.add(transactionObserver: storage.commits, extent: .databaseLifetime)
        return storage
    }

    /// Whether the database answers a query, for readiness checks; never throws.
    public func isReachable() async -> Bool {
        do {
            return try await self.pool.read { db in try Int.fetchOne(db, sql: "SELECT 1") } == 1
        } catch {
            return false
        }
    }

    /// Closes every connection; later accesses throw. Dropping the last copy of the pool closes it too.
    public func close() throws {
        try self.pool.close()
    }

    // MARK: Opening

    private static func configuration() -> Configuration {
        var configuration = Configuration()
        configuration.label = "herald"
        // Rows referenced by id must exist: a job's post, a post's media.
        configuration.foreignKeysEnabled = true
        // Writers queue behind one another instead of failing at the first contention.
        configuration.busyMode = .timeout(busyTimeout)
        configuration.prepareDatabase { db in
            // Every connection, so none (readers included) relaxes durability; see `open` for the writer.
            try db.execute(sql: "PRAGMA synchronous = FULL")
            // Temporary files in memory: a batch of ``GroupCommit`` keeps each write's savepoint journal, which spilled
            // past 64 KiB into a file under /var/tmp (a hundred writes a post).
            try db.execute(sql: "PRAGMA temp_store = MEMORY")
        }
        return configuration
    }

    /// `mkdir -p`, with POSIX calls so a failure reports the exact errno.
    private static func createDirectory(_ directory: String) throws(StorageError) {
        var prefix = directory.hasPrefix("/") ? "/" : ""
        for component in directory.split(separator: "/", omittingEmptySubsequences: true) {
            prefix += component
            prefix += "/"
            // 0o700: the database and staged media are the service's alone.
            if mkdir(prefix, 0o700) != 0 {
                let code = errno
                if code != EEXIST {
                    throw .cannotCreateDirectory(path: prefix, errno: code)
                }
            }
        }
        // EEXIST is also what a regular file in the way gives: make sure it is a directory.
        var isDirectory: ObjCBool = false
        if !FileManager.default.fileExists(atPath: directory, isDirectory: &isDirectory) || !isDirectory.boolValue {
            throw .cannotCreateDirectory(path: directory, errno: ENOTDIR)
        }
    }

    // MARK: Migrations

    private static func migrationIdentifier(fileName: String) -> String {
        fileName.hasSuffix(".sql") ? String(fileName.dropLast(".sql".count)) : fileName
    }

    /// One migration per embedded SQL file, in file-name order; GRDB records which ones ran in `grdb_migrations`.
    static var migrator: DatabaseMigrator {
        var migrator = DatabaseMigrator()
        for file in EmbeddedMigrations.files {
            let sql = file.contents
            migrator.registerMigration(migrationIdentifier(fileName: file.name)) { db in
                try db.execute(sql: sql)
            }
        }
        return migrator
    }

    private func migrate(logger: Logger) throws {
        let migrator = Self.migrator
        let before = try self.pool.read { db in try migrator.appliedIdentifiers(db) }
        try migrator.migrate(self.pool)
        let after = try self.pool.read { db in try migrator.appliedIdentifiers(db) }

        for identifier in migrator.migrations where !before.contains(identifier) && after.contains(identifier) {
            logger.info("applied migration", metadata: ["migration": "\(identifier)"])
        }
        // A newer Herald migrated this file: this one does not know that schema, say so loudly.
        let unknown = after.subtracting(migrator.migrations)
        if !unknown.isEmpty {
            logger.warning(
                "database has migrations this version does not know",
                metadata: ["migrations": "\(unknown.sorted())", "path": "\(self.path)"]
            )
        }
        logger.info(
            "database ready",
            metadata: [
                "path": "\(self.path)",
                "schema": "\(migrator.migrations.last ?? "none")",
                "applied": "\(after.count - before.count)",
            ]
        )
    }
}

// MARK: The repositories

extension SQLiteStorage {
    public var jobs: any JobRepository { SQLiteJobRepository(storage: self) }
    public var posts: any PostRepository { SQLitePostRepository(storage: self) }
    public var media: any MediaRepository { SQLiteMediaRepository(pool: pool) }
    public var uploads: any UploadRepository { SQLiteUploadRepository(pool: pool) }
    public var keys: any KeyRepository { SQLiteKeyRepository(pool: pool) }
    public var webhooks: any WebhookRepository { SQLiteWebhookRepository(pool: pool) }
    public var objectDeletions: any ObjectDeletionRepository { SQLiteObjectDeletionRepository(pool: pool) }
    public var queue: any QueueRepository { SQLiteQueueRepository(pool: pool, changes: changes, replicas: replicas) }

    public func statusReader(connections: Int) throws -> any JobStatusReader {
        try SQLiteJobStatusReader(self, connections: connections)
    }
}

// MARK: Checking and copying

extension SQLiteStorage {
    /// What SQLite's `integrity_check` and `foreign_key_check` find, one line each; empty when all is well.
    public func integrityProblems() async throws -> [String] {
        try await pool.read { db in
            var problems = try String.fetchAll(db, sql: "PRAGMA integrity_check").filter { $0 != "ok" }.map { "integrity_check: \($0)" }
            for row in try Row.fetchAll(db, sql: "PRAGMA foreign_key_check") {
                let table: String = row[0]
                let rowid: Int64? = row[1]
                let parent: String = row[2]
                problems.append("foreign_key_check: \(table) row \(rowid.map(String.init) ?? "?") names a missing \(parent) row")
            }
            // The claim trusts queue_heads (kept by triggers) to hold each tenant's first queued job and running jobs.
            let heads = try Row.fetchAll(
                db,
                sql: """
                    WITH first AS (
                        SELECT tenant, id, (SELECT count(*) FROM jobs AS r WHERE r.state = 'running' AND r.tenant = ranked.tenant) AS running
                        FROM (
                            SELECT tenant, id, row_number() OVER (PARTITION BY tenant ORDER BY priority, run_at, created_at, id) AS rank
                            FROM jobs WHERE state = 'queued') AS ranked
                        WHERE rank = 1)
                    SELECT coalesce(first.tenant, queue_heads.tenant) AS tenant, queue_heads.job_id AS head, first.id AS first,
                        queue_heads.running AS counted, first.running AS running
                    FROM first FULL JOIN queue_heads ON queue_heads.tenant = first.tenant
                    WHERE queue_heads.job_id IS NOT first.id OR queue_heads.running IS NOT first.running
                    """)
            for row in heads {
                let (tenant, head, first, counted, running): (String, String?, String?, Int?, Int?) =
                    (row["tenant"], row["head"], row["first"], row["counted"], row["running"])
                problems.append(
                    "queue_heads: tenant \(tenant) has \(head ?? "no head") (\(counted.map(String.init) ?? "-") running) where its first "
                        + "queued job is \(first ?? "none") (\(running.map(String.init) ?? "-") running)")
            }
            return problems
        }
    }

    /// Writes a consistent copy of the database to `path` (SQLite's online backup), while other connections, the
    /// server's included, go on reading and writing. `path` must not exist yet.
    public func backup(to path: String) throws {
        guard !FileManager.default.fileExists(atPath: path) else { throw StorageError.backupTargetExists(path: path) }
        let copy = try DatabaseQueue(path: path)
        try pool.backup(to: copy)
        try copy.close()
    }
}
