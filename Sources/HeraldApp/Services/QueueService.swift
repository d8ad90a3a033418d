import HeraldCore
import HeraldStorage
import Publishing

/// Pauses and resumes claiming on every replica and reports the queue: the rules between the queue routes and
/// storage, where the switch, the live replicas and the job counts are, whichever replica answers.
struct QueueService {
    let jobs: any JobRepository
    let queue: any QueueRepository

    /// The switch, the replicas alive and their workers, and the job counts, all from the database: every replica
    /// answers the same (and the counts agree with `GET /v1/jobs?state=`).
    func status() async throws -> QueueStatus {
        let paused = try await queue.isPaused()
        let live = try await queue.liveReplicas(now: .now())
        let counts = try await jobs.counts()
        return QueueStatus(
            paused: paused, replicas: live.replicas, workers: live.workers, running: counts.running, queued: counts.queued,
            scheduled: counts.scheduled)
    }

    /// Stops claiming on every replica; running jobs finish. The queue as it is then.
    func pause() async throws -> QueueStatus {
        try await queue.setPaused(true)
        return try await status()
    }

    /// Claims again, on every replica. The queue as it is then.
    func resume() async throws -> QueueStatus {
        try await queue.setPaused(false)
        return try await status()
    }
}
