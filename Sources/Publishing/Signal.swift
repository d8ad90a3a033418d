import HeraldCore
import Synchronization

/// A wake-up that one waiter at a time can await: `fire()` before `wait` is remembered (level, not edge).
public final class Signal: Sendable {
    private struct State {
        var fired = false
        var waiter: CheckedContinuation<Void, Never>?
    }
    private let state = Mutex(State())

    public init() {}

    /// Wakes the waiter, or the next one if none waits now.
    public func fire() {
        let waiter = state.withLock { state -> CheckedContinuation<Void, Never>? in
            // Handed to the waiter, or kept for the next: a fire is consumed exactly once, never dropped.
            guard let waiter = state.waiter else {
                state.fired = true
                return nil
            }
            state.waiter = nil
            return waiter
        }
        waiter?.resume()
    }

    /// Returns once fired (consuming it), when `timeout` passes, or when the task is cancelled.
    public func wait(timeout: Duration) async {
        _ = try? await withTimeout(timeout) { await self.next() }
    }

    private func next() async {
        await withTaskCancellationHandler {
            await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
                let resumeNow = state.withLock { state -> Bool in
                    if state.fired {
                        state.fired = false
                        return true
                    }
                    if Task.isCancelled { return true }
                    state.waiter = continuation
                    return false
                }
                if resumeNow { continuation.resume() }
            }
        } onCancel: {
            let waiter = state.withLock { state in
                defer { state.waiter = nil }
                return state.waiter
            }
            waiter?.resume()
        }
    }
}
