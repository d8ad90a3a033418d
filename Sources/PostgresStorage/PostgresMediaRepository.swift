import HeraldCore
import HeraldStorage
import PostgresNIO

/// Media rows on PostgreSQL: inserted once their bytes are staged, read back as the API's media object.
struct PostgresMediaRepository: MediaRepository {
    let storage: PostgresStorage

    func insert(_ media: Media, tenant: Tenant, stagingPath: String) async throws {
        try await storage.autocommit { try await Self.insert($0, media, tenant: tenant, stagingPath: stagingPath) }
    }

    /// Inserts an unattached medium's row within the caller's transaction.
    static func insert(_ transaction: Transaction, _ media: Media, tenant: Tenant, stagingPath: String) async throws {
        try await transaction.run(
            """
            INSERT INTO media (id, tenant, content_type, size, sha256, description, state, url, staging_path, created_at)
            VALUES (\(media.id), \(tenant.rawValue), \(media.contentType.rawValue), \(media.size), \(media.sha256), \(media.description),
                    \(media.state.rawValue), \(media.url), \(stagingPath), \(media.createdAt))
            """)
    }

    func find(id: MediaID, tenant: Tenant) async throws -> Media? {
        try await storage.run("SELECT \(unescaped: PostgresRows.mediaColumns) FROM media WHERE id = \(id) AND tenant = \(tenant.rawValue)")
            .first.map { try PostgresRows.media(Columns($0)) }
    }

    func deleteStaged(id: MediaID, tenant: Tenant) async throws -> MediaDeletion {
        try await storage.write { transaction in
            guard
                let row = try await transaction.row(
                    "SELECT post_id, staging_path FROM media WHERE id = \(id) AND tenant = \(tenant.rawValue) FOR UPDATE")
            else { return .notFound }
            if let postID: PostID = try row("post_id") { return .attached(postID: postID) }
            try await transaction.run("DELETE FROM media WHERE id = \(id)")
            return .deleted(stagingPath: try row("staging_path"))
        }
    }

    // MARK: The lifecycle of data

    func expireUnattached(createdBy cutoff: Timestamp) async throws -> [String] {
        // SKIP LOCKED: a medium a post is taking right now is that post's, not the sweep's.
        try await storage.run(
            """
            DELETE FROM media WHERE id IN (SELECT id FROM media WHERE post_id IS NULL AND created_at <= \(cutoff) FOR UPDATE SKIP LOCKED)
            RETURNING staging_path
            """
        ).map { try $0.decode(String.self) }
    }

    func liveStagingPaths() async throws -> Set<String> {
        Set(
            try await storage.run(
                """
                SELECT media.staging_path FROM media LEFT JOIN posts ON posts.id = media.post_id
                WHERE posts.id IS NULL OR posts.state <> 'published'
                """
            ).map { try $0.decode(String.self) })
    }

    // MARK: Consistency

    func holdings() async throws -> [MediaHolding] {
        try await storage.run(
            """
            SELECT media.id, media.post_id, media.staging_path, media.object_key, coalesce(posts.state = 'published', false) AS published
            FROM media LEFT JOIN posts ON posts.id = media.post_id ORDER BY media.id
            """
        ).map { row in
            let row = Columns(row)
            return MediaHolding(
                mediaID: try row("id"), postID: try row("post_id"), stagingPath: try row("staging_path"), objectKey: try row("object_key"),
                published: try row("published"))
        }
    }
}
