import HeraldCore
import HeraldStorage
import PostgresNIO

/// The queue's switch (`queue_control`, whose trigger tells every replica) and the replicas' heartbeats (`replicas`).
struct PostgresQueueRepository: QueueRepository {
    let storage: PostgresStorage

    func isPaused() async throws -> Bool {
        try await storage.run("SELECT paused FROM queue_control WHERE id = 1").first?.decode(Bool.self) ?? false
    }

    func setPaused(_ paused: Bool) async throws {
        try await storage.run("UPDATE queue_control SET paused = \(paused) WHERE id = 1")
        // This replica at once; the others (and this one again) when the notification comes.
        storage.changes.publishQueue(paused: paused)
    }

    /// One statement: the replica's row renewed, and the switch read with it.
    func heartbeat(replica: String, workers: Int, until: Timestamp) async throws -> Bool {
        try await storage.run(
            """
            INSERT INTO replicas AS r (id, workers, alive_until, started_at) VALUES (\(replica), \(workers), \(until), now())
            ON CONFLICT (id) DO UPDATE SET workers = excluded.workers, alive_until = excluded.alive_until
            RETURNING (SELECT paused FROM queue_control WHERE id = 1)
            """
        ).first?.decode(Bool.self) ?? false
    }

    func liveReplicas(now: Timestamp) async throws -> (replicas: Int, workers: Int) {
        guard
            let row = try await storage.run(
                "SELECT count(*), coalesce(sum(workers), 0) FROM replicas WHERE alive_until > \(now)"
            ).first
        else { return (0, 0) }
        return try row.decode((Int, Int).self)
    }

    func leave(replica: String) async throws {
        try await storage.run("DELETE FROM replicas WHERE id = \(replica)")
    }
}
