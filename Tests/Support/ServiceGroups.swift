public import ServiceLifecycle

/// Runs `group` while `body` runs, then shuts it down gracefully and waits for its end, whether `body` threw or not:
/// the one way the tests run services (a server, a runner, a whole application).
public func whileRunning<T: Sendable>(_ group: ServiceGroup, _ body: () async throws -> T) async throws -> T {
    try await withThrowingTaskGroup(of: Void.self) { tasks in
        tasks.addTask { try await group.run() }
        do {
            let result = try await body()
            await group.triggerGracefulShutdown()
            try await tasks.waitForAll()
            return result
        } catch {
            await group.triggerGracefulShutdown()
            try? await tasks.waitForAll()
            throw error
        }
    }
}
