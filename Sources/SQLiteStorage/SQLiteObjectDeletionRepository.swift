import GRDB
import HeraldCore
import HeraldStorage

/// The objects a failed or cancelled job may have left in the store, to delete (see `Migrations/0007`).
///
/// Rows are written by the transitions that end a job failed or cancelled and removed by a re-publish; the
/// cleaner reads what is due and records each DELETE's outcome.
struct SQLiteObjectDeletionRepository: ObjectDeletionRepository {
    let pool: DatabasePool

    /// Inside the transaction that ends `postID`'s job failed or cancelled: every medium of the post, due after ``PendingObjectDeletion/settle``.
    static func enqueue(_ db: Database, postID: PostID, now: Timestamp) throws {
        try db.run(
            """
            INSERT INTO object_deletions (media_id, content_type, due_at, attempts, last_error)
            SELECT id, content_type, ?, 0, NULL FROM media WHERE post_id = ?
            ON CONFLICT (media_id) DO UPDATE SET due_at = excluded.due_at, attempts = 0, last_error = NULL
            """,
            [now.adding(milliseconds: PendingObjectDeletion.settle).rfc3339, postID]
        )
    }

    /// Inside the transaction that re-publishes `postID`: its objects are wanted again.
    static func cancel(_ db: Database, postID: PostID) throws {
        try db.run("DELETE FROM object_deletions WHERE media_id IN (SELECT id FROM media WHERE post_id = ?)", [postID])
    }

    /// Claims up to `limit` deletions due at `now`, soonest first, each due again only at `leaseUntil` (its new
    /// version). Read first, written only when something is due: an idle clean-up commits nothing.
    func claimDue(now: Timestamp, leaseUntil: Timestamp, limit: Int) async throws -> [PendingObjectDeletion] {
        let due = try await pool.read { db in
            try String.fetchAll(
                db.cachedStatement(sql: "SELECT media_id FROM object_deletions WHERE due_at <= ? ORDER BY due_at LIMIT ?"),
                arguments: [now.rfc3339, limit])
        }
        guard !due.isEmpty else { return [] }
        return try await pool.write { db in
            try Row.fetchAll(
                db,
                sql: """
                    UPDATE object_deletions SET due_at = ? WHERE media_id IN (\(databaseQuestionMarks(count: due.count))) AND due_at <= ?
                    RETURNING media_id, content_type, due_at, attempts
                    """,
                arguments: [leaseUntil.rfc3339] + StatementArguments(due) + [now.rfc3339]
            ).map { row in
                PendingObjectDeletion(mediaID: row["media_id"], contentType: row["content_type"], dueAt: row["due_at"], attempts: row["attempts"])
            }
        }
    }

    /// When the next deletion is due; nil when none is pending.
    func nextDue() async throws -> Timestamp? {
        try await pool.read { db in
            try String.fetchOne(db.cachedStatement(sql: "SELECT min(due_at) FROM object_deletions")).flatMap(Timestamp.init(rfc3339:))
        }
    }

    /// Whether `deletion` is still wanted: not removed by a re-publish, nor pushed back by a later job's end.
    func isPending(_ deletion: PendingObjectDeletion) async throws -> Bool {
        try await pool.read { db in
            try Bool.fetchOne(
                db.cachedStatement(sql: "SELECT EXISTS (SELECT 1 FROM object_deletions WHERE media_id = ? AND due_at = ?)"),
                arguments: [deletion.mediaID, deletion.dueAt]) ?? false
        }
    }

    /// The object is gone: the row goes, unless a later job's end wrote it again meanwhile.
    func done(_ deletion: PendingObjectDeletion) async throws {
        try await pool.write { db in
            try db.run("DELETE FROM object_deletions WHERE media_id = ? AND due_at = ?", [deletion.mediaID, deletion.dueAt])
        }
    }

    /// The DELETE failed: try again at `next`.
    func retry(_ deletion: PendingObjectDeletion, at next: Timestamp, error: String) async throws {
        try await pool.write { db in
            try db.run(
                "UPDATE object_deletions SET due_at = ?, attempts = attempts + 1, last_error = ? WHERE media_id = ? AND due_at = ?",
                [next.rfc3339, String(error.prefix(500)), deletion.mediaID, deletion.dueAt]
            )
        }
    }

    /// Every pending deletion's medium, for tests and `herald check`.
    func pendingMediaIDs() async throws -> [MediaID] {
        try await pool.read { db in try MediaID.fetchAll(db, sql: "SELECT media_id FROM object_deletions ORDER BY media_id") }
    }
}
