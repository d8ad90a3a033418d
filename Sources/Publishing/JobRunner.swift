import HeraldCore
public import HeraldStorage
public import Logging
import Metrics
public import ServiceLifecycle
import Synchronization

/// How the runner works its queue.
public struct RunnerConfiguration: Sendable {
    /// Jobs running at once.
    public var workers: Int
    /// Uploads at once within one job.
    public var uploadConcurrency: Int
    /// Tries per upload for transient errors.
    public var uploadAttempts: Int
    /// Time one upload attempt may take (a timeout counts as transient).
    public var uploadTimeout: Duration
    /// Time running jobs get on shutdown before they are cancelled and re-queued.
    public var shutdownGrace: Duration
    /// How long a claim holds a job without a heartbeat: a crashed process's jobs are reclaimed after it.
    public var lease: Duration
    /// How often a running job renews its lease (and looks for a cancel made by another process).
    public var heartbeat: Duration
    /// How often expired leases are looked for while idle.
    public var reclaimInterval: Duration
    /// First retry delay; doubled per attempt, with jitter.
    public var retryBaseDelay: Duration
    /// Staged paths in the database are relative to this.
    public var dataDirectory: String

    public init(
        workers: Int = 8,
        uploadConcurrency: Int = 4,
        uploadAttempts: Int = 3,
        uploadTimeout: Duration = .seconds(60),
        shutdownGrace: Duration = .seconds(20),
        lease: Duration = .seconds(30),
        heartbeat: Duration = .seconds(10),
        reclaimInterval: Duration = .seconds(10),
        retryBaseDelay: Duration = .milliseconds(200),
        dataDirectory: String = "./data"
    ) {
        self.workers = workers
        self.uploadConcurrency = uploadConcurrency
        self.uploadAttempts = uploadAttempts
        self.uploadTimeout = uploadTimeout
        self.shutdownGrace = shutdownGrace
        self.lease = lease
        self.heartbeat = heartbeat
        self.reclaimInterval = reclaimInterval
        self.retryBaseDelay = retryBaseDelay
        self.dataDirectory = dataDirectory
    }
}

