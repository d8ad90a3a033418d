public import HeraldCore
public import HeraldStorage
public import Logging
import Metrics
public import ServiceLifecycle
import Synchronization
import Telemetry
public import Tracing

/// How the runner works its queue.
public struct RunnerConfiguration: Sendable {
    /// Jobs running at once.
    public var workers: Int
    /// Most jobs of one tenant running at once, over every runner; nil: no cap (tenants still take turns).
    public var tenantCap: Int?
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
    /// Where the media's staged bytes are: the paths the rows hold are relative to it.
    public var staging: StagedBytes
    /// This runner's name in `jobs.locked_by`: the replica's id (`--replica-id`).
    public var runnerID: String
    /// Which running jobs go back to the queue at start, lease or not, so that they resume at once instead of after
    /// their lease.
    public var reclaimAtStart: StartReclaim
    /// Traces each job run, its upload attempts and the store's requests when set; nil costs nothing.
    public var tracer: (any Tracer)?

    /// Which running jobs a runner re-queues as it starts.
    public enum StartReclaim: Sendable {
        /// None: they wait for their leases to end.
        case none
        /// Every one: only for the one process that holds the data directory's lock (SQLite).
        case everyJob
        /// Those held under this runner's name: a replica restarted with its own id takes its jobs back.
        case ownJobs
    }

    /// What `herald serve`'s options set has no default here (their defaults are `HeraldConfiguration`'s); the rest
    /// has no option.
    public init(
        workers: Int,
        tenantCap: Int? = nil,
        uploadConcurrency: Int,
        uploadAttempts: Int,
        uploadTimeout: Duration,
        shutdownGrace: Duration,
        lease: Duration = .seconds(30),
        heartbeat: Duration = .seconds(10),
        reclaimInterval: Duration = .seconds(10),
        uploadRetry: RetryStrategy = .uploads(),
        staging: StagedBytes,
        runnerID: String = "runner-" + Identifier.generate(),
        reclaimAtStart: StartReclaim = .none,
        tracer: (any Tracer)? = nil
    ) {
        self.tracer = tracer
        self.workers = workers
        self.tenantCap = tenantCap
        self.uploadConcurrency = uploadConcurrency
        self.uploadAttempts = uploadAttempts
        self.uploadTimeout = uploadTimeout
        self.shutdownGrace = shutdownGrace
        self.lease = lease
        self.heartbeat = heartbeat
        self.reclaimInterval = reclaimInterval
        self.uploadRetry = uploadRetry
        self.staging = staging
        self.runnerID = runnerID
        self.reclaimAtStart = reclaimAtStart
    }
}

/// Where a job finds its media's staged bytes.
public enum StagedBytes: Sendable, Equatable {
    /// Files under this directory, the one process's data directory (SQLite): each upload reads its file.
    case directory(String)
    /// Objects in the media store itself, which every replica reads (PostgreSQL): each upload is a copy in the store.
    case store
}

