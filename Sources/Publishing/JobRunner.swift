public import HeraldCore
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
    /// How long an upload waits before it is tried again after a transient failure.
    public var uploadRetry: RetryStrategy
    /// Staged paths in the database are relative to this.
    public var dataDirectory: String
    /// Re-queue every running job at start, lease or not: only for the one process that holds the data directory's
    /// lock (a crashed run's jobs then resume at once instead of after their lease).
    public var reclaimRunningAtStart: Bool

    /// What `herald serve`'s options set has no default here (their defaults are `HeraldConfiguration`'s); the rest
    /// has no option.
    public init(
        workers: Int,
        uploadConcurrency: Int,
        uploadAttempts: Int,
        uploadTimeout: Duration,
        shutdownGrace: Duration,
        lease: Duration = .seconds(30),
        heartbeat: Duration = .seconds(10),
        reclaimInterval: Duration = .seconds(10),
        uploadRetry: RetryStrategy = .uploads(),
        dataDirectory: String,
        reclaimRunningAtStart: Bool = false
    ) {
        self.workers = workers
        self.uploadConcurrency = uploadConcurrency
        self.uploadAttempts = uploadAttempts
        self.uploadTimeout = uploadTimeout
        self.shutdownGrace = shutdownGrace
        self.lease = lease
        self.heartbeat = heartbeat
        self.reclaimInterval = reclaimInterval
        self.uploadRetry = uploadRetry
        self.dataDirectory = dataDirectory
        self.reclaimRunningAtStart = reclaimRunningAtStart
    }
}

