import NIOPosix

/// A blocking call (an `fsync`), for ``BlockingWork``.
public typealias BlockingStep = @Sendable () throws -> Void

/// Blocking work (an `fsync`, a blocking database call) on NIO's blocking-I/O pool, run to its end even if the awaiting
/// task is cancelled meanwhile: `NIOThreadPool.runIfActive` drops work a cancelled task submitted that has not started,
/// which would lose what a dropped connection delivered.
public enum BlockingWork {
    /// `body`'s result once a pool thread has run it; throws only its error (or that the pool has stopped).
    public static func run<T: Sendable>(_ body: @escaping @Sendable () throws -> T) async throws -> T {
        try await withCheckedThrowingContinuation { continuation in
            NIOThreadPool.singleton.submit { state in
                guard state == .active else { return continuation.resume(throwing: NIOThreadPoolError.ThreadPoolInactive()) }
                continuation.resume(with: Result(catching: body))
            }
        }
    }
}
