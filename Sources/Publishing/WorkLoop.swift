public import HeraldCore
import Logging
import Metrics
import Synchronization

/// One kind of durable background work, as the ``WorkLoop`` that drains it sees it: jobs, webhook deliveries,
/// object deletions. Each item's retries are the queue's own (by its ``RetryStrategy``), written with its outcome.
public protocol WorkQueue: Sendable {
    /// One claimed unit of work.
    associatedtype Item: Sendable
    /// What tells items apart while they are in hand.
    associatedtype ItemID: Hashable & Sendable

    /// The item's id.
    func id(of item: Item) -> ItemID
    /// Before each claim: promote what fell due, reclaim what lost its lease; how often is the queue's choice.
    func prepare(now: Timestamp) async throws
    /// Up to `limit` due items, claimed (and leased, where the queue leases); `inHand` are being worked here now.
    func claim(upTo limit: Int, inHand: Set<ItemID>, now: Timestamp) async throws -> [Item]
    /// When the next item not in hand falls due; nil when none waits (the loop then sleeps until woken).
    func nextDue(inHand: Set<ItemID>) async throws -> Timestamp?
    /// Renews the leases of the items in hand, all at once every heartbeat: whether each is to go on (one missing from
    /// the answer is lost). Never called without a heartbeat.
    func renew(_ items: [Item]) async throws -> [ItemID: WorkLoop<Self>.Renewal]
    /// Works one item to its end and records it. The work is cancelled when `control` stops it (its reason says why).
    func work(_ item: Item, control: WorkControl) async
}

extension WorkQueue {
    public func prepare(now: Timestamp) async throws {}
    public func renew(_ items: [Item]) async throws -> [ItemID: WorkLoop<Self>.Renewal] {
        Dictionary(items.map { (id(of: $0), .held) }) { first, _ in first }
    }
}

/// Why an item's work was stopped from outside.
public enum WorkStop: Sendable, Equatable {
    /// A client asked (a job's cancel).
    case stopRequested
    /// The process is shutting down and the grace period is over.
    case shutdown
    /// Another process holds the item now: nothing of it may be written (fencing).
    case lostLease
}

/// An item's stop switch: the first reason wins; the loop cancels the item's work when it fires.
public final class WorkControl: Sendable {
    let signal = Signal()
    private let reason = Mutex<WorkStop?>(nil)
    private let stoppedAt = Mutex<ContinuousClock.Instant?>(nil)

    public init() {}

    /// Stops the work for `why`, unless it was stopped already.
    public func stop(_ why: WorkStop) {
        let first = reason.withLock { reason -> Bool in
            guard reason == nil else { return false }
            reason = why
            return true
        }
        guard first else { return }
        stoppedAt.withLock { $0 = .now }
        signal.fire()
    }

    /// Why the work was stopped; nil while it runs on.
    public var stopReason: WorkStop? { reason.withLock { $0 } }
    /// When it was stopped.
    public var stopTime: ContinuousClock.Instant? { stoppedAt.withLock { $0 } }
}

/// Drains one ``WorkQueue``: claims due items while workers are free, works each as a child task of one bounded group
/// (their leases renewed together every heartbeat, where the queue leases), and sleeps until woken (``wake()``: a committed
/// change the queue listens for, an item's end) or until the next item falls due, `idle` at the longest.
///
/// Shutdown: ``stopClaiming()``, then the items in hand get `shutdownGrace` to finish, then each is stopped
/// (``WorkStop/shutdown``) and awaited. The one mechanism under the job runner, the webhook dispatcher and the object
/// clean-up, so that claims, leases, wake-ups and shutdown behave alike (and replicas share one implementation).
public final class WorkLoop<Queue: WorkQueue>: Sendable {
    /// What a lease renewal found.
    public enum Renewal: Sendable {
        /// Still held: go on.
        case held
        /// Held, but a client asked to stop it.
        case stopRequested
        /// Another process holds it now.
        case lost
    }

    /// How the loop works its queue.
    public struct Configuration: Sendable {
        /// Items worked at once.
        public var concurrency: Int
        /// The longest sleep: how often `prepare` runs when nothing wakes the loop.
        public var idle: Duration
        /// How often an item's lease is renewed; nil when the queue does not lease.
        public var heartbeat: Duration?
        /// How long items in hand may go on once shutdown starts.
        public var shutdownGrace: Duration
        /// How soon the queue is read again after it failed (the database may be back soon).
        public var retryAfterError: Duration
        /// The gauge that says how many items are in hand, if any (`herald_jobs_running`); none unless set.
        public var gauge: String?

        public init(concurrency: Int, idle: Duration, heartbeat: Duration? = nil, shutdownGrace: Duration, retryAfterError: Duration = .seconds(5)) {
            self.concurrency = concurrency
            self.idle = idle
            self.heartbeat = heartbeat
            self.shutdownGrace = shutdownGrace
            self.retryAfterError = retryAfterError
        }
    }

    private let queue: Queue
    private let configuration: Configuration
    private let logger: Logger
    private let wakeup = Signal()
    private let stopping = Atomic(false)
    /// Fired, and set, once ``run()`` has drained and returns.
    private let finished = Signal()
    private let ended = Atomic(false)
    private let paused = Atomic(false)
    /// An item in hand and its stop switch.
    private struct Held: Sendable {
        let item: Queue.Item
        let control: WorkControl
    }

    /// The items in hand, by id: behind a lock, since changes are heard on the committing thread.
    private let inHand = Mutex<[Queue.ItemID: Held]>([:])