/// Claims jobs from the durable queue and publishes each as one parent task with a task group of uploads.
///
/// A job's uploads run at most `uploadConcurrency` at once; transient failures are retried with backoff; the post is
/// committed in one transaction only when every upload succeeded. A failure for good cancels the other uploads and
/// deletes what was stored; so does a cancel by id. On shutdown running jobs get `shutdownGrace`, then are re-queued.
/// The claims, leases, wake-ups and shutdown are the ``WorkLoop``'s, over the jobs table (``JobQueue``).
public actor JobRunner: Service {
    private let jobs: any JobRepository
    /// The shared pause switch and the replicas' heartbeats; nil: this runner's own switch alone (some tests).
    private let queue: (any QueueRepository)?
    private let configuration: RunnerConfiguration
    private let logger: Logger
    /// This process's name in `jobs.locked_by`.
    public nonisolated let runnerID: String
    private let loop: WorkLoop<JobQueue>

    /// - Parameter changes: the committed job changes; the runner wakes for a queued or newly scheduled job and stops
    ///   a job whose cancel was requested, whoever wrote the change.
    ///   - cleaner: the durable clean-up of failed and cancelled jobs' objects, whose DELETEs new uploads wait for.
    ///   - queue: the pause switch every replica shares (read at start, heard when it changes, read again with each
    ///     heartbeat) and where this runner says it is alive.
    public init(
        jobs: any JobRepository, queue: (any QueueRepository)? = nil, store: any MediaStore, cleaner: ObjectCleaner? = nil, changes: JobChanges,
        configuration: RunnerConfiguration, logger: Logger
    ) {
        let runnerID = configuration.runnerID
        self.jobs = jobs
        self.queue = queue
        self.configuration = configuration
        self.logger = logger
        self.runnerID = runnerID
        var loopConfiguration = WorkLoop<JobQueue>.Configuration(
            concurrency: configuration.workers, idle: configuration.reclaimInterval, heartbeat: configuration.heartbeat,
            shutdownGrace: configuration.shutdownGrace)
        loopConfiguration.gauge = "herald_jobs_running"
        let loop = WorkLoop(
            queue: JobQueue(jobs: jobs, store: store, cleaner: cleaner, configuration: configuration, runnerID: runnerID, logger: logger),
            configuration: loopConfiguration, logger: logger)
        self.loop = loop
        changes.observe { change in
            // Queued: claim it; scheduled (a new post for later): its `run_at` may be the next timer.
            if change.state == .queued || change.state == .scheduled { loop.wake() }
            if change.cancelRequested, change.state == .running { loop.stop(change.jobID, .stopRequested) }
        }
        changes.observeQueue { paused in loop.isPaused = paused }
    }

    // MARK: Control

    /// Stops claiming and starts the grace period for running jobs: called when shutdown begins, before this
    /// service's own turn (the group stops the HTTP server first, which may take a while).
    public nonisolated func stopClaiming() { loop.stopClaiming() }

    /// Whether paused, the worker limit, and the jobs this process runs now.
    public func status() -> (paused: Bool, workers: Int, running: Int) {
        (loop.isPaused, configuration.workers, loop.count)
    }

    // MARK: The loop

    public func run() async throws {
        if configuration.reclaimAtStart != .none {
            do {
                let runner = configuration.reclaimAtStart == .ownJobs ? runnerID : nil
                for jobID in try await jobs.reclaimRunning(heldBy: runner) {
                    logger.notice("job was running when the last process stopped: back to queued", metadata: ["job_id": "\(jobID)"])
                }
            } catch {
                logger.error("cannot re-queue the jobs left running", metadata: ["error": "\(error)"])
            }
        }
        if let queue {
            do {
                loop.isPaused = try await queue.isPaused()
                if loop.isPaused { logger.notice("the queue is paused: no job is claimed until it is resumed") }
            } catch {
                logger.error("cannot read whether the queue is paused", metadata: ["error": "\(error)"])
            }
        }
        await withGracefulShutdownHandler {
            await withDiscardingTaskGroup { group in
                group.addTask { await self.loop.run() }
                if let queue = self.queue {
                    group.addTask { await self.beat(queue) }
                }
            }
            // Gone: no longer counted among the live replicas.
            try? await queue?.leave(replica: runnerID)
        } onGracefulShutdown: {
            self.stopClaiming()
        }
        // Stopped early by `stopClaiming()`: still return only when the group asks (or cancels).
        try? await gracefulShutdown()
        logger.info("job runner stopped")
    }
}

extension JobRunner {
    /// Says this runner is alive every lease renewal, until the loop has stopped; learns the pause switch each time (a
    /// backstop for an announcement lost between replicas).
    private nonisolated func beat(_ queue: any QueueRepository) async {
        while !loop.hasStopped, !Task.isCancelled {
            do {
                let paused = try await queue.heartbeat(
                    replica: runnerID, workers: configuration.workers, until: Timestamp.now().adding(configuration.lease))
                if loop.isPaused != paused { loop.isPaused = paused }
            } catch {
                logger.warning("heartbeat failed", metadata: ["error": "\(error)"])
            }
            await loop.waitUntilStopped(timeout: configuration.heartbeat)
        }
    }
}

/// The jobs table as a ``WorkQueue``: claims leased to this runner, scheduled jobs promoted when due, expired leases
/// reclaimed every `reclaimInterval`, a cancel made by another process seen at the lease's renewal.
final class JobQueue: WorkQueue {
    private struct State {
        var lastReclaim: ContinuousClock.Instant?
        /// When the earliest scheduled job is due, as last read: unknown at start, so looked for at once.
        var nextScheduled: Timestamp? = .now()
    }

    private let jobs: any JobRepository
    private let store: any MediaStore
    private let cleaner: ObjectCleaner?
    private let configuration: RunnerConfiguration
    private let runnerID: String
    private let logger: Logger
    private let state = Mutex(State())

