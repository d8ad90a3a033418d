import HeraldCore
import HeraldStorage
import PostgresNIO

/// The objects failed and cancelled jobs may have left in the store, to delete: written with the job's end
/// (``PostgresTransitions/end(_:_:jobID:postID:error:now:)``), removed by a re-publish.
///
/// A row's `due_at`, as text with microseconds, identifies its version: a later job's end writes a new one.
struct PostgresObjectDeletionRepository: ObjectDeletionRepository {
    let storage: PostgresStorage

    /// `due_at` as the token ``PendingObjectDeletion/dueAt`` carries (exact, whatever the session's time zone).
    private static func version(of dueAt: String = "due_at") -> String {
        "to_char(\(dueAt) AT TIME ZONE 'UTC', 'YYYY-MM-DD\"T\"HH24:MI:SS.US\"Z\"')"
    }

    /// One statement: the due rows locked, skipping those another replica is claiming, and pushed to `leaseUntil`.
    func claimDue(now: Timestamp, leaseUntil: Timestamp, limit: Int) async throws -> [PendingObjectDeletion] {
        try await storage.run(
            """
            WITH due AS MATERIALIZED (
                SELECT media_id FROM object_deletions WHERE due_at <= \(now) ORDER BY due_at LIMIT \(limit) FOR UPDATE SKIP LOCKED
            )
            UPDATE object_deletions o SET due_at = \(leaseUntil) FROM due WHERE o.media_id = due.media_id
            RETURNING o.media_id, o.content_type, \(unescaped: Self.version(of: "o.due_at")) AS version,
                o.attempts
            """
        ).map { row in
            let row = Columns(row)
            return PendingObjectDeletion(
                mediaID: try row("media_id"), contentType: try row("content_type"), dueAt: try row("version"), attempts: try row("attempts"))
        }
    }

    func nextDue() async throws -> Timestamp? {
        try await storage.run("SELECT min(due_at) FROM object_deletions").first?.decode(Timestamp?.self)
    }

    func isPending(_ deletion: PendingObjectDeletion) async throws -> Bool {
        try await !storage.run(
            "SELECT 1 FROM object_deletions WHERE media_id = \(deletion.mediaID) AND \(unescaped: Self.version()) = \(deletion.dueAt)"
        ).isEmpty
    }

    func done(_ deletion: PendingObjectDeletion) async throws {
        try await storage.run(
            "DELETE FROM object_deletions WHERE media_id = \(deletion.mediaID) AND \(unescaped: Self.version()) = \(deletion.dueAt)")
    }

    func retry(_ deletion: PendingObjectDeletion, at next: Timestamp, error: String) async throws {
        try await storage.run(
            """
            UPDATE object_deletions SET due_at = \(next), attempts = attempts + 1, last_error = \(String(error.prefix(500)))
            WHERE media_id = \(deletion.mediaID) AND \(unescaped: Self.version()) = \(deletion.dueAt)
            """)
    }

    func pendingMediaIDs() async throws -> [MediaID] {
        try await storage.run("SELECT media_id FROM object_deletions ORDER BY media_id").map { try $0.decode(MediaID.self) }
    }
}
