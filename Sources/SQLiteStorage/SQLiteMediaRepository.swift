import GRDB
import HeraldCore
import HeraldStorage

/// Media rows: inserted once their bytes are staged on disk, read back as the API's media object.
struct SQLiteMediaRepository: MediaRepository {

    let pool: DatabasePool

    /// Records a staged medium of `tenant`; `stagingPath` is relative to the data directory.
    func insert(_ media: Media, tenant: Tenant, stagingPath: String) async throws {
        try await pool.write { db in try Self.insert(db, media, tenant: tenant, stagingPath: stagingPath) }
    }

    /// Inserts an unattached medium's row within the caller's transaction.
    static func insert(_ db: Database, _ media: Media, tenant: Tenant, stagingPath: String) throws {
        try db.execute(
            literal: """
                INSERT INTO media (id, content_type, size, sha256, description, state, url, post_id, position, staging_path, created_at, tenant)
                VALUES (\(media.id), \(media.contentType.rawValue), \(media.size), \(media.sha256), \(media.description),
                        \(media.state.rawValue), \(media.url), NULL, NULL, \(stagingPath), \(media.createdAt.rfc3339), \(tenant.rawValue))
                """
        )
    }

    /// The medium with this id, if `tenant` owns it.
    func find(id: MediaID, tenant: Tenant) async throws -> Media? {
        try await pool.read { db in
            // Cached: compiling `SELECT *` anew each call (GRDB's authorizer visits each column) made a request 152 µs of
            // CPU, 86 with it cached.
            try Row.fetchOne(db.cachedStatement(sql: "SELECT * FROM media WHERE id = ? AND tenant = ?"), arguments: [id, tenant.rawValue])
                .flatMap(Self.media)
        }
    }

    /// Deletes a staged medium of `tenant` that no post holds, in one transaction.
    func deleteStaged(id: MediaID, tenant: Tenant) async throws -> MediaDeletion {
        try await pool.write { db in
            guard
                let row = try Row.fetchOne(
                    db.cachedStatement(sql: "SELECT post_id, staging_path FROM media WHERE id = ? AND tenant = ?"),
                    arguments: [id, tenant.rawValue])
            else {
                return .notFound
            }
            if let postID: PostID = row["post_id"] { return .attached(postID: postID) }
            try db.cachedStatement(sql: "DELETE FROM media WHERE id = ?").execute(arguments: [id])
            return .deleted(stagingPath: row["staging_path"])
        }
    }

    /// The API object of a `media` row (`nil` if the row holds values this version does not know).
    static func media(_ row: Row) -> Media? {
        guard let type = MediaType(rawValue: row["content_type"]),
            let state = MediaState(rawValue: row["state"]),
            let createdAt = Timestamp(rfc3339: row["created_at"])
        else { return nil }
        return Media(
            id: row["id"],
            contentType: type,
            size: row["size"],
            sha256: row["sha256"],
            description: row["description"],
            state: state,
            url: row["url"],
            postID: row["post_id"],
            createdAt: createdAt
        )
    }
}

// MARK: The lifecycle of data

extension SQLiteMediaRepository {
    /// Deletes unattached media created at or before `cutoff` (`--staged-media-ttl` ago), in one transaction; returns
    /// their staged files' paths (relative to the data directory) for the caller to remove once it has committed.
    func expireUnattached(createdBy cutoff: Timestamp) async throws -> [String] {
        try await pool.write { db in
            try String.fetchAll(
                db.cachedStatement(sql: "DELETE FROM media WHERE post_id IS NULL AND created_at <= ? RETURNING staging_path"),
                arguments: [cutoff.rfc3339]
            )
        }
    }

    /// The staged paths whose files are still needed: media not attached, or attached to a post not published.
    /// A staged file not among them is left over (a crash between a publish and its clean-up, or before a row).
    func liveStagingPaths() async throws -> Set<String> {
        try await pool.read { db in
            Set(
                try String.fetchAll(
                    db,
                    sql: """
                        SELECT media.staging_path FROM media LEFT JOIN posts ON posts.id = media.post_id
                        WHERE posts.id IS NULL OR posts.state <> 'published'
                        """
                ))
        }
    }
}

// MARK: Consistency

extension SQLiteMediaRepository {

    /// Every medium, with what it should have on disk and in the store.
    func holdings() async throws -> [MediaHolding] {
        try await pool.read { db in
            try Row.fetchAll(
                db,
                sql: """
                    SELECT media.id, media.post_id, media.staging_path, media.object_key, posts.state = 'published' AS published
                    FROM media LEFT JOIN posts ON posts.id = media.post_id ORDER BY media.id
                    """
            ).map { row in
                MediaHolding(
                    mediaID: row["id"], postID: row["post_id"], stagingPath: row["staging_path"], objectKey: row["object_key"],
                    published: row["published"] ?? false)
            }
        }
    }
}
