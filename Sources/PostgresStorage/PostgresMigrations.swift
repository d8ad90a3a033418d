import Logging
public import PostgresNIO

/// Herald's PostgreSQL schema: `Migrations/PostgreSQL/*.sql`, applied in name order, each exactly once.
///
/// All pending migrations run in one transaction that first takes a transaction-scoped advisory lock: replicas that
/// start together queue on the lock, and each finds in `herald_migrations` what the one before it applied. DDL is
/// transactional on PostgreSQL, so a migration that fails leaves nothing applied and nothing recorded.
public enum PostgresMigrations {
    /// The advisory lock's key: "HERALD" in ASCII, a number no other user of the database is likely to take.
    static let lockKey: Int64 = 0x4845_5241_4C44

    /// The embedded migrations, in the order they apply.
    public static var all: [(name: String, sql: String)] {
        EmbeddedMigrations.files.map { (name: $0.name, sql: $0.contents) }
    }

    /// Applies what `migrations` holds that the database has not recorded, on a connection of `client`'s.
    @discardableResult
    public static func apply(
        _ migrations: [(name: String, sql: String)] = all, on client: PostgresClient, logger: Logger
    ) async throws -> [String] {
        try await client.withConnection { connection in try await apply(migrations, on: connection, logger: logger) }
    }

    /// Applies what `migrations` holds that the database has not recorded; the names applied by this call, in order.
    ///
    /// Throws ``PostgresStartError/newerSchema(database:known:)``, applying nothing, when the database records a
    /// migration `migrations` does not hold: a newer Herald migrated it.
    @discardableResult
    public static func apply(
        _ migrations: [(name: String, sql: String)] = all, on connection: PostgresConnection, logger: Logger
    ) async throws -> [String] {
        try await connection.withTransaction(logger: logger) { connection in
            try await connection.query("SELECT pg_advisory_xact_lock(\(lockKey))", logger: logger)
            try await connection.query(
                """
                CREATE TABLE IF NOT EXISTS herald_migrations (
                    name       text        NOT NULL PRIMARY KEY,
                    applied_at timestamptz NOT NULL DEFAULT now()
                )
                """,
                logger: logger)
            var recorded: Set<String> = []
            for try await name in try await connection.query("SELECT name FROM herald_migrations", logger: logger).decode(String.self) {
                recorded.insert(name)
            }
            let unknown = recorded.subtracting(migrations.map(\.name))
            if let newest = unknown.max() {
                throw PostgresStartError.newerSchema(database: newest, known: migrations.last?.name ?? "none")
            }
            var applied: [String] = []
            for migration in migrations where !recorded.contains(migration.name) {
                for statement in statements(of: migration.sql) {
                    try await connection.query(PostgresQuery(unsafeSQL: statement), logger: logger)
                }
                try await connection.query("INSERT INTO herald_migrations (name) VALUES (\(migration.name))", logger: logger)
                applied.append(migration.name)
            }
            if !applied.isEmpty { logger.info("applied PostgreSQL migrations", metadata: ["migrations": "\(applied)"]) }
            return applied
        }
    }

    /// The statements of a migration file, each sent on its own (the extended protocol takes one at a time).
    ///
    /// The files keep to a shape this can split without parsing SQL: `--` comments on lines of their own, every
    /// statement ending with `;` at the end of its last line, and a function's body quoted with `$$`.
    static func statements(of sql: String) -> [String] {
        var statements: [String] = []
        var current: [Substring] = []
        // Inside a `$$ … $$` body (a function's), whose lines may end with `;` of their own.
        var quoted = false
        for line in sql.split(separator: "\n", omittingEmptySubsequences: false) {
            let code = !quoted && line.drop(while: \.isWhitespace).hasPrefix("--") ? "" : line
            guard quoted || !code.allSatisfy(\.isWhitespace) else { continue }
            current.append(code)
            if code.ranges(of: "$$").count % 2 == 1 { quoted.toggle() }
            if !quoted, code.trimmingSuffix(while: \.isWhitespace).hasSuffix(";") {
                statements.append(current.joined(separator: "\n"))
                current = []
            }
        }
        if !current.isEmpty { statements.append(current.joined(separator: "\n")) }
        return statements
    }
}

extension Substring {
    fileprivate func trimmingSuffix(while predicate: (Character) -> Bool) -> Substring {
        var end = endIndex
        while end > startIndex, predicate(self[index(before: end)]) { end = index(before: end) }
        return self[startIndex..<end]
    }
}
