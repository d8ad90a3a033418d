public import HeraldCore
import Synchronization

/// One committed change to a job (its row or its uploads), as the writes announce it; or, for subscribers only, news
/// of its running uploads kept in memory (``UploadProgress``).
public struct JobChange: Sendable, Equatable {
    /// What changed.
    public enum Kind: Sendable, Equatable {
        /// A committed write: the job's row or its uploads.
        case committed
        /// A running upload's state or bytes, kept in memory: nothing was written.
        case live
    }

    /// The job that changed.
    public var jobID: JobID
    /// The job's version after the change: it grows by at least one with every committed change.
    public var version: Int
    /// The job's state after the change.
    public var state: JobState
    /// Whether a client has asked to cancel it.
    public var cancelRequested: Bool
    /// A committed change, or bytes only.
    public var kind: Kind

    /// Creates a change.
    public init(jobID: JobID, version: Int, state: JobState, cancelRequested: Bool, kind: Kind = .committed) {
        self.jobID = jobID
        self.version = version
        self.state = state
        self.cancelRequested = cancelRequested
        self.kind = kind
    }
}

/// The job changes this process commits, announced once each transaction has committed (``CommitObserver``).
///
/// Three ways to listen: ``observe(_:)`` calls a function for every change (the runner: wake up, stop a job);
/// ``waitForChange(of:after:timeout:)`` waits for one job (long-polls), race-free with ``generation``;
/// ``subscribe()`` streams every change and the live progress of running uploads (Server-Sent Events).
public final class JobChanges: Sendable {
    private struct State {
        var generation: UInt64 = 0
        /// The generation of each job's last change (pruned to the most recent ones).
        /// Each recently changed job's last change: its generation, and whether it left the job done.
        var lastChange: [JobID: (generation: UInt64, done: Bool)] = [:]
        var waiters: [UInt64: (jobID: JobID, continuation: CheckedContinuation<Void, Never>)] = [:]
        var nextToken: UInt64 = 0
        var observers: [@Sendable (JobChange) -> Void] = []
        var subscribers: [UInt64: AsyncStream<JobChange>.Continuation] = [:]
        var deliveryObservers: [@Sendable () -> Void] = []
        var queueObservers: [@Sendable (_ paused: Bool) -> Void] = []
    }
    private let state = Mutex(State())
    private static let remembered = 10_000

    public init() {}

    /// The current generation: take it before reading a job, then wait `after:` it.
    public var generation: UInt64 { state.withLock { $0.generation } }

    /// Calls `observer` with every change from now on, on the thread that committed it: it must be quick.
    public func observe(_ observer: @escaping @Sendable (JobChange) -> Void) {
        state.withLock { $0.observers.append(observer) }
    }

    /// Every change from now on, until the stream is dropped; a slow reader loses the oldest beyond `buffer`.
    public func subscribe(buffer: Int = 1024) -> AsyncStream<JobChange> {
        let (stream, continuation) = AsyncStream.makeStream(of: JobChange.self, bufferingPolicy: .bufferingNewest(buffer))
        let token = state.withLock { state -> UInt64 in
            state.nextToken += 1
            state.subscribers[state.nextToken] = continuation
            return state.nextToken
        }
        continuation.onTermination = { [weak self] _ in
            _ = self?.state.withLock { $0.subscribers.removeValue(forKey: token) }
        }
        return stream
    }

    /// Calls `observer` after every transaction that wrote webhook deliveries (the outbox), on the thread that
    /// committed it: it must be quick.
    public func observeDeliveries(_ observer: @escaping @Sendable () -> Void) {
        state.withLock { $0.deliveryObservers.append(observer) }
    }

    /// Calls `observer` whenever the queue is paused or resumed (by any replica), on the thread that heard of it: it must
    /// be quick.
    public func observeQueue(_ observer: @escaping @Sendable (_ paused: Bool) -> Void) {
        state.withLock { $0.queueObservers.append(observer) }
    }

    /// Announces that the queue was paused or resumed.
    package func publishQueue(paused: Bool) {
        for observer in state.withLock({ $0.queueObservers }) { observer(paused) }
    }

    /// Announces that a committed transaction wrote webhook deliveries.
    package func publishDeliveries() {
        for observer in state.withLock({ $0.deliveryObservers }) { observer() }
    }

    /// Announces a running upload's live change to the subscribers alone: observers and long-polls wait for commits.
    package func publishLive(_ change: JobChange) {
        let subscribers = state.withLock { Array($0.subscribers.values) }
        for subscriber in subscribers { subscriber.yield(change) }
    }

    /// Announces committed changes: called once their transaction has committed, never inside it.
    package func publish(_ changes: [JobChange]) {
        guard !changes.isEmpty else { return }
        let (woken, observers, subscribers) = state.withLock { state in
            var woken: [CheckedContinuation<Void, Never>] = []
            for change in changes {
                state.generation += 1
                state.lastChange[change.jobID] = (state.generation, change.state.isDone)
                for (token, waiter) in state.waiters where waiter.jobID == change.jobID {
                    state.waiters[token] = nil
                    woken.append(waiter.continuation)
                }
            }
            if state.lastChange.count > 2 * Self.remembered {
                let oldest = state.generation - UInt64(Self.remembered)
                state.lastChange = state.lastChange.filter { $0.value.generation > oldest }
            }
            return (woken, state.observers, Array(state.subscribers.values))
        }
        for continuation in woken { continuation.resume() }
        for change in changes {
            for observer in observers { observer(change) }
            for subscriber in subscribers { subscriber.yield(change) }
        }
    }

    /// Whether `jobID` changed after `generation` and its last change (committed in this process) left it not done:
    /// then a reader waiting for the job's end need not read it again.
    public func changedButNotDone(_ jobID: JobID, after generation: UInt64) -> Bool {
        state.withLock { state in
            guard let last = state.lastChange[jobID] else { return false }
            return last.generation > generation && !last.done
        }
    }

    /// Waits until `jobID` changes after `generation` (at once if it already has), or `timeout` passes.
    public func waitForChange(of jobID: JobID, after generation: UInt64, timeout: Duration) async {
        _ = try? await withTimeout(timeout) { await self.change(of: jobID, after: generation) }
    }

    private func change(of jobID: JobID, after generation: UInt64) async {
        let token = state.withLock { state -> UInt64 in
            state.nextToken += 1
            return state.nextToken
        }
        await withTaskCancellationHandler {
            await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
                let resumeNow = state.withLock { state -> Bool in
                    if (state.lastChange[jobID]?.generation ?? 0) > generation || Task.isCancelled { return true }
                    state.waiters[token] = (jobID, continuation)
                    return false
                }
                if resumeNow { continuation.resume() }
            }
        } onCancel: {
            let waiter = state.withLock { state in state.waiters.removeValue(forKey: token) }
            waiter?.continuation.resume()
        }
    }
}
