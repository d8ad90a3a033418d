import HeraldCore
import HeraldStorage
import PostgresNIO

/// Resumable uploads' rows on PostgreSQL: the offset moves by compare-and-set, and a complete upload becomes a media
/// row in one transaction, whichever replica took its bytes.
struct PostgresUploadRepository: UploadRepository {
    let storage: PostgresStorage

    func insert(_ upload: Upload, tenant: Tenant) async throws {
        try await storage.autocommit { transaction in
            _ = try await transaction.run(
                """
                INSERT INTO resumable_uploads (id, tenant, content_type, description, length, received, bytes_path, multipart_id, metadata,
                                               created_at, expires_at)
                VALUES (\(upload.id), \(tenant.rawValue), \(upload.contentType.rawValue), \(upload.description), \(upload.length),
                        \(upload.offset), \(upload.bytesPath), \(upload.multipartID), \(upload.metadata), \(upload.createdAt),
                        \(upload.expiresAt))
                """)
        }
    }

    func find(id: MediaID, tenant: Tenant, now: Timestamp) async throws -> Upload? {
        try await storage.run(
            """
            SELECT \(unescaped: Self.columns) FROM resumable_uploads
            WHERE id = \(id) AND tenant = \(tenant.rawValue) AND expires_at > \(now)
            """
        ).first.map { try Self.upload(Columns($0)) }
    }

    func hold(id: MediaID, tenant: Tenant, holder: String, now: Timestamp, until: Timestamp) async throws -> UploadHold {
        try await storage.write { transaction in
            guard
                let row = try await transaction.row(
                    """
                    SELECT \(unescaped: Self.columns), held_until FROM resumable_uploads
                    WHERE id = \(id) AND tenant = \(tenant.rawValue) AND expires_at > \(now) FOR UPDATE
                    """)
            else { return .notFound }
            if let heldUntil: Timestamp = try row("held_until"), heldUntil > now { return .busy }
            try await transaction.run("UPDATE resumable_uploads SET holder = \(holder), held_until = \(until) WHERE id = \(id)")
            return .held(try Self.upload(row))
        }
    }

    func renew(id: MediaID, holder: String, until: Timestamp) async throws -> Bool {
        try await !storage.run("UPDATE resumable_uploads SET held_until = \(until) WHERE id = \(id) AND holder = \(holder) RETURNING id").isEmpty
    }

    func release(id: MediaID, holder: String) async throws {
        _ = try await storage.run("UPDATE resumable_uploads SET holder = NULL, held_until = NULL WHERE id = \(id) AND holder = \(holder)")
    }

    func releaseHolds(prefix: String?) async throws {
        _ = try await storage.run(
            """
            UPDATE resumable_uploads SET holder = NULL, held_until = NULL
            WHERE holder IS NOT NULL AND (\(prefix)::text IS NULL OR left(holder, length(\(prefix)::text)) = \(prefix)::text)
            """)
    }

    func advance(id: MediaID, holder: String, from: Int64, to: Int64) async throws -> Bool {
        try await !storage.run(
            """
            UPDATE resumable_uploads SET received = \(to),
                holder = CASE WHEN \(to) = length THEN holder END, held_until = CASE WHEN \(to) = length THEN held_until END
            WHERE id = \(id) AND received = \(from) AND holder = \(holder) RETURNING id
            """
        ).isEmpty
    }

    func complete(id: MediaID, tenant: Tenant, as media: Media, stagingPath: String) async throws -> Bool {
        try await storage.write { transaction in
            let deleted = try await transaction.run(
                "DELETE FROM resumable_uploads WHERE id = \(id) AND tenant = \(tenant.rawValue) AND received = length RETURNING id")
            guard !deleted.isEmpty else { return false }
            try await PostgresMediaRepository.insert(transaction, media, tenant: tenant, stagingPath: stagingPath)
            return true
        }
    }

    func delete(id: MediaID, tenant: Tenant) async throws -> Upload? {
        try await storage.run(
            "DELETE FROM resumable_uploads WHERE id = \(id) AND tenant = \(tenant.rawValue) RETURNING \(unescaped: Self.columns)"
        ).first.map { try Self.upload(Columns($0)) }
    }

    func expire(now: Timestamp) async throws -> [Upload] {
        try await storage.run("DELETE FROM resumable_uploads WHERE expires_at <= \(now) RETURNING \(unescaped: Self.columns)")
            .map { try Self.upload(Columns($0)) }
    }

    func liveBytesPaths() async throws -> Set<String> {
        Set(try await storage.run("SELECT bytes_path FROM resumable_uploads").map { try $0.decode(String.self) })
    }

    private static let columns = "id, content_type, description, length, received, bytes_path, multipart_id, metadata, created_at, expires_at"

    private static func upload(_ row: Columns) throws -> Upload {
        let id: MediaID = try row("id")
        guard let type = MediaType(rawValue: try row("content_type")) else { throw UnreadableRow(table: "resumable_uploads", id: id.rawValue) }
        return Upload(
            id: id, contentType: type, description: try row("description"), length: try row("length"), offset: try row("received"),
            bytesPath: try row("bytes_path"), multipartID: try row("multipart_id"), metadata: try row("metadata"),
            createdAt: try row("created_at"), expiresAt: try row("expires_at"))
    }
}