    public init(queue: Queue, configuration: Configuration, logger: Logger) {
        self.queue = queue
        self.configuration = configuration
        self.logger = logger
    }

    // MARK: Control

    /// Runs the loop at once rather than at its next timer.
    public func wake() { wakeup.fire() }

    /// Stops claiming; the items in hand get the grace period. May come before the service group's own shutdown.
    public func stopClaiming() {
        stopping.store(true, ordering: .relaxed)
        wakeup.fire()
    }

    /// Whether claims are paused (items in hand go on).
    public var isPaused: Bool {
        get { paused.load(ordering: .relaxed) }
        set {
            paused.store(newValue, ordering: .relaxed)
            wakeup.fire()
        }
    }

    /// How many items are in hand.
    public var count: Int { inHand.withLock { $0.count } }

    /// Whether ``run()`` has drained its items and returned.
    public var hasStopped: Bool { ended.load(ordering: .relaxed) }

    /// Returns once the loop has stopped (for the one task that waits for it), or after `timeout`.
    public func waitUntilStopped(timeout: Duration) async { await finished.wait(timeout: timeout) }

    /// Stops the item `id` if it is in hand here.
    public func stop(_ id: Queue.ItemID, _ why: WorkStop) {
        inHand.withLock { $0[id] }?.control.stop(why)
    }

    // MARK: The loop

    /// Claims and works items until ``stopClaiming()`` or cancellation; then drains.
    public func run() async {
        await withDiscardingTaskGroup { renewing in
            if let heartbeat = configuration.heartbeat { renewing.addTask { await self.renewLeases(every: heartbeat) } }
            await work()
            renewing.cancelAll()
        }
        ended.store(true, ordering: .relaxed)
        finished.fire()
    }

    /// The claims and the items' group, until every item in hand has ended.
    private func work() async {
        await withDiscardingTaskGroup { group in
            while !stopping.load(ordering: .relaxed), !Task.isCancelled {
                var timeout = configuration.idle
                do {
                    try await queue.prepare(now: .now())
                    // As many items as there are free workers, in one claim.
                    while !paused.load(ordering: .relaxed), !stopping.load(ordering: .relaxed) {
                        let held = Set(inHand.withLock { $0.keys })
                        let free = configuration.concurrency - held.count
                        guard free > 0 else { break }
                        let claimed = try await queue.claim(upTo: free, inHand: held, now: .now())
                        for item in claimed { start(item, in: &group) }
                        if claimed.count < free { break }
                    }
                    if let next = try await queue.nextDue(inHand: Set(inHand.withLock { $0.keys })) {
                        timeout = min(timeout, .milliseconds(max(0, next.milliseconds(since: .now()))))
                    }
                } catch {
                    logger.error("work queue error", metadata: ["error": "\(error)"])
                    timeout = min(timeout, configuration.retryAfterError)
                }
                await wakeup.wait(timeout: max(timeout, .milliseconds(1)))
            }
            await drain()
        }
    }

    private func start(_ item: Queue.Item, in group: inout DiscardingTaskGroup) {
        let control = WorkControl()
        let id = queue.id(of: item)
        record(
            inHand.withLock { inHand in
                inHand[id] = Held(item: item, control: control)
                return inHand.count
            })
        group.addTask {
            await self.work(item, control: control)
            self.record(
                self.inHand.withLock { inHand in
                    inHand.removeValue(forKey: id)
                    return inHand.count
                })
            self.wakeup.fire()
        }
    }

    /// The item's work beside its stop switch: a stop cancels the work, which then ends as it sees fit.
    private func work(_ item: Queue.Item, control: WorkControl) async {
        await withTaskGroup(of: Bool.self) { scope in
            scope.addTask {
                await self.queue.work(item, control: control)
                return true
            }
            scope.addTask {
                while !Task.isCancelled, control.stopReason == nil { await control.signal.wait(timeout: .seconds(3600)) }
                return false
            }
            // Whichever ends first, the other is cancelled: the work when stopped, the wait when the work is done.
            while let workEnded = await scope.next() {
                scope.cancelAll()
                if workEnded { break }
            }
        }
    }

    /// Renews the leases of every item in hand, in one call each `heartbeat`, and stops those lost or asked to stop;
    /// until cancelled.
    private func renewLeases(every heartbeat: Duration) async {
        while (try? await Task.sleep(for: heartbeat)) != nil {
            let held = inHand.withLock { Array($0.values) }.filter { $0.control.stopReason == nil }
            guard !held.isEmpty else { continue }
            do {
                let renewals = try await queue.renew(held.map(\.item))
                for entry in held {
                    switch renewals[queue.id(of: entry.item)] ?? .lost {
                    case .held: break
                    case .stopRequested: entry.control.stop(.stopRequested)
                    case .lost: entry.control.stop(.lostLease)
                    }
                }
            } catch {
                logger.warning("lease renewal failed", metadata: ["error": "\(error)"])
            }
        }
    }

    private func record(_ count: Int) {
        if let gauge = configuration.gauge { Gauge(label: gauge).record(count) }
    }

    /// Gives the items in hand the grace period, then stops them and waits for their ends (the group does).
    private func drain() async {
        guard count > 0 else { return }
        logger.info("waiting for the work in hand", metadata: ["count": "\(count)"])
        let deadline = ContinuousClock.now + configuration.shutdownGrace
        while count > 0, ContinuousClock.now < deadline {
            await wakeup.wait(timeout: deadline - ContinuousClock.now)
        }
        for held in inHand.withLock({ Array($0.values) }) { held.control.stop(.shutdown) }
    }
}