/// Claims jobs from the durable queue and publishes each as one parent task with a task group of uploads.
///
/// A job's uploads run at most `uploadConcurrency` at once; transient failures are retried with backoff; the post is
/// committed in one transaction only when every upload succeeded. A failure for good cancels the other uploads and
/// deletes what was stored; so does a cancel by id. On shutdown running jobs get `shutdownGrace`, then are re-queued.
public actor JobRunner: Service {
    private let jobs: any JobRepository
    private let store: any MediaStore
    private let cleaner: ObjectCleaner?
    private let configuration: RunnerConfiguration
    private let logger: Logger
    /// This process's name in `jobs.locked_by`.
    public nonisolated let runnerID = "runner-" + Identifier.generate()
    private let wakeup = Signal()
    private var paused = false
    /// Set from the graceful-shutdown handler, which cannot wait for the actor.
    private let draining = Atomic(false)
    /// The jobs this process runs, by id: behind a lock because job changes are heard on the committing thread.
    private let running = Mutex<[JobID: JobControl]>([:])

    /// - Parameter changes: the committed job changes; the runner wakes for a queued or newly scheduled job and stops
    ///   a job whose cancel was requested, whoever wrote the change.
    ///   - cleaner: the durable clean-up of failed and cancelled jobs' objects, whose DELETEs new uploads wait for.
    public init(
        jobs: any JobRepository, store: any MediaStore, cleaner: ObjectCleaner? = nil, changes: JobChanges, configuration: RunnerConfiguration,
        logger: Logger
    ) {
        self.jobs = jobs
        self.store = store
        self.cleaner = cleaner
        self.configuration = configuration
        self.logger = logger
        changes.observe { [weak self] change in
            guard let self else { return }
            // Queued: claim it; scheduled (a new post for later): its `run_at` may be the next timer.
            if change.state == .queued || change.state == .scheduled { self.wakeup.fire() }
            if change.cancelRequested, change.state == .running {
                self.running.withLock { $0[change.jobID] }?.stop(.cancelRequested)
            }
        }
    }

    // MARK: Control

    /// Stops claiming and starts the grace period for running jobs: called when shutdown begins, before this
    /// service's own turn (the group stops the HTTP server first, which may take a while).
    public nonisolated func stopClaiming() {
        draining.store(true, ordering: .relaxed)
        wakeup.fire()
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
        (paused, configuration.workers, running.withLock { $0.count })
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
        if configuration.reclaimRunningAtStart {
            do {
                for jobID in try await jobs.reclaimRunning() {
                    logger.notice("job was running when the last process stopped: back to queued", metadata: ["job_id": "\(jobID)"])
                }
            } catch {
                logger.error("cannot re-queue the jobs left running", metadata: ["error": "\(error)"])
            }
        }
        var lastReclaim = ContinuousClock.now - configuration.reclaimInterval
        // When the earliest scheduled job is due, as last read: unknown at start, so looked for at once.
        var nextScheduled: Timestamp? = .now()
        while !draining.load(ordering: .relaxed), !Task.isCancelled {
            do {
                if ContinuousClock.now - lastReclaim >= configuration.reclaimInterval {
                    lastReclaim = .now
                    for jobID in try await jobs.reclaimExpired(now: .now()) {
                        logger.notice("job lease expired: back to queued", metadata: ["job_id": "\(jobID)"])
                    }
                }
                // Only once one is due: the runner wakes at every job's end, and a write each time would queue behind
                // (and wait for) other transactions' commits.
                if let nextScheduled, nextScheduled <= .now() { _ = try await jobs.promoteDue(now: .now()) }
                // As many jobs as there are free workers, in one transaction.
                while !paused, !draining.load(ordering: .relaxed) {
                    let free = configuration.workers - running.withLock { $0.count }
                    guard free > 0 else { break }
                    let lease = Timestamp.now().adding(configuration.lease)
                    let claimed = try await jobs.claim(upTo: free, runner: runnerID, leaseUntil: lease, now: .now())
                    for job in claimed { start(job, in: &group) }
                    if claimed.count < free { break }
                }
            } catch {
                logger.error("job queue error", metadata: ["error": "\(error)"])
            }
            do {
                nextScheduled = try await jobs.nextScheduledRunAt()
                await wakeup.wait(timeout: idleTimeout(nextScheduled: nextScheduled))
            } catch {
                // Looked for again at the next pass, which comes at the reclaim interval at the latest.
                nextScheduled = .now()
                await wakeup.wait(timeout: configuration.reclaimInterval)
            }
        }
    }

    /// Until the next scheduled job is due, or the next reclaim pass.
    private func idleTimeout(nextScheduled: Timestamp?) -> Duration {
        var timeout = configuration.reclaimInterval
        if let next = nextScheduled {
            let millis = max(0, next.milliseconds(since: .now()))
            timeout = min(timeout, .milliseconds(millis))
        }
        return timeout
    }

    /// Gives running jobs the grace period, then stops them for re-queueing.
    private func drain() async {
        let count = running.withLock { $0.count }
        guard count > 0 else { return }
        logger.info("waiting for running jobs", metadata: ["count": "\(count)"])
        let deadline = ContinuousClock.now + configuration.shutdownGrace
        while !running.withLock({ $0.isEmpty }), ContinuousClock.now < deadline {
            await wakeup.wait(timeout: deadline - ContinuousClock.now)
        }
        for control in running.withLock({ Array($0.values) }) { control.stop(.shutdown) }
    }

    private func start(_ job: ClaimedJob, in group: inout DiscardingTaskGroup) {
        let control = JobControl()
        let count = running.withLock { running in
            running[job.jobID] = control
            return running.count
        }
        Gauge(label: "herald_jobs_running").record(count)
        logger.info("job started", metadata: ["job_id": "\(job.jobID)", "post_id": "\(job.postID)", "attempt": "\(job.attempt)"])
        let execution = Execution(
            job: job,
            control: control,
            jobs: jobs,
            store: store,
            cleaner: cleaner,
            configuration: configuration,
            runnerID: runnerID,
            logger: logger
        )
        group.addTask {
            let outcome = await execution.run()
            await self.finished(job.jobID, outcome: outcome)
        }
    }

    private func finished(_ jobID: JobID, outcome: Execution.Outcome) {
        let count = running.withLock { running in
            running[jobID] = nil
            return running.count
        }
        Gauge(label: "herald_jobs_running").record(count)
        Counter(label: "herald_jobs_finished_total", dimensions: [("outcome", outcome.rawValue)]).increment()
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
