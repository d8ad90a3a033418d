import Synchronization

/// Whether PostgreSQL can be reached, as the change listener last found it. While it cannot, calls fail at once (the
/// API's fast 503) rather than wait on a pool that keeps trying to connect, and the calls waiting then fail too.
///
/// The listener decides, not a call's own duration: a call may be slow because the machine is busy or a row is
/// locked, and that is no outage. The listener notices a lost connection at once and connects again at once, so a
/// cut connection alone (`pg_terminate_backend`) is no outage either; a refused connection is, and so is a probe
/// left unanswered on an open one (a server that stopped answering).
final class Reachability: Sendable {
    private struct State {
        /// Why the database cannot be reached; nil while it can, or nothing says otherwise yet.
        var problem: String?
        var watchers: [Int: @Sendable (String) -> Void] = [:]
        var nextToken = 0
    }

    private let state = Mutex(State())

    /// Why the database cannot be reached, or nil.
    var problem: String? { state.withLock { $0.problem } }

    /// Records that the database cannot be reached; the watchers hear it once per outage.
    func markUnreachable(_ reason: String) {
        let watchers = state.withLock { state in
            defer { state.problem = reason }
            return state.problem == nil ? Array(state.watchers.values) : []
        }
        for watcher in watchers { watcher(reason) }
    }

    /// Records that the database answers again.
    func markReachable() {
        state.withLock { $0.problem = nil }
    }

    /// Calls `onUnreachable` when the database is found unreachable (at once if it is) until ``unwatch(_:)``.
    func watch(_ onUnreachable: @escaping @Sendable (String) -> Void) -> Int {
        let (token, problem) = state.withLock { state in
            defer { state.nextToken += 1 }
            state.watchers[state.nextToken] = onUnreachable
            return (state.nextToken, state.problem)
        }
        if let problem { onUnreachable(problem) }
        return token
    }

    /// Stops the watcher `token` names.
    func unwatch(_ token: Int) {
        _ = state.withLock { $0.watchers.removeValue(forKey: token) }
    }
}
