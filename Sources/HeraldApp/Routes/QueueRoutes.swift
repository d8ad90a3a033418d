import HeraldCore
import HeraldStorage
import MicroHTTP
import Publishing

/// `GET /v1/queue`, `POST /v1/queue/pause`, `POST /v1/queue/resume`.
struct QueueRoutes {
    let jobs: any JobRepository
    let runner: JobRunner

    func register(in router: inout Router) {
        router.get("/v1/queue") { _ in
            .json(try await status())
        }
        router.post("/v1/queue/pause") { _ in
            await runner.pause()
            return .json(try await status())
        }
        router.post("/v1/queue/resume") { _ in
            await runner.resume()
            return .json(try await status())
        }
    }

    /// Whether claiming is paused and how many may run, from the runner; the job counts from the database, so they
    /// agree with `GET /v1/jobs?state=` (and count the jobs of every process sharing it).
    private func status() async throws -> QueueStatus {
        let runnerStatus = await runner.status()
        let counts = try await jobs.counts()
        return QueueStatus(
            paused: runnerStatus.paused,
            workers: runnerStatus.workers,
            running: counts.running,
            queued: counts.queued,
            scheduled: counts.scheduled
        )
    }
}
