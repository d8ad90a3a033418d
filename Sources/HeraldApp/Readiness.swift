import ServiceLifecycle
import Synchronization

/// Whether Herald should get new traffic: false from the moment shutdown begins.
///
/// A `Service` listed last in the group, so it hears graceful shutdown first (the group shuts down in reverse
/// order) and `/readyz` turns 503 at once, before the server quiesces and the runner drains.
final class Readiness: Service, Sendable {
    private let draining = Atomic(false)
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
    }
}