    init(
        jobs: any JobRepository, store: any MediaStore, cleaner: ObjectCleaner?, configuration: RunnerConfiguration, runnerID: String, logger: Logger
    ) {
        self.jobs = jobs
        self.store = store
        self.cleaner = cleaner
        self.configuration = configuration
        self.runnerID = runnerID
        self.logger = logger
    }

    func id(of item: ClaimedJob) -> JobID { item.jobID }

    func prepare(now: Timestamp) async throws {
        let reclaim = state.withLock { state in
            guard state.lastReclaim.map({ ContinuousClock.now - $0 >= configuration.reclaimInterval }) ?? true else { return false }
            state.lastReclaim = .now
            return true
        }
        if reclaim {
            for jobID in try await jobs.reclaimExpired(now: now) {
                logger.notice("job lease expired: back to queued", metadata: ["job_id": "\(jobID)"])
            }
        }
        // Only once one is due: the runner wakes at every job's end, and a write each time would queue behind (and
        // wait for) other transactions' commits.
        if let next = state.withLock({ $0.nextScheduled }), next <= now { _ = try await jobs.promoteDue(now: now) }
    }

    func claim(upTo limit: Int, inHand: Set<JobID>, now: Timestamp) async throws -> [ClaimedJob] {
        try await jobs.claim(upTo: limit, runner: runnerID, leaseUntil: now.adding(configuration.lease), now: now, tenantCap: configuration.tenantCap)
    }

    func nextDue(inHand: Set<JobID>) async throws -> Timestamp? {
        do {
            let next = try await jobs.nextScheduledRunAt()
            state.withLock { $0.nextScheduled = next }
            return next
        } catch {
            // Looked for again at the next pass.
            state.withLock { $0.nextScheduled = .now() }
            throw error
        }
    }

    func renew(_ items: [ClaimedJob]) async throws -> [JobID: WorkLoop<JobQueue>.Renewal] {
        let renewal = try await jobs.renewLeases(items.map(\.lease), until: Timestamp.now().adding(configuration.lease))
        var renewals: [JobID: WorkLoop<JobQueue>.Renewal] = [:]
        for item in items {
            renewals[item.jobID] =
                !renewal.held.contains(item.jobID) ? .lost : renewal.cancelRequested.contains(item.jobID) ? .stopRequested : .held
        }
        return renewals
    }

    func work(_ job: ClaimedJob, control: WorkControl) async {
        // Traced, the run is a span of its own trace, linked to the request that made the job; its lines carry its ids.
        let span = configuration.tracer.map { Self.startSpan(of: job, tracer: $0) }
        var logger = logger
        if let span, let tracer = configuration.tracer { TraceParent(of: span.context, tracer: tracer)?.annotate(&logger) }
        logger.info("job started", metadata: ["job_id": "\(job.jobID)", "post_id": "\(job.postID)", "attempt": "\(job.attempt)"])
        let execution = Execution(
            job: job, control: control, jobs: jobs, store: store, cleaner: cleaner, configuration: configuration,
            logger: logger)
        let outcome: Execution.Outcome
        if let span {
            outcome = await ServiceContext.withValue(span.context) { await execution.run() }
            span.attributes["herald.job.outcome"] = outcome.rawValue
            if outcome == .failed || outcome == .error { span.setStatus(SpanStatus(code: .error)) }
            span.end()
        } else {
            outcome = await execution.run()
        }
        Counter(label: "herald_jobs_finished_total", dimensions: [("outcome", outcome.rawValue)]).increment()
        logger.info("job finished", metadata: ["job_id": "\(job.jobID)", "outcome": "\(outcome.rawValue)"])
    }

    /// The span of one run of `job`: a consumer's (the job was taken from a queue), linked to the request's span.
    private static func startSpan(of job: ClaimedJob, tracer: any Tracer) -> any Span {
        let span = tracer.startSpan("publish", context: ServiceContext.topLevel, ofKind: .consumer)
        span.attributes["herald.job.id"] = job.jobID.rawValue
        span.attributes["herald.post.id"] = job.postID.rawValue
        span.attributes["herald.job.attempt"] = job.attempt
        // Stored with the job: whichever replica runs it, after whatever restart, links to the same request.
        if let text = job.traceparent, let parent = TraceParent(text) {
            span.addLink(SpanLink(context: parent.context(tracer: tracer), attributes: [:]))
        }
        return span
    }
}
