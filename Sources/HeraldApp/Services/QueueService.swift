import HeraldCore
import HeraldStorage
import Publishing

/// Pauses and resumes this process's claims and reports the queue: the rules between the queue routes, the runner
/// and storage.
struct QueueService {
    let jobs: any JobRepository
    let runner: JobRunner

    /// Whether claiming is paused and how many may run, from the runner; the job counts from the database, so they
    /// agree with `GET /v1/jobs?state=` (and count the jobs of every process sharing it).
    func status() async throws -> QueueStatus {
        let runnerStatus = await runner.status()
        let counts = try await jobs.counts()
        return QueueStatus(
            paused: runnerStatus.paused, workers: runnerStatus.workers, running: counts.running, queued: counts.queued,
            scheduled: counts.scheduled)
    }

    /// Stops claiming; running jobs finish. The queue as it is then.
    func pause() async throws -> QueueStatus {
        await runner.pause()
        return try await status()
    }

    /// Claims again. The queue as it is then.
    func resume() async throws -> QueueStatus {
        await runner.resume()
        return try await status()
    }
}
