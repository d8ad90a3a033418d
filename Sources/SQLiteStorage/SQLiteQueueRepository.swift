import GRDB
import HeraldCore
import HeraldStorage
import Synchronization

/// The queue's switch on SQLite (a row of `queue_control`), and the one replica: the process that holds the data
/// directory's lock, whose heartbeat is kept in memory (writing it would cost a commit every few seconds for nothing).
struct SQLiteQueueRepository: QueueRepository {
    let pool: DatabasePool
    let changes: JobChanges
    let replicas: Replicas

    /// The processes' heartbeats, in memory: on SQLite only this one.
    final class Replicas: Sendable {
        let alive = Mutex<[String: (workers: Int, until: Timestamp)]>([:])
    }

    func isPaused() async throws -> Bool {
        try await pool.read { db in try Self.paused(db) }
    }

    func setPaused(_ paused: Bool) async throws {
        try await pool.write { db in try db.run("UPDATE queue_control SET paused = ? WHERE id = 1", [paused]) }
        changes.publishQueue(paused: paused)
    }

    func heartbeat(replica: String, workers: Int, until: Timestamp) async throws -> Bool {
        replicas.alive.withLock { $0[replica] = (workers, until) }
        return try await isPaused()
    }

    func liveReplicas(now: Timestamp) async throws -> (replicas: Int, workers: Int) {
        replicas.alive.withLock { alive in
            let live = alive.values.filter { $0.until > now }
            return (live.count, live.reduce(0) { $0 + $1.workers })
        }
    }

    func leave(replica: String) async throws {
        _ = replicas.alive.withLock { $0.removeValue(forKey: replica) }
    }

    private static func paused(_ db: Database) throws -> Bool {
        try Bool.fetchOne(db.cachedStatement(sql: "SELECT paused FROM queue_control WHERE id = 1")) ?? false
    }
}
