import GRDB
import HeraldCore
import HeraldStorage

/// Resumable uploads' rows: the offset moves by compare-and-set, and a complete upload becomes a media row in one
/// transaction.
///
/// A `PATCH` commits two of these transactions (its hold, its offset's move) and a `HEAD` runs one read, so their
/// statements are the connection's cached ones: compiled anew each time (GRDB's authorizer visits each column of
/// `SELECT *`), they took a hold's transaction from about 100 µs to 200.
struct SQLiteUploadRepository: UploadRepository {
    let pool: DatabasePool

    /// The upload of an id and tenant, unexpired.
    private static let live = "SELECT * FROM resumable_uploads WHERE id = ? AND tenant = ? AND expires_at > ?"

    func insert(_ upload: Upload, tenant: Tenant) async throws {
        try await pool.write { db in
            try db.execute(
                literal: """
                    INSERT INTO resumable_uploads (id, tenant, content_type, description, length, received, bytes_path, multipart_id,
                                                   metadata, created_at, expires_at)
                    VALUES (\(upload.id), \(tenant.rawValue), \(upload.contentType.rawValue), \(upload.description), \(upload.length),
                            \(upload.offset), \(upload.bytesPath), \(upload.multipartID), \(upload.metadata), \(upload.createdAt.rfc3339),
                            \(upload.expiresAt.rfc3339))
                    """
            )
        }
    }

    func find(id: MediaID, tenant: Tenant, now: Timestamp) async throws -> Upload? {
        try await pool.read { db in
            try Row.fetchOne(db.cachedStatement(sql: Self.live), arguments: [id, tenant.rawValue, now.rfc3339]).flatMap(Self.upload)
        }
    }

    func hold(id: MediaID, tenant: Tenant, holder: String, now: Timestamp, until: Timestamp) async throws -> UploadHold {
        try await leaseWrite { db in
            guard
                let row = try Row.fetchOne(db.cachedStatement(sql: Self.live), arguments: [id, tenant.rawValue, now.rfc3339]),
                let upload = Self.upload(row)
            else { return .notFound }
            if let heldUntil: String = row["held_until"], heldUntil > now.rfc3339 { return .busy }
            try db.cachedStatement(sql: "UPDATE resumable_uploads SET holder = ?, held_until = ? WHERE id = ?")
                .execute(arguments: [holder, until.rfc3339, id])
            return .held(upload)
        }
    }

    func renew(id: MediaID, holder: String, until: Timestamp) async throws -> Bool {
        try await leaseWrite { db in
            try db.cachedStatement(sql: "UPDATE resumable_uploads SET held_until = ? WHERE id = ? AND holder = ?")
                .execute(arguments: [until.rfc3339, id, holder])
            return db.changesCount == 1
        }
    }

    func release(id: MediaID, holder: String) async throws {
        try await leaseWrite { db in
            try db.cachedStatement(sql: "UPDATE resumable_uploads SET holder = NULL, held_until = NULL WHERE id = ? AND holder = ?")
                .execute(arguments: [id, holder])
        }
    }

    /// Runs `body` in a write transaction whose commit SQLite does not wait to disk (`synchronous = NORMAL` for it alone):
    /// a hold is a lease, not data. A crash that loses one loses nothing, since with SQLite one process takes every hold
    /// and a restart releases them all; the writer's next durable commit (the offset's move) takes it to disk anyway.
    /// A `PATCH` so waits for two flushes (its bytes, its offset) instead of three.
    private func leaseWrite<T: Sendable>(_ body: @escaping @Sendable (Database) throws -> T) async throws -> T {
        try await pool.writeWithoutTransaction { db in
            try db.cachedStatement(sql: "PRAGMA synchronous = NORMAL").execute()
            let outcome = Result { () throws -> T in
                var value: T?
                try db.inTransaction(.immediate) {
                    value = try body(db)
                    return .commit
                }
                guard let value else { throw DatabaseError(message: "the transaction ran no body") }
                return value
            }
            // Every other commit of the writer is durable (see `SQLiteStorage.open`).
            try db.cachedStatement(sql: "PRAGMA synchronous = FULL").execute()
            return try outcome.get()
        }
    }