/// Claims jobs from the durable queue and publishes each as one parent task with a task group of uploads.
///
/// A job's uploads run at most `uploadConcurrency` at once; transient failures are retried with backoff; the post is
/// committed in one transaction only when every upload succeeded. A failure for good cancels the other uploads and
/// deletes what was stored; so does a cancel by id. On shutdown running jobs get `shutdownGrace`, then are re-queued.
public actor JobRunner: Service {
    private let jobs: JobRepository
    private let store: any MediaStore
    private let events: JobEvents
    private let configuration: RunnerConfiguration
    private let logger: Logger
    /// This process's name in `jobs.locked_by`.
    public nonisolated let runnerID = "runner-" + Identifier.generate()
    private let wakeup = Signal()
    private var paused = false
    /// Set from the graceful-shutdown handler, which cannot wait for the actor.
    private let draining = Atomic(false)
    private var running: [String: JobControl] = [:]

    public init(jobs: JobRepository, store: any MediaStore, events: JobEvents, configuration: RunnerConfiguration, logger: Logger) {
        self.jobs = jobs
        self.store = store
        self.events = events
        self.configuration = configuration
        self.logger = logger
    }

    // MARK: Control

    /// Wakes the claim loop: a job was enqueued or re-published.
    public nonisolated func wake() { wakeup.fire() }

    /// Stops claiming and starts the grace period for running jobs: called when shutdown begins, before this
    /// service's own turn (the group stops the HTTP server first, which may take a while).
    public nonisolated func stopClaiming() {
        draining.store(true, ordering: .relaxed)
        wakeup.fire()
    }

    /// Cancels a job's parent task if this process runs it (the repository has stored `cancel_requested`).
    public func cancel(jobID: String) {
        running[jobID]?.stop(.cancelRequested)
    }

    /// Stops claiming new jobs; running ones finish.
    public func pause() { paused = true }

    /// Claims again.
    public func resume() {
        paused = false
        wakeup.fire()
    }

    /// Whether paused, the worker limit, and the jobs this process runs now.
    public func status() -> (paused: Bool, workers: Int, running: Int) {
        (paused, configuration.workers, running.count)
    }

    // MARK: The loop

    public func run() async throws {
        await withDiscardingTaskGroup { group in
            await withGracefulShutdownHandler {
                await loop(group: &group)
            } onGracefulShutdown: {
                self.stopClaiming()
            }
            await drain()
            // Stopped early by `stopClaiming()`: still return only when the group asks (or cancels).
            try? await gracefulShutdown()
        }
        logger.info("job runner stopped")
    }

    private func loop(group: inout DiscardingTaskGroup) async {
        var lastReclaim = ContinuousClock.now - configuration.reclaimInterval
        while !draining.load(ordering: .relaxed), !Task.isCancelled {
            do {
                if ContinuousClock.now - lastReclaim >= configuration.reclaimInterval {
                    lastReclaim = .now
                    for jobID in try await jobs.reclaimExpired(now: .now()) {
                        logger.notice("job lease expired: back to queued", metadata: ["job_id": "\(jobID)"])
                        events.changed(jobID)
                    }
                }
                _ = try await jobs.promoteDue(now: .now())
                while !paused, !draining.load(ordering: .relaxed), running.count < configuration.workers {
                    let lease = Timestamp.now().adding(configuration.lease)
                    guard let claimed = try await jobs.claim(runner: runnerID, leaseUntil: lease, now: .now()) else { break }
                    start(claimed, in: &group)
                }
            } catch {
                logger.error("job queue error", metadata: ["error": "\(error)"])
            }
            await wakeup.wait(timeout: await idleTimeout())
        }
    }

    /// Until the next scheduled job is due, or the next reclaim pass.
    private func idleTimeout() async -> Duration {
        var timeout = configuration.reclaimInterval
        if let next = try? await jobs.nextScheduledRunAt() {
            let millis = max(0, next.milliseconds(since: .now()))
            timeout = min(timeout, .milliseconds(millis))
        }
        return timeout
    }

    /// Gives running jobs the grace period, then stops them for re-queueing.
    private func drain() async {
        guard !running.isEmpty else { return }
        logger.info("waiting for running jobs", metadata: ["count": "\(running.count)"])
        let deadline = ContinuousClock.now + configuration.shutdownGrace
        while !running.isEmpty, ContinuousClock.now < deadline {
            await wakeup.wait(timeout: deadline - ContinuousClock.now)
        }
        for control in running.values { control.stop(.shutdown) }
    }

    private func start(_ job: ClaimedJob, in group: inout DiscardingTaskGroup) {
        let control = JobControl()
        running[job.jobID] = control
        events.changed(job.jobID)
        Gauge(label: "herald_jobs_running").record(running.count)
        logger.info("job started", metadata: ["job_id": "\(job.jobID)", "post_id": "\(job.postID)", "attempt": "\(job.attempt)"])
        let execution = Execution(
            job: job,
            control: control,
            jobs: jobs,
            store: store,
            events: events,
            configuration: configuration,
            runnerID: runnerID,
            logger: logger
        )
        group.addTask {
            let outcome = await execution.run()
            await self.finished(job.jobID, outcome: outcome)
        }
    }

    private func finished(_ jobID: String, outcome: Execution.Outcome) {
        running[jobID] = nil
        Gauge(label: "herald_jobs_running").record(running.count)
        Counter(label: "herald_jobs_finished_total", dimensions: [("outcome", outcome.rawValue)]).increment()
        events.changed(jobID)
        logger.info("job finished", metadata: ["job_id": "\(jobID)", "outcome": "\(outcome.rawValue)"])
        wakeup.fire()
    }
}

/// Why a job's parent task was stopped from outside.
enum StopReason: Sendable {
    case cancelRequested
    case shutdown
    case lostLease
}

/// A running job's stop switch: the first reason wins, and the signal cancels its parent task.
final class JobControl: Sendable {
    let signal = Signal()
    private let reason = Mutex<StopReason?>(nil)
    let requestedAt = Mutex<ContinuousClock.Instant?>(nil)

    func stop(_ why: StopReason) {
        let first = reason.withLock { reason -> Bool in
            guard reason == nil else { return false }
            reason = why
            return true
        }
        guard first else { return }
        if why == .cancelRequested { requestedAt.withLock { $0 = .now } }
        signal.fire()
    }

    var stopReason: StopReason? { reason.withLock { $0 } }
}
