/// Runs `operation` for at most `timeout`: its result, or nil once `timeout` passed first.
///
/// The one race of an operation against the clock: the loser is cancelled and awaited before this returns, so nothing of
/// it outlives the call. An error of `operation` (or the caller's cancellation, ending the sleep) is thrown.
public func withTimeout<T: Sendable>(_ timeout: Duration, _ operation: @escaping @Sendable () async throws -> T) async throws -> T? {
    try await withThrowingTaskGroup(of: T?.self) { group in
        group.addTask { try await operation() }
        group.addTask {
            try await Task.sleep(for: timeout)
            return nil
        }
        defer { group.cancelAll() }
        return try await group.next() ?? nil
    }
}
