import HeraldCore
import HeraldStorage
import PostgresNIO

/// API keys on PostgreSQL, kept as the SHA-256 of their text.
struct PostgresKeyRepository: KeyRepository {
    let storage: PostgresStorage

    private static let columns = "id, name, tenant, scope, created_at, last_used_at, revoked_at"

    func insert(_ key: APIKey, hash: String) async throws {
        try await storage.run(
            """
            INSERT INTO keys (id, name, tenant, scope, hash, created_at)
            VALUES (\(key.id), \(key.name), \(key.tenant.rawValue), \(key.scope.rawValue), \(hash), \(key.createdAt))
            """)
    }

    /// Records `key` only into an empty table: replicas starting together take turns on a table lock, so one of them
    /// makes the initial key. At start, so on a connection of its own.
    func insertIfEmpty(_ key: APIKey, hash: String) async throws -> Bool {
        try await storage.writeAtStart { transaction in
            try await transaction.run("LOCK TABLE keys IN SHARE ROW EXCLUSIVE MODE")
            guard try await transaction.row("SELECT 1 FROM keys LIMIT 1") == nil else { return false }
            try await transaction.run(
                """
                INSERT INTO keys (id, name, tenant, scope, hash, created_at)
                VALUES (\(key.id), \(key.name), \(key.tenant.rawValue), \(key.scope.rawValue), \(hash), \(key.createdAt))
                """)
            return true
        }
    }

    /// On the caller's thread (the gate's, on a cache miss: once a second per key in use).
    func find(hash: String) throws -> APIKey? {
        try storage.blocking.rows("SELECT \(unescaped: Self.columns) FROM keys WHERE hash = \(hash)").first.map { try Self.key(Columns($0)) }
    }

    func find(id: KeyID) async throws -> APIKey? {
        try await storage.run("SELECT \(unescaped: Self.columns) FROM keys WHERE id = \(id)").first.map { try Self.key(Columns($0)) }
    }

    func list(limit: Int, after cursor: Cursor?) async throws -> Page<APIKey> {
        try await storage.read { transaction in
            let rows = try await PostgresRows.listRows(
                transaction, table: "keys", columns: Self.columns, tenant: nil, state: nil, limit: limit, after: cursor)
            return Page(fetched: try rows.map(Self.key), limit: limit, cursor: \.cursor)
        }
    }

    func revoke(id: KeyID, now: Timestamp) async throws -> APIKey? {
        try await storage.run(
            "UPDATE keys SET revoked_at = coalesce(revoked_at, \(now)) WHERE id = \(id) RETURNING \(unescaped: Self.columns)"
        ).first.map { try Self.key(Columns($0)) }
    }

    func recordUse(_ uses: [KeyID: Timestamp]) async throws {
        guard !uses.isEmpty else { return }
        let entries = uses.sorted { $0.key < $1.key }
        try await storage.run(
            """
            UPDATE keys SET last_used_at = used.at
            FROM unnest(\(entries.map(\.key.rawValue))::text[], \(entries.map(\.value))::timestamptz[]) AS used (id, at)
            WHERE keys.id = used.id AND (keys.last_used_at IS NULL OR keys.last_used_at < used.at)
            """)
    }

    private static func key(_ row: Columns) throws -> APIKey {
        let id: KeyID = try row("id")
        guard let scope = Scope(rawValue: try row("scope")) else { throw UnreadableRow(table: "keys", id: id.rawValue) }
        return APIKey(
            id: id, name: try row("name"), tenant: Tenant(uncheckedName: try row("tenant")), scope: scope, createdAt: try row("created_at"),
            lastUsedAt: try row("last_used_at"), revokedAt: try row("revoked_at"))
    }
}
