import GRDB
import HeraldCore
import HeraldStorage

/// API keys: created with the SHA-256 of their text (never the text), listed, revoked, looked up by that hash.
struct SQLiteKeyRepository: KeyRepository {
    let pool: DatabasePool

    /// Records a new key whose text hashes to `hash` (64 lowercase hex digits).
    func insert(_ key: APIKey, hash: String) async throws {
        try await pool.write { db in try Self.insert(db, key, hash: hash) }
    }

    private static func insert(_ db: Database, _ key: APIKey, hash: String) throws {
        try db.run(
            "INSERT INTO keys (id, name, tenant, scope, hash, created_at) VALUES (?, ?, ?, ?, ?, ?)",
            [key.id, key.name, key.tenant.rawValue, key.scope.rawValue, hash, key.createdAt.rfc3339]
        )
    }

    /// Records `key` only if the table holds no key at all, in one transaction (so two starts make one initial key).
    /// Returns whether it was inserted.
    func insertIfEmpty(_ key: APIKey, hash: String) async throws -> Bool {
        try await pool.write { db in
            guard try Int.fetchOne(db, sql: "SELECT 1 FROM keys LIMIT 1") == nil else { return false }
            try Self.insert(db, key, hash: hash)
            return true
        }
    }

    /// The key whose text hashes to `hash`, revoked or not; nil if there is none.
    ///
    /// Synchronous: the authenticator calls it on an HTTP thread when its cache has no fresh entry (once a second
    /// per key in use), never on the cooperative pool.
    func find(hash: String) throws -> APIKey? {
        try pool.read { db in
            try Row.fetchOne(db.cachedStatement(sql: "SELECT * FROM keys WHERE hash = ?"), arguments: [hash]).flatMap(Self.key)
        }
    }

    /// The key with this id, revoked or not.
    func find(id: KeyID) async throws -> APIKey? {
        try await pool.read { db in
            try Row.fetchOne(db.cachedStatement(sql: "SELECT * FROM keys WHERE id = ?"), arguments: [id]).flatMap(Self.key)
        }
    }

    /// One page of every tenant's keys, newest first, strictly after `cursor`.
    func list(limit: Int, after cursor: HeraldCore.Cursor?) async throws -> Page<APIKey> {
        try await pool.read { db in
            let rows = try Rows.listRows(db, table: "keys", tenant: nil, state: nil, limit: limit, after: cursor)
            let keys = try rows.map { row in
                guard let key = Self.key(row) else { throw UnreadableRow(table: "keys", id: row["id"]) }
                return key
            }
            return Page(fetched: keys, limit: limit, cursor: \.cursor)
        }
    }

    /// Revokes the key (keeping the first revocation's time); the key as it is now, nil if there is none.
    func revoke(id: KeyID, now: Timestamp) async throws -> APIKey? {
        try await pool.write { db in
            try db.run("UPDATE keys SET revoked_at = coalesce(revoked_at, ?) WHERE id = ?", [now.rfc3339, id])
            return try Row.fetchOne(db.cachedStatement(sql: "SELECT * FROM keys WHERE id = ?"), arguments: [id]).flatMap(Self.key)
        }
    }

    /// Records when keys were last used, in one transaction (a later time never goes back).
    func recordUse(_ uses: [KeyID: Timestamp]) async throws {
        guard !uses.isEmpty else { return }
        try await pool.write { db in
            for (id, time) in uses {
                try db.run(
                    "UPDATE keys SET last_used_at = ? WHERE id = ? AND (last_used_at IS NULL OR last_used_at < ?)",
                    [time.rfc3339, id, time.rfc3339]
                )
            }
        }
    }

    /// The API object of a `keys` row, nil if a value is unreadable.
    static func key(_ row: Row) -> APIKey? {
        guard let scope = Scope(rawValue: row["scope"]), let createdAt = Timestamp(rfc3339: row["created_at"]) else { return nil }
        let lastUsed = Rows.optionalTimestamp(row["last_used_at"])
        let revoked = Rows.optionalTimestamp(row["revoked_at"])
        guard lastUsed.isReadable, revoked.isReadable else { return nil }
        return APIKey(
            id: row["id"],
            name: row["name"],
            tenant: Tenant(uncheckedName: row["tenant"]),
            scope: scope,
            createdAt: createdAt,
            lastUsedAt: lastUsed.value,
            revokedAt: revoked.value
        )
    }
}
