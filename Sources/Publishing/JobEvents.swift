import Synchronization

/// Tells long-polls that a job changed, so `GET /v1/jobs/{id}?wait=N` answers at once instead of re-reading the row.
///
/// Race-free: take ``generation`` before reading the job, then wait `after:` it; a change in between is not missed.
public final class JobEvents: Sendable {
    private struct State {
        var generation: UInt64 = 0
        /// The generation of each job's last change (pruned to the most recent ones).
        var lastChange: [String: UInt64] = [:]
        var waiters: [UInt64: (jobID: String, continuation: CheckedContinuation<Void, Never>)] = [:]
        var nextWaiter: UInt64 = 0
    }
    private let state = Mutex(State())
    private static let remembered = 10_000

    public init() {}

    /// The current generation: pass it to ``waitForChange(of:after:timeout:)``.
    public var generation: UInt64 { state.withLock { $0.generation } }

    /// Records that `jobID` changed and wakes whoever waits for it.
    public func changed(_ jobID: String) {
        let woken = state.withLock { state -> [CheckedContinuation<Void, Never>] in
            state.generation += 1
            state.lastChange[jobID] = state.generation
            if state.lastChange.count > 2 * Self.remembered {
                let oldest = state.generation - UInt64(Self.remembered)
                state.lastChange = state.lastChange.filter { $0.value > oldest }
            }
            let matching = state.waiters.filter { $0.value.jobID == jobID }
            for key in matching.keys { state.waiters[key] = nil }
            return matching.values.map(\.continuation)
        }
        for continuation in woken { continuation.resume() }
    }

    /// Waits until `jobID` changes after `generation` (at once if it already has), or `timeout` passes.
    public func waitForChange(of jobID: String, after generation: UInt64, timeout: Duration) async {
        await withTaskGroup(of: Void.self) { group in
            group.addTask { await self.change(of: jobID, after: generation) }
            group.addTask { try? await Task.sleep(for: timeout) }
            await group.next()
            group.cancelAll()
        }
    }

    /// Waits until `jobID` next changes, or `timeout` passes.
    public func waitForChange(of jobID: String, timeout: Duration) async {
        await waitForChange(of: jobID, after: generation, timeout: timeout)
    }

    private func change(of jobID: String, after generation: UInt64) async {
        let token = state.withLock { state -> UInt64 in
            state.nextWaiter += 1
            return state.nextWaiter
        }
        await withTaskCancellationHandler {
            await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
                let resumeNow = state.withLock { state -> Bool in
                    if (state.lastChange[jobID] ?? 0) > generation || Task.isCancelled { return true }
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