    func releaseHolds(prefix: String?) async throws {
        try await pool.write { db in
            try db.execute(
                sql:
                    "UPDATE resumable_uploads SET holder = NULL, held_until = NULL WHERE holder IS NOT NULL AND (? IS NULL OR substr(holder, 1, length(?)) = ?)",
                arguments: [prefix, prefix, prefix])
        }
    }

    func advance(id: MediaID, holder: String, from: Int64, to: Int64) async throws -> Bool {
        try await pool.write { db in try Self.advance(db, id: id, holder: holder, from: from, to: to) }
    }

    /// The `fsync` and the offset's commit on one of NIO's blocking threads, one after the other (GRDB's blocking `write`
    /// runs on the calling thread when the writer is free): no hop between them, one back.
    func advance(id: MediaID, holder: String, from: Int64, to: Int64, after synchronize: @escaping BlockingStep) async throws -> Bool {
        try await BlockingWork.run { [pool] in
            try synchronize()
            return try pool.write { db in try Self.advance(db, id: id, holder: holder, from: from, to: to) }
        }
    }

    private static func advance(_ db: Database, id: MediaID, holder: String, from: Int64, to: Int64) throws -> Bool {
        try db.cachedStatement(
            sql: """
                UPDATE resumable_uploads SET received = ?1,
                    holder = CASE WHEN ?1 = length THEN holder END, held_until = CASE WHEN ?1 = length THEN held_until END
                WHERE id = ?2 AND received = ?3 AND holder = ?4
                """
        ).execute(arguments: [to, id, from, holder])
        return db.changesCount == 1
    }

    func complete(id: MediaID, tenant: Tenant, as media: Media, stagingPath: String) async throws -> Bool {
        try await pool.write { db in
            try db.cachedStatement(sql: "DELETE FROM resumable_uploads WHERE id = ? AND tenant = ? AND received = length")
                .execute(arguments: [id, tenant.rawValue])
            guard db.changesCount == 1 else { return false }
            try SQLiteMediaRepository.insert(db, media, tenant: tenant, stagingPath: stagingPath)
            return true
        }
    }

    func delete(id: MediaID, tenant: Tenant) async throws -> Upload? {
        try await pool.write { db in
            try Row.fetchOne(
                db.cachedStatement(sql: "DELETE FROM resumable_uploads WHERE id = ? AND tenant = ? RETURNING *"), arguments: [id, tenant.rawValue]
            ).flatMap(Self.upload)
        }
    }

    func expire(now: Timestamp) async throws -> [Upload] {
        try await pool.write { db in
            try Row.fetchAll(db.cachedStatement(sql: "DELETE FROM resumable_uploads WHERE expires_at <= ? RETURNING *"), arguments: [now.rfc3339])
                .compactMap(Self.upload)
        }
    }

    func liveBytesPaths() async throws -> Set<String> {
        try await pool.read { db in Set(try String.fetchAll(db, sql: "SELECT bytes_path FROM resumable_uploads")) }
    }

    /// The upload of a `resumable_uploads` row (`nil` if the row holds values this version does not know).
    private static func upload(_ row: Row) -> Upload? {
        guard let type = MediaType(rawValue: row["content_type"]),
            let createdAt = Timestamp(rfc3339: row["created_at"]),
            let expiresAt = Timestamp(rfc3339: row["expires_at"])
        else { return nil }
        return Upload(
            id: row["id"], contentType: type, description: row["description"], length: row["length"], offset: row["received"],
            bytesPath: row["bytes_path"], multipartID: row["multipart_id"], metadata: row["metadata"], createdAt: createdAt,
            expiresAt: expiresAt)
    }
}
