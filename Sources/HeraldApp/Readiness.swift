import ServiceLifecycle
import Synchronization

/// Whether Herald should get new traffic: false from the moment shutdown begins.
///
/// A `Service` listed last in the group, so it hears graceful shutdown first (the group shuts down in reverse
/// order) and `/readyz` turns 503 at once, before the server quiesces and the runner drains.
final class Readiness: Service, Sendable {
    private let draining = Atomic(false)
    /// Those waiting for shutdown to begin (event streams, which then end cleanly).
    private let waiters = Mutex<[UInt64: CheckedContinuation<Void, Never>]?>([:])
    private let nextWaiter = Atomic<UInt64>(0)
    /// Told at once when shutdown begins (the job runner stops claiming).
    private let onDrain: @Sendable () -> Void

    init(onDrain: @escaping @Sendable () -> Void = {}) {
        self.onDrain = onDrain
    }

    var isDraining: Bool { draining.load(ordering: .relaxed) }

    func run() async throws {
        try? await gracefulShutdown()
        beginDraining()
    }

    func beginDraining() {
        draining.store(true, ordering: .relaxed)
        onDrain()
        // nil from now on: a later waiter returns at once.
        let woken = waiters.withLock { waiters in
            defer { waiters = nil }
            return waiters.map { Array($0.values) } ?? []
        }
        for continuation in woken { continuation.resume() }
    }

    /// Returns once shutdown has begun (at once if it has), or when the calling task is cancelled.
    func waitUntilDraining() async {
        let token = nextWaiter.add(1, ordering: .relaxed).newValue
        await withTaskCancellationHandler {
            await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
                let waiting = waiters.withLock { waiters -> Bool in
                    guard waiters != nil, !Task.isCancelled else { return false }
                    waiters?[token] = continuation
                    return true
                }
                if !waiting { continuation.resume() }
            }
        } onCancel: {
            waiters.withLock { $0?.removeValue(forKey: token) }?.resume()
        }
    }
}
